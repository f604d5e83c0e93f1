"""
---
id: kernels/gemm_bf16/splitk_small_m
op: gemm_bf16
category: MatrixMultiply
dtypes: [bfloat16]
techniques: [small-m-gemm, split-k, two-stage-reduction, deterministic-reduction, decode-gemv, grouped-ordering, fp32-accumulation, int64-offsets]
params:
  BM: [16, 32, 64]
  BN: [32, 64, 128]
  BK: [64, 128, 256]
  SPLIT_K: [1, 2, 4, 8]
  GROUP: [1, 8]
  num_warps: [2, 4, 8]
  num_stages: [2, 3, 4, 5]
summary: Decode family. Small BM tiles so M <= 256 wastes few MMA rows, split-K to put every SM on streaming the weight, fp32 partials reduced by a second deterministic kernel that also casts to bf16.
---
At decode M (1-256 tokens) a linear layer y = x @ w.T is a weight stream: intensity is about M
FLOP/byte, far under the H200 ridge (~206), so the goal is every SM reading w at full bandwidth.
With BN 64, N 4096 gives 64 tiles for 132 SMs (half the SMs idle, each busy one looping over all of
K); splitting K into SPLIT_K slices multiplies the programs.

Design:
- Grid (tiles, SPLIT_K); split s owns a contiguous, BK-aligned run of K tiles, so each weight
  byte is read exactly once over the whole grid. The split count is clamped to the number of K
  tiles; splits past the end write zeros.
- SPLIT_K > 1: fp32 partials [SPLIT_K, M, N], then `_splitk_reduce` sums them in a fixed order
  (bit-reproducible, unlike fp32 atomics) and rounds once to bf16. The partial traffic is
  SPLIT_K * M * N * 8 bytes (write + read), 1-4% of the weight bytes at M <= 64.
- SPLIT_K = 1: the GEMM kernel stores bf16 directly (no workspace, one launch).
- Rows/columns past M/N wrap (`% M`, `% N`) so operand loads are unmasked in M and N; the K tail
  is masked only when K % BK != 0 (K 7392 at BK 256).
- num_stages clamped on the host to about 200 KB of operand buffers (227 KB per block on Hopper).
Correct for every shape (the prefill shapes too), but at M >= 512 the small tiles re-read w
M/BM times: use kernels/gemm_bf16/grouped_tiles there.

When to use it: the linear layers of token-by-token generation, a few to a few hundred tokens
against a large weight (q/k/v/o, gate/up and down projections of 8B-70B models, where K reaches
14336 or more). The symptom it fixes: a prefill-style GEMM at such a batch runs far below the
weight-read bandwidth, with large MMA tiles mostly padding and fewer output tiles than SMs, each
busy program walking all of K alone. Splitting K puts every SM on its own slice of the weight.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BM": 16, "BN": 64, "BK": 128, "SPLIT_K": 4, "GROUP": 8, "num_warps": 4, "num_stages": 4}

_SMEM_BUDGET = 200 * 1024


@triton.jit
def _gemm_splitk(a_ptr, b_ptr, c_ptr, ws_ptr, M, N, K, s_am, s_ak, s_bn, s_bk, s_cm, s_cn,
                 k_tiles_per_split,
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
    k_begin = sid * k_tiles_per_split * BK
    k_end = tl.minimum(k_begin + k_tiles_per_split * BK, K)
    a_ptrs = a_ptr + am[:, None].to(tl.int64) * s_am + (k_begin + rk)[None, :] * s_ak
    b_ptrs = b_ptr + bn[None, :].to(tl.int64) * s_bn + (k_begin + rk)[:, None] * s_bk

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(k_begin, k_end, BK):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(k0 + rk)[None, :] < K, other=0.0)
            b = tl.load(b_ptrs, mask=(k0 + rk)[:, None] < K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * s_ak
        b_ptrs += BK * s_bk

    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT == 1:
        c_ptrs = c_ptr + rm[:, None].to(tl.int64) * s_cm + rn[None, :] * s_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=cmask)
    else:
        w_ptrs = ws_ptr + (sid * M + rm)[:, None].to(tl.int64) * N + rn[None, :]
        tl.store(w_ptrs, acc, mask=cmask)


@triton.jit
def _splitk_reduce(ws_ptr, c_ptr, MN, N, s_cm, s_cn, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    m = offs // N
    n = offs % N
    tl.store(c_ptr + m * s_cm + n * s_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)


def _stages(bm, bn, bk, elem_bytes, wanted):
    return max(1, min(wanted, _SMEM_BUDGET // ((bm + bn) * bk * elem_bytes)))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        M, K = x.shape
        N = w.shape[0]
        p = AKA_PARAMS
        bm, bn, bk = p["BM"], p["BN"], p["BK"]
        k_tiles = triton.cdiv(K, bk)
        split = max(1, min(p["SPLIT_K"], k_tiles))
        per_split = triton.cdiv(k_tiles, split)
        split = triton.cdiv(k_tiles, per_split)        # no split left without K tiles
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        ws = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn), split)
        _gemm_splitk[grid](x, w, y, ws, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                           y.stride(0), y.stride(1), per_split, BM=bm, BN=bn, BK=bk,
                           GROUP=p["GROUP"], SPLIT=split, EVEN_K=(K % bk == 0),
                           num_warps=p["num_warps"],
                           num_stages=_stages(bm, bn, bk, x.element_size(), p["num_stages"]))
        if split > 1:
            block = 1024
            _splitk_reduce[(triton.cdiv(M * N, block),)](ws, y, M * N, N, y.stride(0), y.stride(1),
                                                        SPLIT=split, BLOCK=block, num_warps=4)
        return y
