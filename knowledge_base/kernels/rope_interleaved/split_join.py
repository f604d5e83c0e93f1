"""
---
id: kernels/rope_interleaved/split_join
op: rope_interleaved
category: Math
dtypes: [bfloat16]
techniques: [rope, interleaved-rotation, position-gather, multi-head-per-program, 2d-tiling, vectorized-access, fp32-accumulation, single-rounding, int64-indexing]
params:
  HB: [8, 16, 32, 64]
  num_warps: [1, 2, 4, 8]
summary: 1-D token-major grid over (token, head block), q blocks then k blocks; each [HB, D] tile is loaded contiguously, reshaped to [HB, D/2, 2] and split into even/odd lanes, rotated in fp32 with the cos/sin of positions[t], joined back and stored contiguously.
---
Design. GPT-J pairs are adjacent elements (x[2i], x[2i+1]); loading them as two stride-2 tiles
would halve the useful width of every memory transaction. Instead each head is loaded as one
contiguous row of D bf16 (16-byte vectors), tl.reshape'd to [HB, D/2, 2] and tl.split into the
even and odd [HB, D/2] tiles; after the fp32 rotation (even c - odd s, odd c + even s) tl.join
puts the pair axis back last, so the reshape to [HB, D] restores the interleaved order and the
store is contiguous too. The cos/sin row (first and second D/2 columns of the fp32 cache row at
positions[t]) is gathered once per program and broadcast over HB heads. MLA shapes have 16-128
q heads of D = 64 and one k head: HB up to 64 puts a whole token's q_pe (16 KB at 128 heads) in
two programs; the single k head gets its own block (masked rows). D/2 is a constexpr padded to
a power of two (small shapes use D = 96, 80, 48). Token offsets int64.
Grid (changed before any GPU measurement). A 1-D grid walked token-major: program p takes head
block p % nb of token p // nb (nb = ceil(Hq / HB) + ceil(Hkv / HB)), so programs in flight
together stream consecutive stretches of q and k. It was (T, nb) with tokens on grid axis 0,
which the GPU walks fastest: with 128 (64) MLA q heads the programs in flight took the same head
block of consecutive tokens 16 KB (8 KB) apart, the layout that lost 4-5% to torch.compile's flat
stream in silu_and_mul's grid2d on the H200. Few tokens (decode): HB halves until the grid has at
least 4 programs per SM, num_warps scaled down with it (elements per thread unchanged), as
l2_norm/gated_rms_norm's row tiles now do after compile won their decode shapes; at 1-32 tokens of
16 MLA heads HB = 16 gave 2-64 programs.
Prediction (unmeasured): a few % at the 64-128-head prefill shapes, nearer compile at decode.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"HB": 16, "num_warps": 4}


@triton.jit
def _rotate_pairs(src_ptr, dst_ptr, tok, h0, n_heads, s_tok, s_head, d_tok, d_head, cos, sin,
                  D: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    cols = tl.arange(0, 2 * HALF_P2)
    mask = (heads < n_heads)[:, None] & (cols < D)[None, :]
    t64 = tok.to(tl.int64)
    x = tl.load(src_ptr + t64 * s_tok + heads[:, None] * s_head + cols[None, :], mask=mask, other=0.0)
    even, odd = tl.split(tl.reshape(x.to(tl.float32), [HB, HALF_P2, 2]))
    c = cos[None, :]
    s = sin[None, :]
    out = tl.reshape(tl.join(even * c - odd * s, odd * c + even * s), [HB, 2 * HALF_P2])
    tl.store(dst_ptr + t64 * d_tok + heads[:, None] * d_head + cols[None, :], out.to(dst_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _rope_gptj_head_block(pos_ptr, q_ptr, k_ptr, cache_ptr, qo_ptr, ko_ptr, n_q_heads, n_k_heads, n_q_blocks,
                          n_blocks, sq_t, sq_h, sk_t, sk_h, sqo_t, sqo_h, sko_t, sko_h, stride_cache,
                          D: tl.constexpr, HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    pid = tl.program_id(0)
    tok = pid // n_blocks
    j = pid % n_blocks
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    cos = tl.load(cache_ptr + pos * stride_cache + i, mask=cmask, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=cmask, other=0.0).to(tl.float32)
    if j < n_q_blocks:
        _rotate_pairs(q_ptr, qo_ptr, tok, j * HB, n_q_heads, sq_t, sq_h, sqo_t, sqo_h, cos, sin, D, HB, HALF_P2)
    else:
        _rotate_pairs(k_ptr, ko_ptr, tok, (j - n_q_blocks) * HB, n_k_heads, sk_t, sk_h, sko_t, sko_h, cos, sin,
                      D, HB, HALF_P2)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, positions, query, key, cos_sin_cache):
        n_tok, hq, d = query.shape
        hk = key.shape[1]
        qo = torch.empty((n_tok, hq, d), dtype=query.dtype, device=query.device)
        ko = torch.empty((n_tok, hk, d), dtype=key.dtype, device=key.device)
        hb = AKA_PARAMS["HB"]
        # Few tokens (decode): smaller head blocks until every SM gets ~4 programs.
        sms = torch.cuda.get_device_properties(query.device).multi_processor_count if query.is_cuda else 1
        while hb > 1 and n_tok * (triton.cdiv(hq, hb) + triton.cdiv(hk, hb)) < 4 * sms:
            hb //= 2
        warps = max(1, AKA_PARAMS["num_warps"] * hb // AKA_PARAMS["HB"])
        nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
        if n_tok:
            _rope_gptj_head_block[(n_tok * (nqb + nkb),)](
                positions, query, key, cos_sin_cache, qo, ko, hq, hk, nqb, nqb + nkb,
                query.stride(0), query.stride(1), key.stride(0), key.stride(1), qo.stride(0), qo.stride(1),
                ko.stride(0), ko.stride(1), cos_sin_cache.stride(0),
                D=d, HALF=d // 2, HB=hb, HALF_P2=triton.next_power_of_2(d // 2), num_warps=warps)
        return qo, ko
