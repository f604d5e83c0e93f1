"""
---
id: kernels/rope_interleaved/strided_pairs
op: rope_interleaved
category: Math
dtypes: [bfloat16]
techniques: [rope, interleaved-rotation, position-gather, multi-head-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  HB: [8, 16, 32, 64]
  TOK: [1, 2, 4]
  num_warps: [1, 2, 4, 8]
summary: Grid (token block, head block); even and odd elements loaded as two stride-2 [HB, D/2] tiles (no register shuffles), rotated in fp32, stored back stride-2; TOK tokens per program share the launch at decode.
---
Design. The alternative to split/join: address the pair members directly, x[2i] and x[2i+1],
as two [HB, D/2] tiles. Each load instruction touches every other element, but the two loads
of a tile cover the same cache lines back to back, so L1 merges them and DRAM traffic is the
same; what it saves is the in-register reshape/split/join (layout conversions that can cost
shared-memory round trips on some tile shapes). A program handles TOK consecutive tokens x HB
heads of one tensor (q blocks first on grid axis 1, then k blocks), each token with its own
cos/sin row gathered at positions[t]; TOK > 1 shrinks the grid for MLA decode with 128 q heads.
fp32 rotation: even c - odd s, odd c + even s, one rounding. D/2 constexpr, padded with a mask.
Token offsets int64.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"HB": 16, "TOK": 1, "num_warps": 4}


@triton.jit
def _rotate_pairs_strided(src_ptr, dst_ptr, pos_ptr, cache_ptr, stride_cache, tok, n_tok, h0, n_heads,
                          s_tok, s_head, d_tok, d_head, HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    mask = (heads < n_heads)[:, None] & cmask[None, :] & (tok < n_tok)
    t64 = tok.to(tl.int64)
    pos = tl.load(pos_ptr + t64, mask=tok < n_tok, other=0).to(tl.int64)
    c = tl.load(cache_ptr + pos * stride_cache + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    s = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    src = src_ptr + t64 * s_tok + heads[:, None] * s_head + 2 * i[None, :]
    even = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    odd = tl.load(src + 1, mask=mask, other=0.0).to(tl.float32)
    dst = dst_ptr + t64 * d_tok + heads[:, None] * d_head + 2 * i[None, :]
    tl.store(dst, (even * c - odd * s).to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + 1, (odd * c + even * s).to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_gptj_strided(pos_ptr, q_ptr, k_ptr, cache_ptr, qo_ptr, ko_ptr, n_tok, n_q_heads, n_k_heads, n_q_blocks,
                       sq_t, sq_h, sk_t, sk_h, sqo_t, sqo_h, sko_t, sko_h, stride_cache,
                       HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr, TOK: tl.constexpr):
    t0 = tl.program_id(0) * TOK
    j = tl.program_id(1)
    for dt in tl.static_range(TOK):
        if j < n_q_blocks:
            _rotate_pairs_strided(q_ptr, qo_ptr, pos_ptr, cache_ptr, stride_cache, t0 + dt, n_tok, j * HB, n_q_heads,
                                  sq_t, sq_h, sqo_t, sqo_h, HALF, HB, HALF_P2)
        else:
            _rotate_pairs_strided(k_ptr, ko_ptr, pos_ptr, cache_ptr, stride_cache, t0 + dt, n_tok, (j - n_q_blocks) * HB,
                                  n_k_heads, sk_t, sk_h, sko_t, sko_h, HALF, HB, HALF_P2)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, positions, query, key, cos_sin_cache):
        n_tok, hq, d = query.shape
        hk = key.shape[1]
        qo = torch.empty((n_tok, hq, d), dtype=query.dtype, device=query.device)
        ko = torch.empty((n_tok, hk, d), dtype=key.dtype, device=key.device)
        hb, tok = AKA_PARAMS["HB"], AKA_PARAMS["TOK"]
        nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
        half = d // 2
        _rope_gptj_strided[(triton.cdiv(n_tok, tok), nqb + nkb)](
            positions, query, key, cos_sin_cache, qo, ko, n_tok, hq, hk, nqb,
            query.stride(0), query.stride(1), key.stride(0), key.stride(1), qo.stride(0), qo.stride(1),
            ko.stride(0), ko.stride(1), cos_sin_cache.stride(0),
            HALF=half, HB=hb, HALF_P2=triton.next_power_of_2(half), TOK=tok, num_warps=AKA_PARAMS["num_warps"])
        return qo, ko
