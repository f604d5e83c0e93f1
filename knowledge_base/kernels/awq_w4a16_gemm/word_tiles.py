"""
---
id: kernels/awq_w4a16_gemm/word_tiles
op: awq_w4a16_gemm
category: MatrixMultiply
dtypes: [float16, int32]
techniques: [weight-only-quantization, int4-unpack, coalesced-word-loads, group-wise-scales, dequant-in-registers, tl-dot, split-k, two-stage-reduction, per-shape-dispatch, dequantize-to-scratch, grouped-tile-order, fp32-accumulation, int64-offsets, masking]
params:
  BM: [16, 32, 64]
  BN: [64, 128, 256]
  SPLIT_K: [0, 1, 2, 4, 8]
  num_warps: [4, 8]
  num_stages: [2, 3, 4]
  PREFILL_M: [256, 512, 1024]
summary: W4A16 with the packed weights loaded as whole int32 words ([BK, BN/8], contiguous, one lane per word) and unpacked in registers by a [BK, BN/8, 8] shift-and-mask and a reshape to [BK, BN], instead of eight lanes gathering each word by column; decode and mid M dequantise inside the K loop with split-K, prefill dequantises once to an fp16 scratch matrix with the same word unpack and runs a plain tl.dot GEMM.
---
y = x @ W, W[k, n] = fp16((q[k, n] - z[k // G, n]) * s[k // G, n]), eight 4-bit values per int32
in AWQ's order: column 8p + i is nibble REVERSE[i] = (i % 2) * 4 + i // 2 of word p.

What you see with the column-gather kernels (`dequant_tiles`, `dequant_then_gemm`) on the H200
(2026-12-04, all shapes): M = 1, K 4096, N 6144 took 169-285 us against a 2.7 us roofline (12.6
MB of packed weights), slower than torch.compile's unfused reference (62 us). Both index the
packed matrix by output column, `word = n // 8`, so the pointer tensor is [BK, BN] with eight
equal addresses per word: the compiler's contiguity analysis sees runs of one element, issues one
scalar load per column instead of vector loads along the row, and the load count is 8x the data.

Design:
- Word tiles. The packed tile is loaded as [BK, BN / 8] int32 words at consecutive addresses
  (vectorisable, each byte read once). Its eight nibbles are shifted out as eight word-shaped
  tensors and interleaved by three levels of tl.join (even columns 0, 2, 4, 6 = nibbles 0, 1, 2,
  3; odd = 4, 5, 6, 7), then reshaped to row-major columns 8p + i.
  tl.join puts its new axis inside a thread, so each thread holds eight adjacent columns and the
  dequantised tile reaches shared memory in 16-byte stores. The first version shifted a broadcast
  [.., 8] tensor whose eight-axis Triton spread over threads: its offline sm_90a PTX (shape 0,
  16 x 128 output tile, 128-deep K tile) had 128 `st.shared.b16` and 129 `ld.shared.b32` per K
  tile, this one 1 and 0 (shared-memory instructions 289 -> 94 in all).
  The H200 figures in the op's playbook were measured on that first version. Then it subtracts the
  zeros (the group's row of words unpacked the same way), multiplies by the group's fp16 scales
  in fp32 and rounds to fp16 as the reference does.
- Groups: BK is the group size (clamped to 128 and to a power of two dividing it), so one K tile
  lies in one group: one row of zeros and scales per tile.
- M <= PREFILL_M: dequantise in the K loop (the weights are read once; each M tile re-unpacks
  them, which costs little while there are few M tiles). BM = min(BM, max(16, next_pow2(M))), so
  decode uses 16-row MMA tiles. Split-K: SPLIT_K 0 picks the smallest power of two (<= 16, and
  leaving each split >= 2 K tiles) that gives two programs per SM; fp32 partials [S, M, N] are
  summed and rounded by a second launch (small exactly when splitting: few output tiles).
- M > PREFILL_M: dequantise once into an fp16 [K, N] scratch (the same word unpack, one program
  per [BK, BN] tile) and run a grouped-order tl.dot GEMM over it; the unpack is then paid once,
  not once per M tile, against 2 bytes per weight written and read back.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BM": 16, "BN": 128, "SPLIT_K": 0, "num_warps": 4, "num_stages": 4, "PREFILL_M": 256, "P_BM": 128, "P_BN": 128, "P_BK": 64, "P_GROUP_M": 8, "P_warps": 8, "P_stages": 3}

TARGET_PROGRAMS = 264        # two programs per SM on the 132-SM H200
MAX_SPLIT = 16


@triton.jit
def _unpack(words, R: tl.constexpr, C: tl.constexpr):
    """[R, C // 8] int32 words -> [R, C] int32 nibbles in AWQ's column order (column 8p + i is
    nibble (i % 2) * 4 + i // 2 of word p), built by tl.join so each thread holds 8 adjacent columns."""
    n0 = words & 0xF
    n1 = (words >> 4) & 0xF
    n2 = (words >> 8) & 0xF
    n3 = (words >> 12) & 0xF
    n4 = (words >> 16) & 0xF
    n5 = (words >> 20) & 0xF
    n6 = (words >> 24) & 0xF
    n7 = (words >> 28) & 0xF
    even = tl.join(tl.join(n0, n2), tl.join(n1, n3))      # columns 0, 2, 4, 6
    odd = tl.join(tl.join(n4, n6), tl.join(n5, n7))       # columns 1, 3, 5, 7
    return tl.reshape(tl.join(even, odd), (R, C))


@triton.jit
def _fused(x_ptr, qw_ptr, qz_ptr, sc_ptr, y_ptr, part_ptr, M, N, K, G, k_per_split,
           s_xm, s_qk, s_zg, s_sg, s_ym,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PARTIAL: tl.constexpr):
    pn = tl.program_id(0)
    pm = tl.program_id(1)
    split = tl.program_id(2)
    offs_m = pm * BM + tl.arange(0, BM)
    offs_n = pn * BN + tl.arange(0, BN)
    offs_w = pn * (BN // 8) + tl.arange(0, BN // 8)
    mm = offs_m < M
    nm = offs_n < N
    wm = offs_w < N // 8
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    k_lo = split * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    for k0 in range(k_lo, k_hi, BK):
        offs_k = k0 + tl.arange(0, BK)
        km = offs_k < k_hi
        x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * s_xm + offs_k[None, :],
                    mask=mm[:, None] & km[None, :], other=0.0)
        words = tl.load(qw_ptr + offs_k[:, None].to(tl.int64) * s_qk + offs_w[None, :],
                        mask=km[:, None] & wm[None, :], other=0)
        q = _unpack(words, BK, BN)
        g = k0 // G
        zw = tl.load(qz_ptr + g * s_zg + offs_w, mask=wm, other=0)
        z = tl.reshape(_unpack(zw[None, :], 1, BN), (BN,))
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


@triton.jit
def _dequant(qw_ptr, qz_ptr, sc_ptr, w_ptr, K, N, G, s_qk, s_zg, s_sg, s_wk, BK: tl.constexpr, BN: tl.constexpr):
    offs_k = tl.program_id(0) * BK + tl.arange(0, BK)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    offs_w = tl.program_id(1) * (BN // 8) + tl.arange(0, BN // 8)
    km = offs_k < K
    nm = offs_n < N
    wm = offs_w < N // 8
    words = tl.load(qw_ptr + offs_k[:, None].to(tl.int64) * s_qk + offs_w[None, :], mask=km[:, None] & wm[None, :],
                    other=0)
    q = _unpack(words, BK, BN)
    g = (tl.program_id(0) * BK) // G          # BK divides G: one group per tile
    z = tl.reshape(_unpack(tl.load(qz_ptr + g * s_zg + offs_w, mask=wm, other=0)[None, :], 1, BN), (BN,))
    s = tl.load(sc_ptr + g * s_sg + offs_n, mask=nm, other=0.0).to(tl.float32)
    w = ((q - z[None, :]).to(tl.float32) * s[None, :]).to(w_ptr.dtype.element_ty)
    tl.store(w_ptr + offs_k[:, None].to(tl.int64) * s_wk + offs_n[None, :], w, mask=km[:, None] & nm[None, :])


@triton.jit
def _gemm(x_ptr, w_ptr, y_ptr, M, N, K, s_xm, s_wk, s_ym,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
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
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        offs_k = k0 + tl.arange(0, BK)
        km = offs_k < K
        x = tl.load(x_ptr + offs_m[:, None].to(tl.int64) * s_xm + offs_k[None, :], mask=mm[:, None] & km[None, :],
                    other=0.0)
        w = tl.load(w_ptr + offs_k[:, None].to(tl.int64) * s_wk + offs_n[None, :], mask=km[:, None] & nm[None, :],
                    other=0.0)
        acc += tl.dot(x, w)
    tl.store(y_ptr + offs_m[:, None].to(tl.int64) * s_ym + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=mm[:, None] & nm[None, :])


def group_tile(G: int) -> int:
    """The K tile: the largest power of two <= 128 that divides the group size (one group per tile)."""
    bk = 128
    while bk > 16 and G % bk:
        bk //= 2
    return bk


def splits(p: dict, tiles: int, k_tiles: int) -> int:
    if p["SPLIT_K"]:
        return max(1, min(p["SPLIT_K"], k_tiles))
    s = 1
    while s < MAX_SPLIT and tiles * s < TARGET_PROGRAMS and k_tiles >= 4 * s:
        s *= 2
    return s


class ModelNew(nn.Module):
    def __init__(self, group_size: int = 128):
        super().__init__()
        self.group_size = group_size

    def forward(self, x, qweight, qzeros, scales):
        M, K = x.shape
        N = scales.shape[1]
        G = self.group_size
        p = AKA_PARAMS
        bk = group_tile(G)
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        if M > p["PREFILL_M"]:
            bn = p["P_BN"]
            w = torch.empty((K, N), dtype=x.dtype, device=x.device)
            _dequant[(triton.cdiv(K, bk), triton.cdiv(N, bn))](qweight, qzeros, scales, w, K, N, G,
                                                              qweight.stride(0), qzeros.stride(0), scales.stride(0),
                                                              w.stride(0), BK=bk, BN=bn, num_warps=4)
            tiles = triton.cdiv(M, p["P_BM"]) * triton.cdiv(N, bn)
            _gemm[(tiles,)](x, w, y, M, N, K, x.stride(0), w.stride(0), y.stride(0), BM=p["P_BM"], BN=bn,
                            BK=p["P_BK"], GROUP_M=p["P_GROUP_M"], num_warps=p["P_warps"], num_stages=p["P_stages"])
            return y
        bm = min(p["BM"], max(16, triton.next_power_of_2(M)))
        bn = p["BN"]
        tiles_n, tiles_m = triton.cdiv(N, bn), triton.cdiv(M, bm)
        k_tiles = triton.cdiv(K, bk)
        split = splits(p, tiles_n * tiles_m, k_tiles)
        k_per_split = triton.cdiv(k_tiles, split) * bk     # split boundaries on whole K tiles
        split = triton.cdiv(K, k_per_split)
        part = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
        _fused[(tiles_n, tiles_m, split)](x, qweight, qzeros, scales, y, part, M, N, K, G, k_per_split,
                                          x.stride(0), qweight.stride(0), qzeros.stride(0), scales.stride(0),
                                          y.stride(0), BM=bm, BN=bn, BK=bk, PARTIAL=split > 1,
                                          num_warps=p["num_warps"], num_stages=p["num_stages"])
        if split > 1:
            _sum_splits[(triton.cdiv(M * N, 1024),)](part, y, M * N, N, y.stride(0), split, BLOCK=1024, num_warps=4)
        return y
