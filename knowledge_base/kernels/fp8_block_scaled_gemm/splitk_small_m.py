"""
---
id: kernels/fp8_block_scaled_gemm/splitk_small_m
op: fp8_block_scaled_gemm
category: MatrixMultiply
dtypes: [float8_e4m3fn, bfloat16]
techniques: [block-scaled-fp8, per-group-scaling, block-scaling, small-m-gemm, split-k, two-stage-reduction, deterministic-reduction, decode-gemv, fp32-accumulation]
params:
  BM: [16, 32, 64]
  BN: [32, 64, 128]
  SPLIT_K: [1, 2, 4, 8]
  GROUP: [1, 8]
  num_warps: [2, 4, 8]
  num_stages: [2, 3, 4, 5]
summary: Decode family. Small BM tiles, split-K over whole 128-wide scale groups, per-group fp32 promotion with both scales inside the K loop, fp32 partials reduced and cast to bf16 by a second deterministic kernel.
---
At decode M (1-256 tokens) the block-scaled fp8 GEMM streams N*K bytes of weights (133 MB for
DeepSeek-V3's dense down projection) with about M FLOP per byte: the grid must cover every SM.

Design:
- BK = 128 = the scale group; split s owns a contiguous run of whole K groups, so each split
  applies its own a_scale/b_scale columns and the split partials are exact sums of promoted
  128-wide pieces (no scale straddles two splits).
- Per K group: fresh fp8 tl.dot (fp32 result), times sa[:, None] (per token) and sb[None, :]
  (per 128-row weight block, index n // 128), added to the fp32 accumulator.
- SPLIT_K > 1: fp32 partials [SPLIT_K, M, N] reduced in fixed order by `_splitk_reduce`, which
  rounds once to bf16 (bit-reproducible; no atomics). SPLIT_K = 1 stores bf16 directly.
- The split count is clamped to the number of K groups (K 512 of kv_b_proj has 4). Rows and
  columns past M/N wrap for the loads; stores are masked; the K tail is masked only when
  K % 128 != 0. num_stages clamped to about 200 KB of operand buffers.
Correct at every M; at prefill M the small tiles re-read the weight M/BM times
(kernels/fp8_block_scaled_gemm/grouped_tiles is the prefill family).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BM": 16, "BN": 64, "SPLIT_K": 4, "GROUP": 8, "num_warps": 4, "num_stages": 4}

QBLOCK = 128
_SMEM_BUDGET = 200 * 1024


@triton.jit
def _fp8_gemm_splitk(a_ptr, b_ptr, c_ptr, ws_ptr, as_ptr, bs_ptr, M, N, K,
                     s_am, s_ak, s_bn, s_bk, s_cm, s_cn, s_asm, s_ask, s_bsn, s_bsk, groups_per_split,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                     SPLIT: tl.constexpr, EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
    sid = tl.program_id(1)
    n_pm = tl.cdiv(M, BM)
    n_pn = tl.cdiv(N, BN)
    per_group = GROUP * n_pn
    first_pm = (pid // per_group) * GROUP
    rows_here = tl.minimum(n_pm - first_pm, GROUP)
    pm = first_pm + (pid % per_group) % rows_here
    pn = (pid % per_group) // rows_here

    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    am = rm % M
    bn = rn % N
    kb_begin = sid * groups_per_split
    kb_end = tl.minimum(kb_begin + groups_per_split, tl.cdiv(K, BK))
    a_ptrs = a_ptr + am[:, None].to(tl.int64) * s_am + (kb_begin * BK + rk)[None, :] * s_ak
    b_ptrs = b_ptr + bn[None, :].to(tl.int64) * s_bn + (kb_begin * BK + rk)[:, None] * s_bk
    sa_ptrs = as_ptr + am.to(tl.int64) * s_asm
    sb_ptrs = bs_ptr + (bn // BK) * s_bsn

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(kb_begin, kb_end):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(kb * BK + rk)[None, :] < K, other=0.0)
            b = tl.load(b_ptrs, mask=(kb * BK + rk)[:, None] < K, other=0.0)
        sa = tl.load(sa_ptrs + kb * s_ask)
        sb = tl.load(sb_ptrs + kb * s_bsk)
        acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
        a_ptrs += BK * s_ak
        b_ptrs += BK * s_bk

    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT == 1:
        tl.store(c_ptr + rm[:, None].to(tl.int64) * s_cm + rn[None, :] * s_cn,
                 acc.to(c_ptr.dtype.element_ty), mask=cmask)
    else:
        tl.store(ws_ptr + (sid * M + rm)[:, None].to(tl.int64) * N + rn[None, :], acc, mask=cmask)


@triton.jit
def _splitk_reduce(ws_ptr, c_ptr, MN, N, s_cm, s_cn, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + (offs // N) * s_cm + (offs % N) * s_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, a_scale, b, b_scale):
        M, K = a.shape
        N = b.shape[0]
        p = AKA_PARAMS
        bm, bn = p["BM"], p["BN"]
        groups = triton.cdiv(K, QBLOCK)
        split = max(1, min(p["SPLIT_K"], groups))
        per_split = triton.cdiv(groups, split)
        split = triton.cdiv(groups, per_split)          # no split left without K groups
        y = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
        ws = torch.empty((split, M, N), dtype=torch.float32, device=a.device) if split > 1 else y
        stages = max(1, min(p["num_stages"], _SMEM_BUDGET // ((bm + bn) * QBLOCK * a.element_size())))
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn), split)
        _fp8_gemm_splitk[grid](a, b, y, ws, a_scale, b_scale, M, N, K,
                               a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                               y.stride(0), y.stride(1), a_scale.stride(0), a_scale.stride(1),
                               b_scale.stride(0), b_scale.stride(1), per_split,
                               BM=bm, BN=bn, BK=QBLOCK, GROUP=p["GROUP"], SPLIT=split,
                               EVEN_K=(K % QBLOCK == 0), num_warps=p["num_warps"], num_stages=stages)
        if split > 1:
            block = 1024
            _splitk_reduce[(triton.cdiv(M * N, block),)](ws, y, M * N, N, y.stride(0), y.stride(1),
                                                        SPLIT=split, BLOCK=block, num_warps=4)
        return y
