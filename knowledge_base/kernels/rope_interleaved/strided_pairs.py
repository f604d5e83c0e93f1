"""
---
id: kernels/rope_interleaved/strided_pairs
op: rope_interleaved
category: Math
dtypes: [bfloat16]
techniques: [rope, interleaved-rotation, position-gather, strided-access, multi-head-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  HB: [2, 4, 8, 16]
  num_warps: [1, 2, 4]
summary: The direct GPT-J kernel - even lanes x[2i] and odd lanes x[2i+1] of an [HB, D/2] head tile are loaded and stored with two stride-2 accesses each, rotated in fp32 with the cos/sin of positions[t]; the simple baseline the packed and split/join kernels improve on.
---
What it does: One program per (token, head block) in token-major order, q head blocks first,
then k head blocks. For pair i the program loads x[2i] and x[2i+1] through pointers 2i and
2i + 1 (two stride-2 gathers of the same cache lines), computes
out[2i] = x[2i] c_i - x[2i+1] s_i and out[2i+1] = x[2i+1] c_i + x[2i] s_i in fp32 and stores the
two results with two stride-2 scatters. cos/sin are the [D/2] halves of the cache row.

When to use it: This is the baseline: it is the formula written
down, needs no reshape/join support, and is the kernel to start from when porting to a
variant (partial rotary_dim, a different pair layout). Each stride-2 access uses half of every
loaded sector, so a warp issues twice the memory instructions of `split_join` (contiguous
[HB, D] loads split into even/odd in registers) or `packed_pairs` (one 32-bit word per pair);
the L1 absorbs the second touch of each line, so the DRAM traffic is the same. Expect it to lose
to both on the H200 at prefill sizes; by how much is for `aka kb verify --device cuda` to say
(CPU interpreter timing is meaningless).

Parameters: HB: heads per program (a power of two; halved at decode until there are 4
programs per SM); num_warps as launched (scaled down with HB).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"HB": 8, "num_warps": 2}


@triton.jit
def _rotate_pairs(src_ptr, dst_ptr, t64, h0, n_heads, s_tok, s_head, d_tok, d_head, c, s,
                  HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    i = tl.arange(0, HALF_P2)
    mask = (heads < n_heads)[:, None] & (i < HALF)[None, :]
    src = src_ptr + t64 * s_tok + heads[:, None] * s_head + 2 * i[None, :]
    even = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    odd = tl.load(src + 1, mask=mask, other=0.0).to(tl.float32)
    dst = dst_ptr + t64 * d_tok + heads[:, None] * d_head + 2 * i[None, :]
    tl.store(dst, (even * c - odd * s).to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + 1, (odd * c + even * s).to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_gptj_strided(pos_ptr, q_ptr, k_ptr, cache_ptr, qo_ptr, ko_ptr, n_q_heads, n_k_heads, n_q_blocks,
                       n_blocks, sq_t, sq_h, sk_t, sk_h, sqo_t, sqo_h, sko_t, sko_h, stride_cache,
                       HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    pid = tl.program_id(0)
    t64 = (pid // n_blocks).to(tl.int64)
    j = pid % n_blocks
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    row = cache_ptr + tl.load(pos_ptr + t64).to(tl.int64) * stride_cache
    c = tl.load(row + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    s = tl.load(row + HALF + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if j < n_q_blocks:
        _rotate_pairs(q_ptr, qo_ptr, t64, j * HB, n_q_heads, sq_t, sq_h, sqo_t, sqo_h, c, s, HALF, HB, HALF_P2)
    else:
        _rotate_pairs(k_ptr, ko_ptr, t64, (j - n_q_blocks) * HB, n_k_heads, sk_t, sk_h, sko_t, sko_h, c, s,
                      HALF, HB, HALF_P2)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, positions, query, key, cos_sin_cache):
        n_tok, hq, d = query.shape
        hk = key.shape[1]
        if query.stride(2) != 1 or key.stride(2) != 1:
            query, key = query.contiguous(), key.contiguous()
        qo = torch.empty((n_tok, hq, d), dtype=query.dtype, device=query.device)
        ko = torch.empty((n_tok, hk, d), dtype=key.dtype, device=key.device)
        hb = AKA_PARAMS["HB"]
        sms = torch.cuda.get_device_properties(query.device).multi_processor_count if query.is_cuda else 1
        while hb > 1 and n_tok * (triton.cdiv(hq, hb) + triton.cdiv(hk, hb)) < 4 * sms:
            hb //= 2
        warps = max(1, AKA_PARAMS["num_warps"] * hb // AKA_PARAMS["HB"])
        nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
        if n_tok:
            _rope_gptj_strided[(n_tok * (nqb + nkb),)](
                positions, query, key, cos_sin_cache, qo, ko, hq, hk, nqb, nqb + nkb,
                query.stride(0), query.stride(1), key.stride(0), key.stride(1), qo.stride(0), qo.stride(1),
                ko.stride(0), ko.stride(1), cos_sin_cache.stride(0),
                HALF=d // 2, HB=hb, HALF_P2=triton.next_power_of_2(d // 2), num_warps=warps)
        return qo, ko
