"""
---
id: kernels/fp8_block_scaled_gemm/wide_halves
op: fp8_block_scaled_gemm
category: MatrixMultiply
dtypes: [float8_e4m3fn, bfloat16]
techniques: [block-scaled-fp8, per-group-scaling, block-scaling, gemm-tiling, tensor-descriptors, tma, persistent-kernel, grouped-ordering, software-pipelining, fp32-accumulation, register-pressure, int64-offsets]
params:
  BM: [64, 128]
  NH: [1, 2]
  TMA: [0, 1]
  PERSIST: [0, 1]
  GROUP: [8, 16]
  num_warps: [4, 8, 16]
  num_stages: [2, 3, 4]
summary: Prefill family for the compute-bound block-scaled fp8 GEMM. A 128x256 output tile computed as two 128-column halves, each one weight block with one scalar scale, so each K step's fresh fp8 dot result is a 128x128 block (64 registers a thread at 8 warps) instead of 128x256 (128 registers), and the wide tile the per-128 promotion spilled at fits beside its 128-register accumulator.
---
y = (a * a_scale) @ (b * b_scale).T with a [M, K] e4m3 (one fp32 scale per token per 128-wide K
group) and b [N, K] e4m3 (one scale per 128x128 block), bf16 out.

Why: every K step of 128 must start its fp8 dot from zero and add the scaled result to an fp32
accumulator (Hopper's fp8 MMA keeps about 14 bits when it accumulates, DeepSeek-V3 report; the
promotion every 128 products is the recipe). So the fresh dot result lives beside the accumulator.
At a 128x256 tile on 8 warps that is 128 + 128 fp32 registers a thread before operands: the
dispatch kernel's 128x256 and 256x128 tiles spilled (scripts/check_gemm_grid.py), and its prefill
shapes stayed at 128x128 tiles, whose operand loads are (128 + 128) x 128 B per 4.2 MFLOP: 64
FLOP/B from L2, against 85 at 128x256. Those shapes ran 0.68-0.84x torch's blockwise scaled_mm on
the H100 (results/h100/device-2026-12-05b/suite_partial).

Design:
- NH 2: the tile's two 128-column halves are two weight blocks; each K step loads the A tile once
  and both B halves (two TMA boxes [128, 128]), then `acc0 += dot(a, b0) * sa * sb0` and the same
  for acc1. Each fresh result is [BM, 128]; the two accumulators hold the [BM, 256] tile. Weight
  scales are one scalar per half and step (BN 128 = one block). NH 1 is the 128x128 tile.
- A half past N (N 2112 = 16.5 blocks) reads zeros (TMA fills the box; pointer loads wrap the
  rows and the store masks them) and clamps its scale index to the last block.
- TMA 1: host tensor descriptors, K-contiguous boxes (the layout 8-bit wgmma requires), bf16
  stored per half by TMA; TMA 0 (or a tensor the 16-byte rule refuses, e.g. K 328): pointer
  loads with the K tail masked.
- Persistent grouped walk (PERSIST 1: min(tiles, SMs) programs); num_stages clamped so the
  operand stages, (BM + 128 NH) x 128 B each, plus the store box stay under about 200 KB.
- No split-K: the prefill shapes this is for have 100+ tiles; at decode M it leaves SMs idle
  (kernels/fp8_block_scaled_gemm/dispatch has the decode paths).

Registers (offline sm_90a, ptxas, triton 3.6, bench shape 10, M 8192 N 7168 K 2048): on 8 warps
the two halves still spill (TMA: 255 registers, 196 B; pointer loads: 255, 80 B): the compiler
keeps both fresh dot results live. On 16 warps (four warpgroups, a 64x64 piece of each half's dot
each, 128 registers a thread at most) it fits: TMA 128 registers, 16 B spilled; pointer loads 128,
none; 180,280 B shared at 3 stages, one CTA per SM. So the default is 16 warps. 256x128 tiles
(BM 256, NH 1) spill on both warp counts (192-340 B). The 128x128 tile (NH 1, 8 warps): 164
registers, no spill.

Measured (H100, results/h100/device-2026-12-05c): at its defaults no faster than dispatch on
any shape (ties at M 4096 N 3072 K 1536 and M 8192 N 7168 K 2048, 0.78-0.95x on the other M >= 2048
shapes, far slower at decode M, which it has no GEMV path for). Kept as the measured negative
result and the starting point for an 8-warp ordering of the two halves.
"""
import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

