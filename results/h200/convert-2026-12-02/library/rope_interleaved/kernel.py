"""
---
id: kernels/rope_interleaved/packed_pairs
op: rope_interleaved
category: Math
dtypes: [bfloat16]
techniques: [rope, interleaved-rotation, position-gather, multi-head-per-program, 2d-tiling, vectorized-access, fp32-accumulation, single-rounding, int64-indexing]
params:
  HB: [8, 16, 32, 64]
  TOK: [1, 2, 4]
  num_warps: [1, 2, 4, 8]
summary: Each GPT-J pair (x[2i], x[2i+1]) of bf16 is one 32-bit word; [HB, D/2] word tiles are loaded contiguously, unpacked to fp32 with shifts (bf16 -> fp32 is exact), rotated, rounded to bf16 and repacked - no stride-2 access and no register shuffles; 1-D token-major grid over (token block, head block), q blocks then k blocks.
---
Design. In memory a pair is two adjacent bf16, i.e. one little-endian 32-bit word: x[2i] in the
low half, x[2i+1] in the high half. Loading a head as D/2 uint32 words is a contiguous,
16-byte-vectorisable access, and each lane then holds a whole pair, so the rotation needs
neither stride-2 loads (half the useful width per instruction) nor the reshape/split/join
shuffle of the split-join family. Unpacking is exact: an fp32 whose top 16 bits are the bf16
bits is that value, so even = bitcast(w << 16), odd = bitcast(w & 0xFFFF0000). After the fp32
rotation (even c - odd s, odd c + even s, cos/sin from the fp32 cache row at positions[t]) each
result is rounded once to bf16 (round-to-nearest-even) and the two 16-bit patterns are packed
back into one word. Specific to 16-bit activations (the op is bf16-only) and to even token/head
strides (D is even). A program handles TOK tokens x HB heads of one tensor (q blocks first,
then k blocks). D/2 constexpr, padded to a power of two with a mask. Token offsets int64.
Grid (changed before any GPU measurement). A 1-D grid walked token-major: program p takes head
block p % nb of token block p // nb (nb = ceil(Hq / HB) + ceil(Hkv / HB)), so programs in flight
together stream consecutive stretches of q and k. It was (T / TOK, nb) with tokens on grid axis
0, which the GPU walks fastest: with 128 (64) MLA q heads the programs in flight took the same
head block of consecutive tokens 16 KB (8 KB) apart, the layout that lost 4-5% to
torch.compile's flat stream in silu_and_mul's grid2d on the H200. Few tokens (decode): TOK, then
HB, halve until the grid has at least 4 programs per SM (num_warps scaled down with HB, elements
per thread unchanged), as l2_norm/gated_rms_norm's row tiles now do after compile won their
decode shapes; TOK > 1 was meant to shrink MLA decode grids, which that evidence says is the
wrong way, so it now only applies once tokens are plentiful. At 1-32 tokens of 16 MLA heads
HB = 16 gave 2-64 programs.
Prediction (unmeasured): a few % at the 64-128-head prefill shapes, nearer compile at decode.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'HB': 16, 'TOK': 1, 'num_warps': 4}  # set by the offline proposer


@triton.jit
def _rotate_packed(src_ptr, dst_ptr, pos_ptr, cache_ptr, stride_cache, tok, n_tok, h0, n_heads,
                   w_tok, w_head, dw_tok, dw_head, HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    live = tok < n_tok
    mask = (heads < n_heads)[:, None] & cmask[None, :] & live
    t64 = tok.to(tl.int64)
    pos = tl.load(pos_ptr + t64, mask=live, other=0).to(tl.int64)
    c = tl.load(cache_ptr + pos * stride_cache + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    s = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    src = src_ptr.to(tl.pointer_type(tl.uint32)) + t64 * w_tok + heads[:, None] * w_head + i[None, :]
    w = tl.load(src, mask=mask, other=0)
    even = (w << 16).to(tl.float32, bitcast=True)
    odd = (w & 0xFFFF0000).to(tl.float32, bitcast=True)
    lo = (even * c - odd * s).to(tl.bfloat16).to(tl.uint16, bitcast=True).to(tl.uint32)
    hi = (odd * c + even * s).to(tl.bfloat16).to(tl.uint16, bitcast=True).to(tl.uint32)
    dst = dst_ptr.to(tl.pointer_type(tl.uint32)) + t64 * dw_tok + heads[:, None] * dw_head + i[None, :]
    tl.store(dst, (hi << 16) | lo, mask=mask)


@triton.jit
def _rope_gptj_packed(pos_ptr, q_ptr, k_ptr, cache_ptr, qo_ptr, ko_ptr, n_tok, n_q_heads, n_k_heads, n_q_blocks,
                      n_blocks, wq_t, wq_h, wk_t, wk_h, wqo_t, wqo_h, wko_t, wko_h, stride_cache,
                      HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr, TOK: tl.constexpr):
    pid = tl.program_id(0)
    t0 = (pid // n_blocks) * TOK
    j = pid % n_blocks
    for dt in tl.static_range(TOK):
        if j < n_q_blocks:
            _rotate_packed(q_ptr, qo_ptr, pos_ptr, cache_ptr, stride_cache, t0 + dt, n_tok, j * HB, n_q_heads,
                           wq_t, wq_h, wqo_t, wqo_h, HALF, HB, HALF_P2)
        else:
            _rotate_packed(k_ptr, ko_ptr, pos_ptr, cache_ptr, stride_cache, t0 + dt, n_tok, (j - n_q_blocks) * HB,
                           n_k_heads, wk_t, wk_h, wko_t, wko_h, HALF, HB, HALF_P2)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, positions, query, key, cos_sin_cache):
        n_tok, hq, d = query.shape
        hk = key.shape[1]
        qo = torch.empty((n_tok, hq, d), dtype=query.dtype, device=query.device)
        ko = torch.empty((n_tok, hk, d), dtype=key.dtype, device=key.device)
        hb, tok = AKA_PARAMS["HB"], AKA_PARAMS["TOK"]
        # Few tokens (decode): fewer tokens, then fewer heads, per program until every SM gets ~4.
        sms = torch.cuda.get_device_properties(query.device).multi_processor_count if query.is_cuda else 1

        def n_programs(tok, hb):
            return triton.cdiv(n_tok, tok) * (triton.cdiv(hq, hb) + triton.cdiv(hk, hb))
        while tok > 1 and n_programs(tok, hb) < 4 * sms:
            tok //= 2
        while hb > 1 and n_programs(tok, hb) < 4 * sms:
            hb //= 2
        warps = max(1, AKA_PARAMS["num_warps"] * hb // AKA_PARAMS["HB"])
        nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
        half = d // 2
        # strides in 32-bit words (one word = one bf16 pair); contiguous [T, H, D] has even strides
        if n_tok:
            _rope_gptj_packed[(triton.cdiv(n_tok, tok) * (nqb + nkb),)](
                positions, query, key, cos_sin_cache, qo, ko, n_tok, hq, hk, nqb, nqb + nkb,
                query.stride(0) // 2, query.stride(1) // 2, key.stride(0) // 2, key.stride(1) // 2,
                qo.stride(0) // 2, qo.stride(1) // 2, ko.stride(0) // 2, ko.stride(1) // 2, cos_sin_cache.stride(0),
                HALF=half, HB=hb, HALF_P2=triton.next_power_of_2(half), TOK=tok, num_warps=warps)
        return qo, ko
