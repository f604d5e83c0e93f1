"""
---
id: kernels/awq_w4a16_gemm/dequant_tiles
op: awq_w4a16_gemm
category: MatrixMultiply
dtypes: [float16, int32]
techniques: [weight-only-quantization, int4-unpack, group-wise-scales, dequant-in-registers, tl-dot, split-k, two-stage-reduction, grouped-tile-order, fp32-accumulation, masking]
params:
  BM: [16, 32, 64, 128]
  BN: [32, 64, 128]
  BK: [32, 64, 128]
  SPLIT_K: [1, 2, 4, 8]
  GROUP_M: [1, 8]
  num_warps: [4, 8]
  num_stages: [2, 3, 4]
summary: W4A16 GEMM with the 4-bit weights dequantised in registers, one K tile inside one quantisation group so each tile needs one row of scales and zeros; BM shrinks to the token count at decode; split-K (fp32 partials and a summing launch) only when the output tiles leave SMs idle; grouped tile order for L2 reuse at prefill.
---
y = x @ W, W[k, n] = fp16((q[k, n] - z[k // G, n]) * s[k // G, n]), 4-bit q/z packed 8 per int32.

Design:
- Decode (M <= 128) is bound by the weight bytes: K * N / 2 of packed weights against 2 * K * N
  for fp16, so the floor is ~4x lower (Llama-3.1-8B gate_up at 16 tokens: 61 MB of packed
  weights, scales and zeros, 13 us at 4.8 TB/s, against 235 MB / 49 us in fp16). Prefill (M >= 1024) is compute-bound on the
  fp16 MMA; the dequantisation (shift, mask, subtract, multiply, round per weight) is paid once
  per BM rows, so larger BM amortises it.
- Unpacking: the tile's [BK, BN] nibbles are read as int32 words at column n // 8 and shifted by
  4 * REVERSE[n % 8], REVERSE = [0, 4, 1, 5, 2, 6, 3, 7] (AWQ's packing order), computed as
  (i % 2) * 4 + i // 2. Eight lanes read the same word, which the L1 serves as one transaction;
  the packed tile is 1/4 of the fp16 tile's bytes. Zeros are unpacked the same way from their
  [K / G, N / 8] words, once per tile.
- Groups: BK is clamped to group_size (128 on the benchmark; smaller on the small shapes) and
  group_size is a multiple of it, so one K tile lies in one group: one [BN] row of scales and
  zeros per tile, broadcast over BK.
- Dequantised in fp32 ((q - z) * s is exact there) and rounded to fp16 as the reference, then
  tl.dot(x_tile, w_tile) with fp32 accumulation.
- BM = min(BM, max(16, next_pow2(M))): decode batches of 1-16 tokens use 16-row MMA tiles
  instead of wasting 7/8 of a 128-row tile.
- Split-K: when the output tiles number fewer than 264 (two per SM on the 132-SM H200; e.g. M 1,
  N 6144 at BN 64 is 96 tiles), K is split into up to SPLIT_K parts writing fp32 partials
  [S, M, N], summed and rounded by a second launch. The partials are small exactly then (M * N
  under 264 tiles), so their traffic is a few percent of the weights'.
- GROUP_M > 1 orders tiles in column groups so a wave reuses the same weight tiles from L2
  (prefill); at decode there is one row of tiles and it does nothing.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BM": 64, "BN": 64, "BK": 64, "SPLIT_K": 4, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}

TARGET_PROGRAMS = 264        # 2 programs per SM on the 132-SM H200


@triton.jit
def _w4a16(x_ptr, qw_ptr, qz_ptr, sc_ptr, y_ptr, part_ptr, M, N, K, G, k_per_split,
           s_xm, s_qk, s_zg, s_sg, s_ym,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
           PARTIAL: tl.constexpr):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pm = first_m + (pid % per_group) % rows
    pn = (pid % per_group) // rows
    offs_m = pm * BM + tl.arange(0, BM)
    offs_n = pn * BN + tl.arange(0, BN)
    mm = offs_m < M
    nm = offs_n < N
    i = offs_n % 8
    shift = ((i % 2) * 4 + i // 2) * 4
    word = offs_n // 8
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k_lo = split * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    for k0 in range(k_lo, k_hi, BK):
        offs_k = k0 + tl.arange(0, BK)
        km = offs_k < k_hi
        x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * s_xm + offs_k[None, :],
                    mask=mm[:, None] & km[None, :], other=0.0)
        packed = tl.load(qw_ptr + offs_k[:, None].to(tl.int64) * s_qk + word[None, :],
                         mask=km[:, None] & nm[None, :], other=0)
        q = (packed >> shift[None, :]) & 0xF
        g = k0 // G
        z = (tl.load(qz_ptr + g * s_zg + word, mask=nm, other=0) >> shift) & 0xF
        s = tl.load(sc_ptr + g * s_sg + offs_n, mask=nm, other=0.0).to(tl.float32)
        w = ((q - z[None, :]).to(tl.float32) * s[None, :]).to(x_ptr.dtype.element_ty)
        acc += tl.dot(x, w)
    if PARTIAL:
        base = part_ptr + split.to(tl.int64) * M * N
        tl.store(base + offs_m[:, None].to(tl.int64) * N + offs_n[None, :], acc, mask=mm[:, None] & nm[None, :])
    else:
        tl.store(y_ptr + offs_m[:, None].to(tl.int64) * s_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=mm[:, None] & nm[None, :])


@triton.jit
def _sum_splits(part_ptr, y_ptr, MN, N, s_ym, S, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, S):
        acc += tl.load(part_ptr + s * MN + offs, mask=m, other=0.0)
    tl.store(y_ptr + (offs // N) * s_ym + offs % N, acc.to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self, group_size: int = 128):
        super().__init__()
        self.group_size = group_size

    def forward(self, x, qweight, qzeros, scales):
        M, K = x.shape
        N = scales.shape[1]
        G = self.group_size
        p = AKA_PARAMS
        bm = min(p["BM"], max(16, triton.next_power_of_2(M)))
        bn = p["BN"]
        bk = min(p["BK"], G)
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        k_tiles = triton.cdiv(K, bk)
        split = 1
        while split < p["SPLIT_K"] and tiles * split < TARGET_PROGRAMS and k_tiles >= 2 * split * 2:
            split *= 2
        # Split boundaries on whole groups' K tiles, so no tile straddles two groups.
        k_per_split = triton.cdiv(k_tiles, split) * bk
        split = triton.cdiv(K, k_per_split)
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        part = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
        _w4a16[(tiles, split)](x, qweight, qzeros, scales, y, part, M, N, K, G, k_per_split,
                               x.stride(0), qweight.stride(0), qzeros.stride(0), scales.stride(0), y.stride(0),
                               BM=bm, BN=bn, BK=bk, GROUP_M=p["GROUP_M"], PARTIAL=split > 1,
                               num_warps=p["num_warps"], num_stages=p["num_stages"])
        if split > 1:
            _sum_splits[(triton.cdiv(M * N, 1024),)](part, y, M * N, N, y.stride(0), split, BLOCK=1024, num_warps=4)
        return y
