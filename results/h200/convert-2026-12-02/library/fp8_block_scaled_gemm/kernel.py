"""
---
id: kernels/fp8_block_scaled_gemm/grouped_tiles
op: fp8_block_scaled_gemm
category: MatrixMultiply
dtypes: [float8_e4m3fn, bfloat16]
techniques: [block-scaled-fp8, per-group-scaling, block-scaling, gemm-tiling, grouped-ordering, l2-reuse, software-pipelining, fp32-accumulation, int64-offsets]
params:
  BM: [64, 128]
  BN: [64, 128, 256]
  GROUP: [4, 8, 16]
  num_warps: [4, 8]
  num_stages: [2, 3, 4, 5]
summary: Prefill family. BK fixed at the 128-wide scale group; each K step is a fresh fp8 tl.dot promoted to fp32 and scaled by the [BM] activation scales and the [BN] weight-block scales; grouped tile order.
---
y = (a * a_scale) @ (b * b_scale).T with a [M, K] e4m3 (one fp32 scale per token per 128-wide K
group) and b [N, K] e4m3 (one scale per 128x128 block), bf16 out.

Design:
- BK = 128 = the quantisation group, so each K step touches exactly one a_scale column and one
  b_scale column: `acc += dot(a_tile, b_tile) * sa[:, None] * sb[None, :]`. The dot starts from a
  zero accumulator every step, so Hopper's reduced-precision fp8 MMA accumulation (about 14 bits,
  DeepSeek-V3 report) is promoted to fp32 every 128 products, as DeepSeek-V3 specifies.
- The weight scale index is `n // 128` per column (BN 256 spans two blocks, BN 64 half of one);
  the activation scale index is the row. Partial edge blocks (N 2112, small odd K) reuse their
  block's scale, as the reference does; the K tail is masked only when K % 128 != 0.
- Both operands are K-contiguous ([M, K] and [N, K]), the layout 8-bit wgmma requires.
- Grouped tile order on a 1-D grid for L2 reuse; rows/cols past M/N wrap instead of masking the
  loads; int64 row offsets; num_stages clamped on the host to about 200 KB of fp8 operand
  buffers ((BM + BN) * 128 bytes per stage).
At decode M this family leaves SMs idle: kernels/fp8_block_scaled_gemm/splitk_small_m.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'BM': 128, 'BN': 128, 'GROUP': 8, 'num_warps': 8, 'num_stages': 4}  # set by the offline proposer

QBLOCK = 128                 # DeepSeek-V3 weight_block_size; also the activation group width
_SMEM_BUDGET = 200 * 1024


@triton.jit
def _fp8_gemm_grouped(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K,
                      s_am, s_ak, s_bn, s_bk, s_cm, s_cn, s_asm, s_ask, s_bsn, s_bsk,
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
    b_ptrs = b_ptr + bn[None, :].to(tl.int64) * s_bn + rk[:, None] * s_bk
    sa_ptrs = as_ptr + am.to(tl.int64) * s_asm
    sb_ptrs = bs_ptr + (bn // BK) * s_bsn

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(kb * BK + rk)[None, :] < K, other=0.0)
            b = tl.load(b_ptrs, mask=(kb * BK + rk)[:, None] < K, other=0.0)
        sa = tl.load(sa_ptrs + kb * s_ask)
        sb = tl.load(sb_ptrs + kb * s_bsk)
        part = tl.dot(a, b)                      # fresh fp32 accumulator: promotion every 128
        acc += part * sa[:, None] * sb[None, :]
        a_ptrs += BK * s_ak
        b_ptrs += BK * s_bk

    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * s_cm + rn[None, :] * s_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, a_scale, b, b_scale):
        M, K = a.shape
        N = b.shape[0]
        p = AKA_PARAMS
        bm, bn = p["BM"], p["BN"]
        y = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
        stages = max(1, min(p["num_stages"], _SMEM_BUDGET // ((bm + bn) * QBLOCK * a.element_size())))
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        _fp8_gemm_grouped[grid](a, b, y, a_scale, b_scale, M, N, K,
                                a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                y.stride(0), y.stride(1), a_scale.stride(0), a_scale.stride(1),
                                b_scale.stride(0), b_scale.stride(1),
                                BM=bm, BN=bn, BK=QBLOCK, GROUP=p["GROUP"], EVEN_K=(K % QBLOCK == 0),
                                num_warps=p["num_warps"], num_stages=stages)
        return y