AKA_PARAMS = {"BM": 128, "NH": 2, "TMA": 1, "PERSIST": 1, "GROUP": 8, "num_warps": 16, "num_stages": 3}

QBLOCK = 128                 # DeepSeek-V3 weight_block_size; also the activation group width
_SMEM_BUDGET = 200 * 1024
_RUNTIME_INTS = ["M", "N", "K", "s_asm", "s_ask", "s_bsn", "s_bsk", "n_prog"]


@triton.jit
def _coords(t, n_pm, n_pn, GROUP: tl.constexpr):
    per_group = GROUP * n_pn
    first_pm = (t // per_group) * GROUP
    rows_here = tl.minimum(n_pm - first_pm, GROUP)
    return first_pm + (t % per_group) % rows_here, (t % per_group) // rows_here


@triton.jit(do_not_specialize=_RUNTIME_INTS)
def _wide_tma(a_desc, b_desc, c_desc, as_ptr, bs_ptr, M, N, K, s_asm, s_ask, s_bsn, s_bsk, n_prog,
              BM: tl.constexpr, BK: tl.constexpr, NH: tl.constexpr, GROUP: tl.constexpr):
    n_pm = tl.cdiv(M, BM)
    n_pn = tl.cdiv(N, BK * NH)
    last_block = tl.cdiv(N, BK) - 1
    for t in tl.range(tl.program_id(0), n_pm * n_pn, n_prog, flatten=True):
        pm, pn = _coords(t, n_pm, n_pn, GROUP)
        rm = pm * BM + tl.arange(0, BM)
        sa_row = as_ptr + (rm % M).to(tl.int64) * s_asm
        blk = pn * NH                                    # the first half's weight block
        acc0 = tl.zeros((BM, BK), dtype=tl.float32)
        acc1 = tl.zeros((BM, BK), dtype=tl.float32)
        for kt in range(0, tl.cdiv(K, BK)):
            a = a_desc.load([pm * BM, kt * BK])
            sa = tl.load(sa_row + kt * s_ask)[:, None]
            b0 = b_desc.load([blk * BK, kt * BK])
            sb0 = tl.load(bs_ptr + blk * s_bsn + kt * s_bsk)
            acc0 += tl.dot(a, b0.T) * (sa * sb0)         # fresh fp32 dot: promotion every 128
            if NH == 2:
                b1 = b_desc.load([(blk + 1) * BK, kt * BK])
                sb1 = tl.load(bs_ptr + tl.minimum(blk + 1, last_block) * s_bsn + kt * s_bsk)
                acc1 += tl.dot(a, b1.T) * (sa * sb1)
        c_desc.store([pm * BM, blk * BK], acc0.to(c_desc.dtype))
        if NH == 2:
            c_desc.store([pm * BM, (blk + 1) * BK], acc1.to(c_desc.dtype))   # a box past N is clipped


@triton.jit(do_not_specialize=_RUNTIME_INTS)
def _wide_ptr(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K, s_am, s_bn, s_cm, s_asm, s_ask, s_bsn, s_bsk, n_prog,
              BM: tl.constexpr, BK: tl.constexpr, NH: tl.constexpr, GROUP: tl.constexpr, EVEN_K: tl.constexpr):
    n_pm = tl.cdiv(M, BM)
    n_pn = tl.cdiv(N, BK * NH)
    last_block = tl.cdiv(N, BK) - 1
    rk = tl.arange(0, BK)
    for t in tl.range(tl.program_id(0), n_pm * n_pn, n_prog, flatten=True):
        pm, pn = _coords(t, n_pm, n_pn, GROUP)
        rm = pm * BM + tl.arange(0, BM)
        blk = pn * NH
        rn0 = blk * BK + rk
        rn1 = rn0 + BK
        a_row = a_ptr + (rm % M).to(tl.int64)[:, None] * s_am
        b_row0 = b_ptr + (rn0 % N).to(tl.int64)[None, :] * s_bn     # rows past N wrap (their columns are masked)
        b_row1 = b_ptr + (rn1 % N).to(tl.int64)[None, :] * s_bn
        sa_row = as_ptr + (rm % M).to(tl.int64) * s_asm
        acc0 = tl.zeros((BM, BK), dtype=tl.float32)
        acc1 = tl.zeros((BM, BK), dtype=tl.float32)
        for kt in range(0, tl.cdiv(K, BK)):
            kk = kt * BK + rk
            if EVEN_K:
                a = tl.load(a_row + kk[None, :])
                b0 = tl.load(b_row0 + kk[:, None])
            else:
                a = tl.load(a_row + kk[None, :], mask=kk[None, :] < K, other=0.0)
                b0 = tl.load(b_row0 + kk[:, None], mask=kk[:, None] < K, other=0.0)
            sa = tl.load(sa_row + kt * s_ask)[:, None]
            sb0 = tl.load(bs_ptr + tl.minimum(blk, last_block) * s_bsn + kt * s_bsk)
            acc0 += tl.dot(a, b0) * (sa * sb0)
            if NH == 2:
                if EVEN_K:
                    b1 = tl.load(b_row1 + kk[:, None])
                else:
                    b1 = tl.load(b_row1 + kk[:, None], mask=kk[:, None] < K, other=0.0)
                sb1 = tl.load(bs_ptr + tl.minimum(blk + 1, last_block) * s_bsn + kt * s_bsk)
                acc1 += tl.dot(a, b1) * (sa * sb1)
        c_row = c_ptr + rm.to(tl.int64)[:, None] * s_cm
        tl.store(c_row + rn0[None, :], acc0.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn0[None, :] < N))
        if NH == 2:
            tl.store(c_row + rn1[None, :], acc1.to(c_ptr.dtype.element_ty),
                     mask=(rm[:, None] < M) & (rn1[None, :] < N))


