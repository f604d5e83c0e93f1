"""
---
id: kernels/rope_neox/token_loop
op: rope_neox
category: Math
dtypes: [bfloat16]
techniques: [rope, half-split-rotation, position-gather, multi-head-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  HB: [4, 8, 16, 32]
  num_warps: [2, 4, 8]
summary: One program per token (its head blocks split over a few programs at decode); the cos/sin row of positions[t] is gathered once, then the program loops over q head blocks and k head blocks ([HB, D/2] half tiles, fp32 rotation, one rounding).
---
Design. The cos/sin gather (a dependent load through positions[t], 2 x D/2 fp32) is the latency
in the critical path of every RoPE program; here it happens once per token and is reused for
all Hq + Hkv heads (40 x 256 B of bf16 per token at Llama-8B shapes, ~20 KB read and written per
program). Heads are processed HB at a time as two [HB, D/2] half tiles: x1 = x[:D/2],
x2 = x[D/2:], out = [x1 c - x2 s, x2 c + x1 s] in fp32, rounded once. The loops over head blocks
are independent, so loads of the next block can be issued while the current one rotates.
At prefill (T >= 2048) there are thousands of programs of ~20 KB; at decode (T = 1-64) one
program per token made the grid small (see the decode split below). D/2 is a constexpr padded
to a power of two with a mask. Token offsets int64.
Decode split (changed before any GPU measurement): with fewer than 4 * SMs tokens, each token's
nb = ceil(Hq / HB) + ceil(Hkv / HB) head blocks are dealt round-robin to S = min(nb, ceil(4 * SMs
/ T)) programs (1-D grid, program p: token p // S, blocks p % S, p % S + S, ...). One program per
token had been 1-256 programs each walking its head blocks one after another, the pattern that
cost rms_norm/rowwise 4.6-4.8 us against ~2.2 for torch.compile at 128-256 rows on the H200
(several rows per program, session 5). From 4 * SMs tokens on S = 1: the token loop as before.
Prediction (unmeasured): closer to torch.compile at 1-256 tokens; prefill unchanged.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'HB': 16, 'num_warps': 4}  # set by the offline proposer


@triton.jit
def _rotate_heads(src_ptr, dst_ptr, t64, h0, n_heads, s_tok, s_head, d_tok, d_head, c, s,
                  HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    i = tl.arange(0, HALF_P2)
    mask = (heads < n_heads)[:, None] & (i < HALF)[None, :]
    src = src_ptr + t64 * s_tok + heads[:, None] * s_head + i[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dst = dst_ptr + t64 * d_tok + heads[:, None] * d_head + i[None, :]
    tl.store(dst, (x1 * c - x2 * s).to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (x2 * c + x1 * s).to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_neox_token(pos_ptr, q_ptr, k_ptr, cache_ptr, qo_ptr, ko_ptr, n_q_heads, n_k_heads, n_q_blocks, split,
                     sq_t, sq_h, sk_t, sk_h, sqo_t, sqo_h, sko_t, sko_h, stride_cache,
                     HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    pid = tl.program_id(0)
    t64 = (pid // split).to(tl.int64)
    first = pid % split  # this program's blocks: first, first + split, ... of the q blocks then k blocks
    k_first = (first + split - n_q_blocks % split) % split
    pos = tl.load(pos_ptr + t64).to(tl.int64)
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    c = tl.load(cache_ptr + pos * stride_cache + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    s = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    for h0 in range(first * HB, n_q_heads, split * HB):
        _rotate_heads(q_ptr, qo_ptr, t64, h0, n_q_heads, sq_t, sq_h, sqo_t, sqo_h, c, s, HALF, HB, HALF_P2)
    for h0 in range(k_first * HB, n_k_heads, split * HB):
        _rotate_heads(k_ptr, ko_ptr, t64, h0, n_k_heads, sk_t, sk_h, sko_t, sko_h, c, s, HALF, HB, HALF_P2)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, positions, query, key, cos_sin_cache):
        n_tok, hq, d = query.shape
        hk = key.shape[1]
        qo = torch.empty((n_tok, hq, d), dtype=query.dtype, device=query.device)
        ko = torch.empty((n_tok, hk, d), dtype=key.dtype, device=key.device)
        half = d // 2
        hb = AKA_PARAMS["HB"]
        nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
        # Few tokens (decode): a token's head blocks spread over `split` programs (~4 per SM in all).
        sms = torch.cuda.get_device_properties(query.device).multi_processor_count if query.is_cuda else 1
        split = max(1, min(nqb + nkb, triton.cdiv(4 * sms, max(n_tok, 1))))
        if n_tok:
            _rope_neox_token[(n_tok * split,)](
                positions, query, key, cos_sin_cache, qo, ko, hq, hk, nqb, split,
                query.stride(0), query.stride(1), key.stride(0), key.stride(1), qo.stride(0), qo.stride(1),
                ko.stride(0), ko.stride(1), cos_sin_cache.stride(0),
                HALF=half, HB=hb, HALF_P2=triton.next_power_of_2(half), num_warps=AKA_PARAMS["num_warps"])
        return qo, ko
