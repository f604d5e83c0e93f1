"""
---
id: kernels/fused_qkv_rope/head_block
op: fused_qkv_rope
category: Fusion
dtypes: [bfloat16]
techniques: [kernel-fusion, rope, half-split-rotation, position-gather, multi-head-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  HB: [2, 4, 8, 16]
  num_warps: [1, 2, 4, 8]
summary: One launch over grid (token, head block) where axis 1 enumerates q blocks, k blocks, then v blocks of the packed qkv row; q/k blocks gather cos/sin of positions[t] and rotate two [HB, D/2] halves in fp32, v blocks copy an [HB, D] tile.
---
Design. The packed row is [q heads | k heads | v heads] (vLLM's QKVParallelLinear), token stride
(Hq + 2 Hkv) D. Splitting it and rotating in one pass reads qkv once and writes q, k, v once
(the reference's split + contiguous + rope would move q and k twice). Head blocks never cross a
region: each region is cut into ceil(H / HB) blocks of its own, and program (t, j) picks its
region with two uniform scalar branches, so q blocks, k blocks and v blocks run side by side in
one launch. Rotation (NeoX halves): x1 = x[:D/2], x2 = x[D/2:], out = [x1 c - x2 s,
x2 c + x1 s] in fp32, one rounding, with c, s from the fp32 cache row at positions[t] (int64,
gathered only by the q/k programs). v blocks are a straight [HB, D] copy. D/2 is a constexpr
padded to a power of two (small shapes use D = 96, 80, 48); heads not divisible by HB masked.
T on grid axis 0, the few head blocks on axis 1 (limit 65535). Token offsets int64.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"HB": 8, "num_warps": 2}


@triton.jit
def _rope_block(qkv_ptr, out_ptr, pos_ptr, cache_ptr, stride_cache, t64, col0, h0, n_heads, s_tok, d_tok,
                HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    mask = (heads < n_heads)[:, None] & cmask[None, :]
    pos = tl.load(pos_ptr + t64).to(tl.int64)
    c = tl.load(cache_ptr + pos * stride_cache + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    s = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    src = qkv_ptr + t64 * s_tok + col0 + heads[:, None] * (2 * HALF) + i[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dst = out_ptr + t64 * d_tok + heads[:, None] * (2 * HALF) + i[None, :]
    tl.store(dst, (x1 * c - x2 * s).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (x2 * c + x1 * s).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _copy_block(qkv_ptr, out_ptr, t64, col0, h0, n_heads, s_tok, d_tok,
                D: tl.constexpr, HB: tl.constexpr, D_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    cols = tl.arange(0, D_P2)
    mask = (heads < n_heads)[:, None] & (cols < D)[None, :]
    x = tl.load(qkv_ptr + t64 * s_tok + col0 + heads[:, None] * D + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + t64 * d_tok + heads[:, None] * D + cols[None, :], x, mask=mask)


@triton.jit
def _qkv_rope_head_block(pos_ptr, qkv_ptr, cache_ptr, qo_ptr, ko_ptr, vo_ptr, n_q_heads, n_kv_heads,
                         n_q_blocks, n_k_blocks, s_tok, sq_t, sk_t, sv_t, stride_cache,
                         D: tl.constexpr, HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr,
                         D_P2: tl.constexpr):
    t64 = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    if j < n_q_blocks:
        _rope_block(qkv_ptr, qo_ptr, pos_ptr, cache_ptr, stride_cache, t64, 0, j * HB, n_q_heads, s_tok, sq_t,
                    HALF, HB, HALF_P2)
    elif j < n_q_blocks + n_k_blocks:
        _rope_block(qkv_ptr, ko_ptr, pos_ptr, cache_ptr, stride_cache, t64, n_q_heads * D,
                    (j - n_q_blocks) * HB, n_kv_heads, s_tok, sk_t, HALF, HB, HALF_P2)
    else:
        _copy_block(qkv_ptr, vo_ptr, t64, (n_q_heads + n_kv_heads) * D, (j - n_q_blocks - n_k_blocks) * HB,
                    n_kv_heads, s_tok, sv_t, D, HB, D_P2)


class ModelNew(nn.Module):
    def __init__(self, num_q_heads, num_kv_heads, head_size):
        super().__init__()
        self.num_q_heads = num_q_heads
        self.num_kv_heads = num_kv_heads
        self.head_size = head_size

    def forward(self, positions, qkv, cos_sin_cache):
        hq, hk, d = self.num_q_heads, self.num_kv_heads, self.head_size
        n_tok = qkv.shape[0]
        qo = torch.empty((n_tok, hq, d), dtype=qkv.dtype, device=qkv.device)
        ko = torch.empty((n_tok, hk, d), dtype=qkv.dtype, device=qkv.device)
        vo = torch.empty((n_tok, hk, d), dtype=qkv.dtype, device=qkv.device)
        hb = AKA_PARAMS["HB"]
        nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
        _qkv_rope_head_block[(n_tok, nqb + 2 * nkb)](
            positions, qkv, cos_sin_cache, qo, ko, vo, hq, hk, nqb, nkb, qkv.stride(0), qo.stride(0), ko.stride(0),
            vo.stride(0), cos_sin_cache.stride(0), D=d, HALF=d // 2, HB=hb,
            HALF_P2=triton.next_power_of_2(d // 2), D_P2=triton.next_power_of_2(d), num_warps=AKA_PARAMS["num_warps"])
        return qo, ko, vo
