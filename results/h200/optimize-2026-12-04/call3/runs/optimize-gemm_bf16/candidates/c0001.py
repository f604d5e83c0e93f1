"""
---
id: kernels/gemm_bf16/grouped_tiles
op: gemm_bf16
category: MatrixMultiply
dtypes: [bfloat16]
techniques: [gemm-tiling, grouped-ordering, l2-reuse, software-pipelining, num-stages, fp32-accumulation, int64-offsets, masking]
params:
  BM: [64, 128]
  BN: [64, 128, 256]
  BK: [32, 64, 128]
  GROUP: [4, 8, 16]
  num_warps: [4, 8]
  num_stages: [2, 3, 4, 5]
summary: Prefill family. One output tile per program on a 1-D grid in grouped (GROUP tile rows) order, tl.dot over BK slices with fp32 accumulation, one bf16 rounding in the epilogue.
---
y = x @ w.T with x [M, K] and w [N, K] (nn.Linear layout: both operands K-contiguous, which is
what wgmma wants for bf16 and what makes the [BK, BN] view of w a free transpose).

Design:
- 1-D grid over cdiv(M, BM) * cdiv(N, BN) tiles, remapped so GROUP consecutive programs walk
  down GROUP tile rows of one tile column: the programs in flight share A row panels and B column
  panels in L2 (patterns/grouped-tile-order-l2).
- Row and column indices past M / N are wrapped (`% M`, `% N`) instead of masked, so the operand
  loads carry no M/N mask and stay vectorised; only the store is masked. The K tail is masked
  only when K is not a multiple of BK (EVEN_K), e.g. K 7392 with BK 128.
- num_stages is clamped on the host so (BM + BN) * BK * 2 bytes per stage never exceeds about
  200 KB of the 227 KB of shared memory a Hopper block may use: every listed combination
  compiles.
- int64 row offsets: M * K reaches 16384 * 3584 and M * N 16384 * 8192 (1.3e8, safe today, but
  the same kernel sees 32k-token prefills).
This family is meant for prefill (M >= 512); at decode M it leaves most SMs idle (see
kernels/gemm_bf16/splitk_small_m).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'BM': 128, 'BN': 256, 'BK': 64, 'GROUP': 8, 'num_warps': 8, 'num_stages': 3}  # set by the offline proposer

_SMEM_BUDGET = 200 * 1024  # bytes of operand buffers across stages (H100/H200: 227 KB per block)


@triton.jit
def _gemm_grouped(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bn, s_bk, s_cm, s_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                  EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
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
    a_ptrs = a_ptr + am[:, None].to(tl.int64) * s_am + rk[None, :] * s_ak
    b_ptrs = b_ptr + bn[None, :].to(tl.int64) * s_bn + rk[:, None] * s_bk      # w^T tile [BK, BN]

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(k0 + rk)[None, :] < K, other=0.0)
            b = tl.load(b_ptrs, mask=(k0 + rk)[:, None] < K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * s_ak
        b_ptrs += BK * s_bk

    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * s_cm + rn[None, :] * s_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _stages(bm, bn, bk, elem_bytes, wanted):
    per_stage = (bm + bn) * bk * elem_bytes
    return max(1, min(wanted, _SMEM_BUDGET // per_stage))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        p = AKA_PARAMS
        bm, bn, bk = p["BM"], p["BN"], p["BK"]
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        _gemm_grouped[grid](x, w, y, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                            y.stride(0), y.stride(1), BM=bm, BN=bn, BK=bk, GROUP=p["GROUP"],
                            EVEN_K=(K % bk == 0), num_warps=p["num_warps"],
                            num_stages=_stages(bm, bn, bk, x.element_size(), p["num_stages"]))
        return y