@functools.lru_cache(maxsize=None)
def _num_sms(device_index):
    if device_index is None:
        return 4  # the CPU interpreter: a small grid still walks several tiles per program
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _tma_ok(*tensors):
    return all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0 for t in tensors)


def gemm(a, a_scale, b, b_scale, p):
    """y = (a * a_scale) @ (b * b_scale).T with parameters `p` (AKA_PARAMS' keys)."""
    if a.stride(-1) != 1:
        a = a.contiguous()
    if b.stride(-1) != 1:
        b = b.contiguous()
    M, K = a.shape
    N = b.shape[0]
    bm, nh = p["BM"], p["NH"]
    y = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
    n_tiles = triton.cdiv(M, bm) * triton.cdiv(N, QBLOCK * nh)
    n_prog = min(n_tiles, _num_sms(a.device.index if a.is_cuda else None)) if p["PERSIST"] else n_tiles
    use_tma = bool(p["TMA"]) and _tma_ok(a, b, y)
    epi = bm * QBLOCK * 2 if use_tma else 0                    # the store box, one half at a time
    stages = max(1, min(p["num_stages"], (_SMEM_BUDGET - epi) // ((bm + QBLOCK * nh) * QBLOCK)))
    scales = (a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1))
    if use_tma:
        _wide_tma[(n_prog,)](TensorDescriptor.from_tensor(a, [bm, QBLOCK]),
                             TensorDescriptor.from_tensor(b, [QBLOCK, QBLOCK]),
                             TensorDescriptor.from_tensor(y, [bm, QBLOCK]), a_scale, b_scale, M, N, K,
                             *scales, n_prog, BM=bm, BK=QBLOCK, NH=nh, GROUP=p["GROUP"],
                             num_warps=p["num_warps"], num_stages=stages)
    else:
        _wide_ptr[(n_prog,)](a, b, y, a_scale, b_scale, M, N, K, a.stride(0), b.stride(0), y.stride(0), *scales,
                             n_prog, BM=bm, BK=QBLOCK, NH=nh, GROUP=p["GROUP"], EVEN_K=(K % QBLOCK == 0),
                             num_warps=p["num_warps"], num_stages=stages)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, a_scale, b, b_scale):
        return gemm(a, a_scale, b, b_scale, AKA_PARAMS)
