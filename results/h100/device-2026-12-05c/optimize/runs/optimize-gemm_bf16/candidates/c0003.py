"""Dispatching candidate written by aka (aka/agent/dispatch.py) from 2 measured variants of gemm_bf16.

Each input shape goes to the variant measured fastest on it (table below; a shape never measured
goes to the nearest measured one of the same structure). The variants follow as written, their
module-level names prefixed with _vK_.

- _v0_ = c0002 (kernels/gemm_bf16/dispatch {'TMA': 1, 'PERSISTENT': 1, 'FIXUP': 1, '@retune': 1}): shapes 1, 3, 4, 6, 8, 9, 10, 11, 12, 13, 15
- _v1_ = c0001 (kernels/gemm_bf16/dispatch {'TMA': 1, 'PERSISTENT': 1, 'FIXUP': 1}): shapes 0, 2, 5, 7, 14
"""
import torch


# ---- variant _v0_: c0002 ----------------------------------------

"""
---
id: kernels/gemm_bf16/dispatch
op: gemm_bf16
category: MatrixMultiply
dtypes: [bfloat16]
techniques: [per-shape-dispatch, config-table, tensor-descriptors, tma, persistent-kernel, grouped-ordering, split-k, two-stage-reduction, deterministic-reduction, decode-gemv, software-pipelining, warp-specialization, fp32-accumulation, int64-offsets]
params:
  TMA: [0, 1]
  PERSISTENT: [0, 1]
  FIXUP: [0, 1]
tuner: gemm
summary: One candidate for every M. forward() picks a configuration per shape from a table measured on the GPU (nearest measured shape in log space, M weighted most) and runs one of three paths, a GEMV for M <= 4, a pointer-load tile kernel or a TMA tile kernel, each optionally persistent with grouped tile order and split-K (fp32 partials, deterministic second-pass reduction).
---
y = x @ w.T, x [M, K] and w [N, K] bf16 (both K-contiguous), fp32 accumulation, one bf16 rounding.
No single tile shape serves M = 1 and M = 16384: decode M is a weight stream (about M FLOP/byte
against an H200 ridge near 206) that needs every SM reading w, prefill M is tensor-core bound and
needs 128x256 tiles, deep pipelines and L2 reuse. Libraries choose per shape (cuBLAS heuristics,
vLLM's JSON config tables per (N, K) and M bucket); this kernel does the same from `_TABLE`.

Dispatch:
- `_TABLE` rows are (M, N, K, config), written by `scripts/bake_dispatch.py` from the JSON of
  `scripts/gpu_tune_gemm.py` (the best measured configuration per bench shape). A shape takes the
  config of the nearest row by 4*|log2 M - log2 M'| + |log2 N - log2 N'| + |log2 K - log2 K'|, so a
  bench shape gets exactly what was measured for it and any other shape the closest measurement.
  With an empty table `_heuristic` decides (M buckets 1-4, 5-64, 65-256, larger).
- Every config is correct for every shape: the GEMV path is taken only for M <= 4 (else the
  tile path with the same split), TMA only where the descriptors' 16-byte alignment holds (else
  pointer loads with the same tiles). AKA_PARAMS switches paths off globally: TMA 0 never builds
  a descriptor, PERSISTENT 0 launches one program per work item.

Paths:
- gemv (M <= 4): program = BN output columns x one K split, all M rows (BM = next power of two of
  M, rows past M masked). Each step loads a [BN, BK] weight slice once and reduces it against every
  row in fp32 (`tl.sum`): no MMA padding of M to 16/64 and wide vector loads of w.
- tile, pointer loads: grouped tile order (GROUP tile rows per column panel share L2); rows and
  columns past M/N wrap (`% M`, `% N`) so loads carry no M/N mask; the K tail is masked only when
  K % BK != 0 (K 7392 at BK 128).
- tile, TMA: host `TensorDescriptor`s for x, w and y (triton/tensor-descriptors-tma); loads are
  bulk async copies that zero-fill past the edges, so no masks at all; the bf16 tile is stored by
  TMA too, in two [BM, BN/2] halves when BN >= 128 (the epilogue buffer then costs half, which
  buys 128x256x64 a third stage: 180 KB shared, 154 registers in the offline sm_90a compile).
  `WS` 1 asks for warp specialisation of the K loop (sm_90 compiles it only with descriptor
  loads, and not at 128x128x64 with 4 warps: triton/warp-specialization).
- persistent (either tile path): grid = min(work, SMs x OCC) programs walk the work list
  (tiles x splits) with a stride of the grid size (`tl.range(..., flatten=True)` lets the
  pipeliner overlap one tile's epilogue with the next tile's loads); otherwise one work item per
  program. Removes the tail wave when tiles are not a multiple of 132.
- split-K: split s owns a contiguous BK-aligned run of K tiles, writes fp32 partials
  [SPLIT, M, N], and the splits are summed in fixed order (bit-reproducible, unlike atomics) and
  rounded once to bf16. FIXUP 1 (the default) sums them inside the GEMM: after its partial each
  program takes a ticket on its tile's counter (barrier, then an acq_rel atomic) and the one that
  draws SPLIT - 1 reads the partials back through the L2 (.cg) in split order, stores bf16 and
  resets the counter (a module buffer that stays zero between calls). FIXUP 0 sums them in a
  second launch, `_splitk_reduce`, whose fp32 loads compile to scalar `ld.global.b32` (16 per
  program, offline sm_90a) and which costs a launch against the 17-45 us of the split shapes
  (M 1-256 in the table). Both give the same bits (tests/test_gemm_dispatch.py). Offline, the
  fixup leaves shared memory unchanged and takes the 128 x 128 tiles from 90 to 130 registers
  (their 196 KB of shared memory already hold one program per SM). Partial traffic
  SPLIT * M * N * 8 bytes, a few % of the weight at M <= 64. On the H200 the two were within noise
  on the split shapes except M 256, where the second launch was faster (28.2 vs 30.0 us;
  results/h200/verify-2026-12-05).
- num_stages is clamped on the host so operand buffers ((BM + BN) * BK * 2 bytes per stage) plus
  the TMA store's buffer (BM * BN bytes in halves, else BM * BN * 2) stay under about 200 KB of
  the 227 KB of shared memory per block.
- int64 row offsets: M * K reaches 16384 * 3584, 32k-token prefills go past 2**31.
- Mid M is not a padding problem: at M 96, N 8192, K 7392 on the H200 the BM 32 configs that cover M
  exactly ran 63-102 us, BM 128 with split-K 2 (M padded to 128) 44.4 us, cuBLAS 35.6 us
  (results/h200/optimize-2026-12-05, the re-tune's tune.json).

When to use it: the one bf16 linear-layer kernel to ship when the same projection sees every
token count, from single-token decode to long prefill chunks. A decode batch of a few tokens is
a weight read, so K is cut into slices and all SMs share the weight stream (the GEMV path for up
to four rows); large batches get big TMA-fed tiles in grouped order on a persistent grid. Its siblings each cover one end:
`splitk_small_m` the decode batches, `grouped_tiles` the prefill GEMMs. The table only helps on
a GPU where it was measured; elsewhere the heuristic M buckets decide.
"""
import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

_v0_AKA_PARAMS = {"TMA": 1, "PERSISTENT": 1, "FIXUP": 1}

_v0__SMEM_BUDGET = 200 * 1024  # operand + epilogue buffers per block (H100/H200: 227 KB)
# A GEMV program unrolls its reduction once per row: at 8 and 16 rows the sm_90 compile took 72 and
# 67-194 s here (2 loaded cores) against 15 s at one row, so M 5-16 takes BM 16 tiles (MMA rows
# are free when the weight stream is the limit).
_v0__GEMV_MAX_M = 4
# Per-shape counts Triton would otherwise specialise on (== 1, % 16): one compile serves every
# shape of a config, which is what lets the tuner try ~50 configs in its 120 s budget.
_v0__RUNTIME_INTS = ["M", "k_tiles_per_split", "n_work", "n_prog", "split"]

# --- dispatch table: scripts/bake_dispatch.py rewrites from here to the end marker ---
_v0__TABLE_SOURCE = 'tune.json: NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, triton 3.6.0, sha 03889ace3d5f, 2026-12-05T18:00:05+00:00, CUDA graph replay over rotating input sets (>= 3 x 60 MiB), median of replays / sets'
_v0__TABLE = [
    (1, 6144, 4096, {'BK': 128, 'BM': 16, 'BN': 32, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 0, 'TMA': 1, 'WS': 0, 'num_stages': 6, 'num_warps': 4, 'path': 'tile'}),  # 23.4 us
    (8, 5120, 4096, {'BK': 128, 'BM': 16, 'BN': 64, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 3, 'TMA': 1, 'WS': 0, 'num_stages': 4, 'num_warps': 4, 'path': 'tile'}),  # 20.8 us
    (16, 7168, 8192, {'BK': 128, 'BM': 16, 'BN': 64, 'GROUP': 8, 'PERSIST': 0, 'SPLIT_K': 0, 'TMA': 0, 'WS': 0, 'num_stages': 4, 'num_warps': 4, 'path': 'tile'}),  # 48.5 us
    (32, 28672, 4096, {'BK': 256, 'BM': 32, 'BN': 64, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 0, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 4, 'path': 'tile'}),  # 87.0 us
    (64, 128256, 4096, {'BK': 64, 'BM': 64, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 0, 'TMA': 1, 'WS': 0, 'num_stages': 5, 'num_warps': 4, 'path': 'tile'}),  # 364.7 us
    (96, 8192, 7392, {'BK': 64, 'BM': 128, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 2, 'TMA': 1, 'WS': 0, 'num_stages': 5, 'num_warps': 8, 'path': 'tile'}),  # 57.2 us
    (128, 4096, 14336, {'BK': 128, 'BM': 64, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 2, 'TMA': 1, 'WS': 0, 'num_stages': 4, 'num_warps': 4, 'path': 'tile'}),  # 53.1 us
    (256, 2560, 8192, {'BK': 64, 'BM': 128, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 2, 'TMA': 1, 'WS': 0, 'num_stages': 5, 'num_warps': 8, 'path': 'tile'}),  # 34.6 us
    (512, 4096, 4096, {'BK': 64, 'BM': 128, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 4, 'num_warps': 8, 'path': 'tile'}),  # 30.4 us
    (1024, 37888, 3584, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 1, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 360.4 us
    (2048, 8192, 7392, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 326.8 us
    (4096, 25600, 5120, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 1379.7 us
    (4096, 28672, 4096, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 1255.0 us
    (8192, 6144, 4096, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 540.8 us
    (8192, 8192, 2048, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 383.0 us
    (16384, 8192, 3584, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 1271.1 us
]
# --- end of dispatch table ---


@triton.jit
def _v0__tile_coords(t, n_pm, n_pn, GROUP: tl.constexpr):
    per_group = GROUP * n_pn
    first_pm = (t // per_group) * GROUP
    rows_here = tl.minimum(n_pm - first_pm, GROUP)
    pm = first_pm + (t % per_group) % rows_here
    pn = (t % per_group) // rows_here
    return pm, pn


@triton.jit
def _v0__fixup(acc, ws_ptr, c_ptr, cnt_ptr, tile, sid, split, rm, rn, M, N, s_cm, FIXUP: tl.constexpr):
    """A split's fp32 partial into the workspace; with FIXUP, the last split of the tile to arrive
    (a ticket on the tile's counter) sums all of them in split order, stores bf16 and resets the
    counter: the same fixed-order sum as _splitk_reduce, without its launch or its DRAM re-read."""
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(ws_ptr + (sid * M + rm).to(tl.int64)[:, None] * N + rn[None, :], acc, mask=cmask)
    if FIXUP:
        tl.debug_barrier()                                    # every thread's partial before the ticket
        ticket = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if ticket == split - 1:
            out = tl.zeros_like(acc)
            for s in range(0, split):
                out += tl.load(ws_ptr + (s * M + rm).to(tl.int64)[:, None] * N + rn[None, :], mask=cmask,
                               other=0.0, cache_modifier=".cg")
            tl.store(c_ptr + rm.to(tl.int64)[:, None] * s_cm + rn[None, :], out.to(c_ptr.dtype.element_ty),
                     mask=cmask)
            tl.atomic_xchg(cnt_ptr + tile, 0)


@triton.jit(do_not_specialize=_v0__RUNTIME_INTS)
def _v0__mm_ptr(a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K, s_am, s_bn, s_cm, k_tiles_per_split, n_work, n_prog,
            split, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
            PARTIAL: tl.constexpr, EVEN_K: tl.constexpr, FIXUP: tl.constexpr):
    n_pm = tl.cdiv(M, BM)
    n_pn = tl.cdiv(N, BN)
    n_tiles = n_pm * n_pn
    k_tiles = tl.cdiv(K, BK)
    rk = tl.arange(0, BK)
    for w in tl.range(tl.program_id(0), n_work, n_prog, flatten=True):
        tile = w % n_tiles
        sid = w // n_tiles
        pm, pn = _v0__tile_coords(tile, n_pm, n_pn, GROUP)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        a_row = a_ptr + (rm % M).to(tl.int64)[:, None] * s_am
        b_row = b_ptr + (rn % N).to(tl.int64)[None, :] * s_bn        # w^T tile [BK, BN]
        kt0 = sid * k_tiles_per_split
        kt1 = tl.minimum(kt0 + k_tiles_per_split, k_tiles)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in range(kt0, kt1):
            kk = kt * BK + rk
            if EVEN_K:
                a = tl.load(a_row + kk[None, :])
                b = tl.load(b_row + kk[:, None])
            else:
                a = tl.load(a_row + kk[None, :], mask=kk[None, :] < K, other=0.0)
                b = tl.load(b_row + kk[:, None], mask=kk[:, None] < K, other=0.0)
            acc = tl.dot(a, b, acc)
        if not PARTIAL:
            cmask = (rm[:, None] < M) & (rn[None, :] < N)
            tl.store(c_ptr + rm.to(tl.int64)[:, None] * s_cm + rn[None, :],
                     acc.to(c_ptr.dtype.element_ty), mask=cmask)
        else:
            _v0__fixup(acc, ws_ptr, c_ptr, cnt_ptr, tile, sid, split, rm, rn, M, N, s_cm, FIXUP)


@triton.jit(do_not_specialize=_v0__RUNTIME_INTS)
def _v0__mm_tma(a_desc, b_desc, c_desc, c_ptr, ws_ptr, cnt_ptr, M, N, K, s_cm, k_tiles_per_split, n_work, n_prog,
            split, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
            PARTIAL: tl.constexpr, WS: tl.constexpr, SUBTILE: tl.constexpr, FIXUP: tl.constexpr):
    n_pm = tl.cdiv(M, BM)
    n_pn = tl.cdiv(N, BN)
    n_tiles = n_pm * n_pn
    k_tiles = tl.cdiv(K, BK)
    for w in tl.range(tl.program_id(0), n_work, n_prog, flatten=True):
        tile = w % n_tiles
        sid = w // n_tiles
        pm, pn = _v0__tile_coords(tile, n_pm, n_pn, GROUP)
        kt0 = sid * k_tiles_per_split
        kt1 = tl.minimum(kt0 + k_tiles_per_split, k_tiles)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in tl.range(kt0, kt1, warp_specialize=WS):
            a = a_desc.load([pm * BM, kt * BK])
            b = b_desc.load([pn * BN, kt * BK])
            acc = tl.dot(a, b.T, acc)
        if not PARTIAL:
            if SUBTILE:  # two [BM, BN/2] stores: half the epilogue's shared memory, one more stage
                c0, c1 = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
                c_desc.store([pm * BM, pn * BN], c0.to(c_desc.dtype))
                c_desc.store([pm * BM, pn * BN + BN // 2], c1.to(c_desc.dtype))
            else:
                c_desc.store([pm * BM, pn * BN], acc.to(c_desc.dtype))
        else:
            rm = pm * BM + tl.arange(0, BM)
            rn = pn * BN + tl.arange(0, BN)
            _v0__fixup(acc, ws_ptr, c_ptr, cnt_ptr, tile, sid, split, rm, rn, M, N, s_cm, FIXUP)


@triton.jit(do_not_specialize=["M", "k_per_split"])
def _v0__gemv(a_ptr, b_ptr, c_ptr, ws_ptr, M, N, K, s_am, s_bn, s_cm, k_per_split,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PARTIAL: tl.constexpr, EVEN_K: tl.constexpr):
    pn = tl.program_id(0)
    sid = tl.program_id(1)
    rows = tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    b_row = b_ptr + (rn % N).to(tl.int64)[:, None] * s_bn
    k_begin = sid * k_per_split
    k_end = tl.minimum(k_begin + k_per_split, K)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(k_begin, k_end, BK):
        kk = k0 + rk
        if EVEN_K:
            wt = tl.load(b_row + kk[None, :]).to(tl.float32)
        else:
            wt = tl.load(b_row + kk[None, :], mask=kk[None, :] < K, other=0.0).to(tl.float32)
        for m in tl.static_range(BM):
            xm = tl.load(a_ptr + m * s_am + kk, mask=(kk < K) & (m < M), other=0.0).to(tl.float32)
            part = tl.sum(wt * xm[None, :], axis=1)
            acc = tl.where(rows[:, None] == m, acc + part[None, :], acc)
    cmask = (rows[:, None] < M) & (rn[None, :] < N)
    if not PARTIAL:
        tl.store(c_ptr + rows[:, None] * s_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=cmask)
    else:
        tl.store(ws_ptr + (sid * M + rows).to(tl.int64)[:, None] * N + rn[None, :], acc, mask=cmask)


@triton.jit(do_not_specialize=["MN", "split"])
def _v0__splitk_reduce(ws_ptr, c_ptr, MN, N, s_cm, split, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in range(1, split):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + (offs // N) * s_cm + offs % N, acc.to(c_ptr.dtype.element_ty), mask=mask)


@functools.lru_cache(maxsize=None)
def _v0__num_sms(device_index):
    if device_index is None:
        return 4  # the CPU interpreter: any small grid exercises the persistent loop
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _v0__heuristic(M, N, K):
    """Defaults before any measurement: the decode and prefill families' usual choices."""
    if M <= _v0__GEMV_MAX_M:
        return {"path": "gemv", "BN": 32, "BK": 256, "SPLIT_K": 0, "num_warps": 4, "num_stages": 1}
    if M <= 64:
        return {"path": "tile", "BM": 16 if M <= 16 else (32 if M <= 32 else 64), "BN": 64, "BK": 128,
                "GROUP": 8, "SPLIT_K": 0, "num_warps": 4, "num_stages": 4, "TMA": 0, "PERSIST": 0, "WS": 0}
    if M <= 256:
        return {"path": "tile", "BM": 64, "BN": 128, "BK": 64, "GROUP": 8, "SPLIT_K": 0, "num_warps": 4,
                "num_stages": 4, "TMA": 1, "PERSIST": 0, "WS": 0}
    return {"path": "tile", "BM": 128, "BN": 256, "BK": 64, "GROUP": 8, "SPLIT_K": 1, "num_warps": 8,
            "num_stages": 3, "TMA": 1, "PERSIST": 1, "WS": 0}


def _v0__log2(v):
    return max(v, 1).bit_length()


def _v0_pick_config(M, N, K):
    """The table row nearest to (M, N, K), or the heuristic when the table is empty."""
    if not _v0__TABLE:
        return _v0__heuristic(M, N, K)
    best = min(_v0__TABLE, key=lambda r: 4 * abs(_v0__log2(M) - _v0__log2(r[0])) + abs(_v0__log2(N) - _v0__log2(r[1]))
               + abs(_v0__log2(K) - _v0__log2(r[2])))
    return best[3]


def _v0__split_count(split, k_tiles, programs, n_sm):
    """SPLIT_K 0 = enough splits for about two programs per SM; clamped so no split is empty."""
    if split == 0:
        split = max(1, min(16, -(-2 * n_sm // max(programs, 1))))
    split = max(1, min(split, k_tiles))
    per = -(-k_tiles // split)
    return -(-k_tiles // per), per


def _v0__tma_ok(*tensors):
    return all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0 for t in tensors)


def _v0__stages(bm, bn, bk, wanted, epilogue_bytes):
    per_stage = (bm + bn) * bk * 2
    return max(1, min(wanted, (_v0__SMEM_BUDGET - epilogue_bytes) // per_stage))


_v0__COUNTERS = {}  # device -> int32 tickets per output tile for the split-K fixup; zero between calls


def _v0__counters(n, device):
    """The module's ticket buffer (zeroed once; every fixup leaves its tile's counter at zero)."""
    buf = _v0__COUNTERS.get(device)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
        _v0__COUNTERS[device] = buf
    return buf


def _v0__reduce(ws, y, split):
    M, N = y.shape
    block = 1024
    _v0__splitk_reduce[(triton.cdiv(M * N, block),)](ws, y, M * N, N, y.stride(0), split, BLOCK=block,
                                                 num_warps=4)


def _v0_gemm(x, w, cfg, allow_tma=True, allow_persistent=True, fixup=None):
    """y = x @ w.T with one configuration (the tuner calls this directly). fixup: the split-K sum in
    the GEMM's last split per tile (default: cfg's FIXUP, else AKA_PARAMS') or a second launch."""
    if fixup is None:
        fixup = bool(cfg.get("FIXUP", _v0_AKA_PARAMS.get("FIXUP", 1)))
    if x.stride(-1) != 1:
        x = x.contiguous()
    if w.stride(-1) != 1:
        w = w.contiguous()
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    n_sm = _v0__num_sms(x.device.index if x.is_cuda else None)
    if cfg["path"] == "gemv" and M <= _v0__GEMV_MAX_M:
        bn, bk = cfg["BN"], cfg["BK"]
        bm = max(1, triton.next_power_of_2(M))
        split, per = _v0__split_count(cfg["SPLIT_K"], triton.cdiv(K, bk), triton.cdiv(N, bn), n_sm)
        ws = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
        _v0__gemv[(triton.cdiv(N, bn), split)](x, w, y, ws, M, N, K, x.stride(0), w.stride(0), y.stride(0),
                                          per * bk, BM=bm, BN=bn, BK=bk, PARTIAL=split > 1, EVEN_K=(K % bk == 0),
                                          num_warps=cfg["num_warps"], num_stages=cfg.get("num_stages", 1))
        if split > 1:
            _v0__reduce(ws, y, split)
        return y
    if cfg["path"] == "gemv":  # a GEMV row picked for a larger M: same weight-streaming shape, tiles
        cfg = dict(_v0__heuristic(M, N, K), SPLIT_K=cfg["SPLIT_K"])
    bm, bn, bk = cfg["BM"], cfg["BN"], cfg["BK"]
    k_tiles = triton.cdiv(K, bk)
    n_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    split, per = _v0__split_count(cfg["SPLIT_K"], k_tiles, n_tiles, n_sm)
    n_work = n_tiles * split
    n_prog = min(n_work, n_sm * cfg.get("OCC", 1)) if (cfg.get("PERSIST") and allow_persistent) else n_work
    ws = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
    fix = fixup and split > 1
    cnt = _v0__counters(n_tiles, x.device) if fix else ws
    use_tma = bool(cfg.get("TMA")) and allow_tma and _v0__tma_ok(x, w, y)
    if use_tma:
        subtile = bn >= 128
        epi = (bm * bn * 2 // (2 if subtile else 1)) if split == 1 else 0
        _v0__mm_tma[(n_prog,)](TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
                           TensorDescriptor.from_tensor(y, [bm, bn // 2 if subtile else bn]), y, ws, cnt, M, N, K,
                           y.stride(0), per, n_work, n_prog, split, BM=bm, BN=bn, BK=bk, GROUP=cfg["GROUP"],
                           PARTIAL=split > 1, WS=bool(cfg.get("WS")), SUBTILE=subtile, FIXUP=fix,
                           num_warps=cfg["num_warps"], num_stages=_v0__stages(bm, bn, bk, cfg["num_stages"], epi))
    else:
        _v0__mm_ptr[(n_prog,)](x, w, y, ws, cnt, M, N, K, x.stride(0), w.stride(0), y.stride(0), per, n_work, n_prog,
                           split, BM=bm, BN=bn, BK=bk, GROUP=cfg["GROUP"], PARTIAL=split > 1, EVEN_K=(K % bk == 0),
                           FIXUP=fix, num_warps=cfg["num_warps"], num_stages=_v0__stages(bm, bn, bk, cfg["num_stages"], 0))
    if split > 1 and not fix:
        _v0__reduce(ws, y, split)
    return y


class _v0_ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        M, K = x.shape
        cfg = _v0_pick_config(M, w.shape[0], K)
        return _v0_gemm(x, w, cfg, allow_tma=bool(_v0_AKA_PARAMS["TMA"]), allow_persistent=bool(_v0_AKA_PARAMS["PERSISTENT"]),
                    fixup=bool(_v0_AKA_PARAMS["FIXUP"]))


# ---- variant _v1_: c0001 ----------------------------------------

"""
---
id: kernels/gemm_bf16/dispatch
op: gemm_bf16
category: MatrixMultiply
dtypes: [bfloat16]
techniques: [per-shape-dispatch, config-table, tensor-descriptors, tma, persistent-kernel, grouped-ordering, split-k, two-stage-reduction, deterministic-reduction, decode-gemv, software-pipelining, warp-specialization, fp32-accumulation, int64-offsets]
params:
  TMA: [0, 1]
  PERSISTENT: [0, 1]
  FIXUP: [0, 1]
tuner: gemm
summary: One candidate for every M. forward() picks a configuration per shape from a table measured on the GPU (nearest measured shape in log space, M weighted most) and runs one of three paths, a GEMV for M <= 4, a pointer-load tile kernel or a TMA tile kernel, each optionally persistent with grouped tile order and split-K (fp32 partials, deterministic second-pass reduction).
---
y = x @ w.T, x [M, K] and w [N, K] bf16 (both K-contiguous), fp32 accumulation, one bf16 rounding.
No single tile shape serves M = 1 and M = 16384: decode M is a weight stream (about M FLOP/byte
against an H200 ridge near 206) that needs every SM reading w, prefill M is tensor-core bound and
needs 128x256 tiles, deep pipelines and L2 reuse. Libraries choose per shape (cuBLAS heuristics,
vLLM's JSON config tables per (N, K) and M bucket); this kernel does the same from `_TABLE`.

Dispatch:
- `_TABLE` rows are (M, N, K, config), written by `scripts/bake_dispatch.py` from the JSON of
  `scripts/gpu_tune_gemm.py` (the best measured configuration per bench shape). A shape takes the
  config of the nearest row by 4*|log2 M - log2 M'| + |log2 N - log2 N'| + |log2 K - log2 K'|, so a
  bench shape gets exactly what was measured for it and any other shape the closest measurement.
  With an empty table `_heuristic` decides (M buckets 1-4, 5-64, 65-256, larger).
- Every config is correct for every shape: the GEMV path is taken only for M <= 4 (else the
  tile path with the same split), TMA only where the descriptors' 16-byte alignment holds (else
  pointer loads with the same tiles). AKA_PARAMS switches paths off globally: TMA 0 never builds
  a descriptor, PERSISTENT 0 launches one program per work item.

Paths:
- gemv (M <= 4): program = BN output columns x one K split, all M rows (BM = next power of two of
  M, rows past M masked). Each step loads a [BN, BK] weight slice once and reduces it against every
  row in fp32 (`tl.sum`): no MMA padding of M to 16/64 and wide vector loads of w.
- tile, pointer loads: grouped tile order (GROUP tile rows per column panel share L2); rows and
  columns past M/N wrap (`% M`, `% N`) so loads carry no M/N mask; the K tail is masked only when
  K % BK != 0 (K 7392 at BK 128).
- tile, TMA: host `TensorDescriptor`s for x, w and y (triton/tensor-descriptors-tma); loads are
  bulk async copies that zero-fill past the edges, so no masks at all; the bf16 tile is stored by
  TMA too, in two [BM, BN/2] halves when BN >= 128 (the epilogue buffer then costs half, which
  buys 128x256x64 a third stage: 180 KB shared, 154 registers in the offline sm_90a compile).
  `WS` 1 asks for warp specialisation of the K loop (sm_90 compiles it only with descriptor
  loads, and not at 128x128x64 with 4 warps: triton/warp-specialization).
- persistent (either tile path): grid = min(work, SMs x OCC) programs walk the work list
  (tiles x splits) with a stride of the grid size (`tl.range(..., flatten=True)` lets the
  pipeliner overlap one tile's epilogue with the next tile's loads); otherwise one work item per
  program. Removes the tail wave when tiles are not a multiple of 132.
- split-K: split s owns a contiguous BK-aligned run of K tiles, writes fp32 partials
  [SPLIT, M, N], and the splits are summed in fixed order (bit-reproducible, unlike atomics) and
  rounded once to bf16. FIXUP 1 (the default) sums them inside the GEMM: after its partial each
  program takes a ticket on its tile's counter (barrier, then an acq_rel atomic) and the one that
  draws SPLIT - 1 reads the partials back through the L2 (.cg) in split order, stores bf16 and
  resets the counter (a module buffer that stays zero between calls). FIXUP 0 sums them in a
  second launch, `_splitk_reduce`, whose fp32 loads compile to scalar `ld.global.b32` (16 per
  program, offline sm_90a) and which costs a launch against the 17-45 us of the split shapes
  (M 1-256 in the table). Both give the same bits (tests/test_gemm_dispatch.py). Offline, the
  fixup leaves shared memory unchanged and takes the 128 x 128 tiles from 90 to 130 registers
  (their 196 KB of shared memory already hold one program per SM). Partial traffic
  SPLIT * M * N * 8 bytes, a few % of the weight at M <= 64. On the H200 the two were within noise
  on the split shapes except M 256, where the second launch was faster (28.2 vs 30.0 us;
  results/h200/verify-2026-12-05).
- num_stages is clamped on the host so operand buffers ((BM + BN) * BK * 2 bytes per stage) plus
  the TMA store's buffer (BM * BN bytes in halves, else BM * BN * 2) stay under about 200 KB of
  the 227 KB of shared memory per block.
- int64 row offsets: M * K reaches 16384 * 3584, 32k-token prefills go past 2**31.
- Mid M is not a padding problem: at M 96, N 8192, K 7392 on the H200 the BM 32 configs that cover M
  exactly ran 63-102 us, BM 128 with split-K 2 (M padded to 128) 44.4 us, cuBLAS 35.6 us
  (results/h200/optimize-2026-12-05, the re-tune's tune.json).

When to use it: the one bf16 linear-layer kernel to ship when the same projection sees every
token count, from single-token decode to long prefill chunks. A decode batch of a few tokens is
a weight read, so K is cut into slices and all SMs share the weight stream (the GEMV path for up
to four rows); large batches get big TMA-fed tiles in grouped order on a persistent grid. Its siblings each cover one end:
`splitk_small_m` the decode batches, `grouped_tiles` the prefill GEMMs. The table only helps on
a GPU where it was measured; elsewhere the heuristic M buckets decide.
"""
import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

_v1_AKA_PARAMS = {'TMA': 1, 'PERSISTENT': 1, 'FIXUP': 1}  # set by the offline proposer

_v1__SMEM_BUDGET = 200 * 1024  # operand + epilogue buffers per block (H100/H200: 227 KB)
# A GEMV program unrolls its reduction once per row: at 8 and 16 rows the sm_90 compile took 72 and
# 67-194 s here (2 loaded cores) against 15 s at one row, so M 5-16 takes BM 16 tiles (MMA rows
# are free when the weight stream is the limit).
_v1__GEMV_MAX_M = 4
# Per-shape counts Triton would otherwise specialise on (== 1, % 16): one compile serves every
# shape of a config, which is what lets the tuner try ~50 configs in its 120 s budget.
_v1__RUNTIME_INTS = ["M", "k_tiles_per_split", "n_work", "n_prog", "split"]

# --- dispatch table: scripts/bake_dispatch.py rewrites from here to the end marker ---
_v1__TABLE_SOURCE = 'tune.json: NVIDIA H200, torch 2.11.0+cu130, triton 3.6.0, sha 1cf0c651b560, 2026-12-03T18:53:10+00:00, CUDA graph replay over rotating input sets (>= 3 x 60 MiB), median of replays / sets'
_v1__TABLE = [
    (1, 6144, 4096, {'BK': 128, 'BM': 16, 'BN': 64, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 2, 'TMA': 1, 'WS': 0, 'num_stages': 4, 'num_warps': 4, 'path': 'tile'}),  # 18.5 us
    (8, 5120, 4096, {'BK': 128, 'BM': 16, 'BN': 64, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 3, 'TMA': 1, 'WS': 0, 'num_stages': 4, 'num_warps': 4, 'path': 'tile'}),  # 16.7 us
    (16, 7168, 8192, {'BK': 128, 'BM': 16, 'BN': 64, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 2, 'TMA': 1, 'WS': 0, 'num_stages': 4, 'num_warps': 4, 'path': 'tile'}),  # 35.5 us
    (32, 28672, 4096, {'BK': 256, 'BM': 32, 'BN': 64, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 0, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 4, 'path': 'tile'}),  # 61.4 us
    (64, 128256, 4096, {'BK': 128, 'BM': 64, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 0, 'TMA': 1, 'WS': 0, 'num_stages': 4, 'num_warps': 4, 'path': 'tile'}),  # 258.6 us
    (96, 8192, 7392, {'BK': 64, 'BM': 128, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 2, 'TMA': 1, 'WS': 0, 'num_stages': 5, 'num_warps': 8, 'path': 'tile'}),  # 45.2 us
    (128, 4096, 14336, {'BK': 128, 'BM': 64, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 2, 'TMA': 1, 'WS': 0, 'num_stages': 4, 'num_warps': 4, 'path': 'tile'}),  # 41.2 us
    (256, 2560, 8192, {'BK': 128, 'BM': 128, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 0, 'SPLIT_K': 3, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 28.7 us
    (512, 4096, 4096, {'BK': 64, 'BM': 128, 'BN': 128, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 4, 'num_warps': 8, 'path': 'tile'}),  # 30.6 us
    (1024, 37888, 3584, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 357.7 us
    (2048, 8192, 7392, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 320.3 us
    (4096, 25600, 5120, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 1361.1 us
    (4096, 28672, 4096, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 1238.9 us
    (8192, 6144, 4096, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 1, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 532.5 us
    (8192, 8192, 2048, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 1, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 380.7 us
    (16384, 8192, 3584, {'BK': 64, 'BM': 128, 'BN': 256, 'GROUP': 8, 'OCC': 1, 'PERSIST': 1, 'SPLIT_K': 1, 'TMA': 1, 'WS': 0, 'num_stages': 3, 'num_warps': 8, 'path': 'tile'}),  # 1238.6 us
]
# --- end of dispatch table ---


@triton.jit
def _v1__tile_coords(t, n_pm, n_pn, GROUP: tl.constexpr):
    per_group = GROUP * n_pn
    first_pm = (t // per_group) * GROUP
    rows_here = tl.minimum(n_pm - first_pm, GROUP)
    pm = first_pm + (t % per_group) % rows_here
    pn = (t % per_group) // rows_here
    return pm, pn


@triton.jit
def _v1__fixup(acc, ws_ptr, c_ptr, cnt_ptr, tile, sid, split, rm, rn, M, N, s_cm, FIXUP: tl.constexpr):
    """A split's fp32 partial into the workspace; with FIXUP, the last split of the tile to arrive
    (a ticket on the tile's counter) sums all of them in split order, stores bf16 and resets the
    counter: the same fixed-order sum as _splitk_reduce, without its launch or its DRAM re-read."""
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(ws_ptr + (sid * M + rm).to(tl.int64)[:, None] * N + rn[None, :], acc, mask=cmask)
    if FIXUP:
        tl.debug_barrier()                                    # every thread's partial before the ticket
        ticket = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if ticket == split - 1:
            out = tl.zeros_like(acc)
            for s in range(0, split):
                out += tl.load(ws_ptr + (s * M + rm).to(tl.int64)[:, None] * N + rn[None, :], mask=cmask,
                               other=0.0, cache_modifier=".cg")
            tl.store(c_ptr + rm.to(tl.int64)[:, None] * s_cm + rn[None, :], out.to(c_ptr.dtype.element_ty),
                     mask=cmask)
            tl.atomic_xchg(cnt_ptr + tile, 0)


@triton.jit(do_not_specialize=_v1__RUNTIME_INTS)
def _v1__mm_ptr(a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K, s_am, s_bn, s_cm, k_tiles_per_split, n_work, n_prog,
            split, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
            PARTIAL: tl.constexpr, EVEN_K: tl.constexpr, FIXUP: tl.constexpr):
    n_pm = tl.cdiv(M, BM)
    n_pn = tl.cdiv(N, BN)
    n_tiles = n_pm * n_pn
    k_tiles = tl.cdiv(K, BK)
    rk = tl.arange(0, BK)
    for w in tl.range(tl.program_id(0), n_work, n_prog, flatten=True):
        tile = w % n_tiles
        sid = w // n_tiles
        pm, pn = _v1__tile_coords(tile, n_pm, n_pn, GROUP)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        a_row = a_ptr + (rm % M).to(tl.int64)[:, None] * s_am
        b_row = b_ptr + (rn % N).to(tl.int64)[None, :] * s_bn        # w^T tile [BK, BN]
        kt0 = sid * k_tiles_per_split
        kt1 = tl.minimum(kt0 + k_tiles_per_split, k_tiles)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in range(kt0, kt1):
            kk = kt * BK + rk
            if EVEN_K:
                a = tl.load(a_row + kk[None, :])
                b = tl.load(b_row + kk[:, None])
            else:
                a = tl.load(a_row + kk[None, :], mask=kk[None, :] < K, other=0.0)
                b = tl.load(b_row + kk[:, None], mask=kk[:, None] < K, other=0.0)
            acc = tl.dot(a, b, acc)
        if not PARTIAL:
            cmask = (rm[:, None] < M) & (rn[None, :] < N)
            tl.store(c_ptr + rm.to(tl.int64)[:, None] * s_cm + rn[None, :],
                     acc.to(c_ptr.dtype.element_ty), mask=cmask)
        else:
            _v1__fixup(acc, ws_ptr, c_ptr, cnt_ptr, tile, sid, split, rm, rn, M, N, s_cm, FIXUP)


@triton.jit(do_not_specialize=_v1__RUNTIME_INTS)
def _v1__mm_tma(a_desc, b_desc, c_desc, c_ptr, ws_ptr, cnt_ptr, M, N, K, s_cm, k_tiles_per_split, n_work, n_prog,
            split, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
            PARTIAL: tl.constexpr, WS: tl.constexpr, SUBTILE: tl.constexpr, FIXUP: tl.constexpr):
    n_pm = tl.cdiv(M, BM)
    n_pn = tl.cdiv(N, BN)
    n_tiles = n_pm * n_pn
    k_tiles = tl.cdiv(K, BK)
    for w in tl.range(tl.program_id(0), n_work, n_prog, flatten=True):
        tile = w % n_tiles
        sid = w // n_tiles
        pm, pn = _v1__tile_coords(tile, n_pm, n_pn, GROUP)
        kt0 = sid * k_tiles_per_split
        kt1 = tl.minimum(kt0 + k_tiles_per_split, k_tiles)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in tl.range(kt0, kt1, warp_specialize=WS):
            a = a_desc.load([pm * BM, kt * BK])
            b = b_desc.load([pn * BN, kt * BK])
            acc = tl.dot(a, b.T, acc)
        if not PARTIAL:
            if SUBTILE:  # two [BM, BN/2] stores: half the epilogue's shared memory, one more stage
                c0, c1 = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
                c_desc.store([pm * BM, pn * BN], c0.to(c_desc.dtype))
                c_desc.store([pm * BM, pn * BN + BN // 2], c1.to(c_desc.dtype))
            else:
                c_desc.store([pm * BM, pn * BN], acc.to(c_desc.dtype))
        else:
            rm = pm * BM + tl.arange(0, BM)
            rn = pn * BN + tl.arange(0, BN)
            _v1__fixup(acc, ws_ptr, c_ptr, cnt_ptr, tile, sid, split, rm, rn, M, N, s_cm, FIXUP)


@triton.jit(do_not_specialize=["M", "k_per_split"])
def _v1__gemv(a_ptr, b_ptr, c_ptr, ws_ptr, M, N, K, s_am, s_bn, s_cm, k_per_split,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PARTIAL: tl.constexpr, EVEN_K: tl.constexpr):
    pn = tl.program_id(0)
    sid = tl.program_id(1)
    rows = tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    b_row = b_ptr + (rn % N).to(tl.int64)[:, None] * s_bn
    k_begin = sid * k_per_split
    k_end = tl.minimum(k_begin + k_per_split, K)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(k_begin, k_end, BK):
        kk = k0 + rk
        if EVEN_K:
            wt = tl.load(b_row + kk[None, :]).to(tl.float32)
        else:
            wt = tl.load(b_row + kk[None, :], mask=kk[None, :] < K, other=0.0).to(tl.float32)
        for m in tl.static_range(BM):
            xm = tl.load(a_ptr + m * s_am + kk, mask=(kk < K) & (m < M), other=0.0).to(tl.float32)
            part = tl.sum(wt * xm[None, :], axis=1)
            acc = tl.where(rows[:, None] == m, acc + part[None, :], acc)
    cmask = (rows[:, None] < M) & (rn[None, :] < N)
    if not PARTIAL:
        tl.store(c_ptr + rows[:, None] * s_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=cmask)
    else:
        tl.store(ws_ptr + (sid * M + rows).to(tl.int64)[:, None] * N + rn[None, :], acc, mask=cmask)


@triton.jit(do_not_specialize=["MN", "split"])
def _v1__splitk_reduce(ws_ptr, c_ptr, MN, N, s_cm, split, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in range(1, split):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(c_ptr + (offs // N) * s_cm + offs % N, acc.to(c_ptr.dtype.element_ty), mask=mask)


@functools.lru_cache(maxsize=None)
def _v1__num_sms(device_index):
    if device_index is None:
        return 4  # the CPU interpreter: any small grid exercises the persistent loop
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _v1__heuristic(M, N, K):
    """Defaults before any measurement: the decode and prefill families' usual choices."""
    if M <= _v1__GEMV_MAX_M:
        return {"path": "gemv", "BN": 32, "BK": 256, "SPLIT_K": 0, "num_warps": 4, "num_stages": 1}
    if M <= 64:
        return {"path": "tile", "BM": 16 if M <= 16 else (32 if M <= 32 else 64), "BN": 64, "BK": 128,
                "GROUP": 8, "SPLIT_K": 0, "num_warps": 4, "num_stages": 4, "TMA": 0, "PERSIST": 0, "WS": 0}
    if M <= 256:
        return {"path": "tile", "BM": 64, "BN": 128, "BK": 64, "GROUP": 8, "SPLIT_K": 0, "num_warps": 4,
                "num_stages": 4, "TMA": 1, "PERSIST": 0, "WS": 0}
    return {"path": "tile", "BM": 128, "BN": 256, "BK": 64, "GROUP": 8, "SPLIT_K": 1, "num_warps": 8,
            "num_stages": 3, "TMA": 1, "PERSIST": 1, "WS": 0}


def _v1__log2(v):
    return max(v, 1).bit_length()


def _v1_pick_config(M, N, K):
    """The table row nearest to (M, N, K), or the heuristic when the table is empty."""
    if not _v1__TABLE:
        return _v1__heuristic(M, N, K)
    best = min(_v1__TABLE, key=lambda r: 4 * abs(_v1__log2(M) - _v1__log2(r[0])) + abs(_v1__log2(N) - _v1__log2(r[1]))
               + abs(_v1__log2(K) - _v1__log2(r[2])))
    return best[3]


def _v1__split_count(split, k_tiles, programs, n_sm):
    """SPLIT_K 0 = enough splits for about two programs per SM; clamped so no split is empty."""
    if split == 0:
        split = max(1, min(16, -(-2 * n_sm // max(programs, 1))))
    split = max(1, min(split, k_tiles))
    per = -(-k_tiles // split)
    return -(-k_tiles // per), per


def _v1__tma_ok(*tensors):
    return all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0 for t in tensors)


def _v1__stages(bm, bn, bk, wanted, epilogue_bytes):
    per_stage = (bm + bn) * bk * 2
    return max(1, min(wanted, (_v1__SMEM_BUDGET - epilogue_bytes) // per_stage))


_v1__COUNTERS = {}  # device -> int32 tickets per output tile for the split-K fixup; zero between calls


def _v1__counters(n, device):
    """The module's ticket buffer (zeroed once; every fixup leaves its tile's counter at zero)."""
    buf = _v1__COUNTERS.get(device)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
        _v1__COUNTERS[device] = buf
    return buf


def _v1__reduce(ws, y, split):
    M, N = y.shape
    block = 1024
    _v1__splitk_reduce[(triton.cdiv(M * N, block),)](ws, y, M * N, N, y.stride(0), split, BLOCK=block,
                                                 num_warps=4)


def _v1_gemm(x, w, cfg, allow_tma=True, allow_persistent=True, fixup=None):
    """y = x @ w.T with one configuration (the tuner calls this directly). fixup: the split-K sum in
    the GEMM's last split per tile (default: cfg's FIXUP, else AKA_PARAMS') or a second launch."""
    if fixup is None:
        fixup = bool(cfg.get("FIXUP", _v1_AKA_PARAMS.get("FIXUP", 1)))
    if x.stride(-1) != 1:
        x = x.contiguous()
    if w.stride(-1) != 1:
        w = w.contiguous()
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    n_sm = _v1__num_sms(x.device.index if x.is_cuda else None)
    if cfg["path"] == "gemv" and M <= _v1__GEMV_MAX_M:
        bn, bk = cfg["BN"], cfg["BK"]
        bm = max(1, triton.next_power_of_2(M))
        split, per = _v1__split_count(cfg["SPLIT_K"], triton.cdiv(K, bk), triton.cdiv(N, bn), n_sm)
        ws = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
        _v1__gemv[(triton.cdiv(N, bn), split)](x, w, y, ws, M, N, K, x.stride(0), w.stride(0), y.stride(0),
                                          per * bk, BM=bm, BN=bn, BK=bk, PARTIAL=split > 1, EVEN_K=(K % bk == 0),
                                          num_warps=cfg["num_warps"], num_stages=cfg.get("num_stages", 1))
        if split > 1:
            _v1__reduce(ws, y, split)
        return y
    if cfg["path"] == "gemv":  # a GEMV row picked for a larger M: same weight-streaming shape, tiles
        cfg = dict(_v1__heuristic(M, N, K), SPLIT_K=cfg["SPLIT_K"])
    bm, bn, bk = cfg["BM"], cfg["BN"], cfg["BK"]
    k_tiles = triton.cdiv(K, bk)
    n_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    split, per = _v1__split_count(cfg["SPLIT_K"], k_tiles, n_tiles, n_sm)
    n_work = n_tiles * split
    n_prog = min(n_work, n_sm * cfg.get("OCC", 1)) if (cfg.get("PERSIST") and allow_persistent) else n_work
    ws = torch.empty((split, M, N), dtype=torch.float32, device=x.device) if split > 1 else y
    fix = fixup and split > 1
    cnt = _v1__counters(n_tiles, x.device) if fix else ws
    use_tma = bool(cfg.get("TMA")) and allow_tma and _v1__tma_ok(x, w, y)
    if use_tma:
        subtile = bn >= 128
        epi = (bm * bn * 2 // (2 if subtile else 1)) if split == 1 else 0
        _v1__mm_tma[(n_prog,)](TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
                           TensorDescriptor.from_tensor(y, [bm, bn // 2 if subtile else bn]), y, ws, cnt, M, N, K,
                           y.stride(0), per, n_work, n_prog, split, BM=bm, BN=bn, BK=bk, GROUP=cfg["GROUP"],
                           PARTIAL=split > 1, WS=bool(cfg.get("WS")), SUBTILE=subtile, FIXUP=fix,
                           num_warps=cfg["num_warps"], num_stages=_v1__stages(bm, bn, bk, cfg["num_stages"], epi))
    else:
        _v1__mm_ptr[(n_prog,)](x, w, y, ws, cnt, M, N, K, x.stride(0), w.stride(0), y.stride(0), per, n_work, n_prog,
                           split, BM=bm, BN=bn, BK=bk, GROUP=cfg["GROUP"], PARTIAL=split > 1, EVEN_K=(K % bk == 0),
                           FIXUP=fix, num_warps=cfg["num_warps"], num_stages=_v1__stages(bm, bn, bk, cfg["num_stages"], 0))
    if split > 1 and not fix:
        _v1__reduce(ws, y, split)
    return y


class _v1_ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        M, K = x.shape
        cfg = _v1_pick_config(M, w.shape[0], K)
        return _v1_gemm(x, w, cfg, allow_tma=bool(_v1_AKA_PARAMS["TMA"]), allow_persistent=bool(_v1_AKA_PARAMS["PERSISTENT"]),
                    fixup=bool(_v1_AKA_PARAMS["FIXUP"]))


# ---- dispatch (aka/agent/dispatch_runtime.py) ------------------------------

"""The shape dispatch inside a generated dispatching candidate (aka/agent/dispatch.py).

This file's text is copied verbatim into every dispatching candidate, and the agent imports the
same functions to compute the table's keys from the task's inputs, so the key the table was built
with and the key the candidate computes at run time come from one definition. It therefore imports
only what a candidate may (aka/evaluate/static.py: torch, math) and reads nothing but shapes,
dtypes and scalar arguments: the dispatch is a pure function of them, never of tensor values.
"""
import math

import torch


def aka_feature(v):
    """One argument as a hashable literal: a tensor by its shape and dtype, a scalar by its value."""
    if isinstance(v, torch.Tensor):
        return ("t", tuple(int(d) for d in v.shape), str(v.dtype))
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, float):
        return ("f", v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("n",)
    if isinstance(v, (list, tuple)):
        return ("l", tuple(aka_feature(x) for x in v))
    return ("o",)


def aka_key(args, kwargs):
    """The forward call's key: positional arguments in order, keywords by name."""
    return (tuple(aka_feature(a) for a in args), tuple((k, aka_feature(kwargs[k])) for k in sorted(kwargs)))


def aka_sizes(feature, out):
    """(the feature with its sizes taken out, for structural equality); the sizes go into `out`."""
    tag = feature[0]
    if tag == "t":
        out.extend(feature[1])
        return ("t", len(feature[1]), feature[2])
    if tag == "i":
        out.append(feature[1])
        return ("i",)
    if tag == "l":
        return ("l", tuple(aka_sizes(x, out) for x in feature[1]))
    return feature


def aka_split(key):
    sizes = []
    args, kwargs = key
    structure = (tuple(aka_sizes(f, sizes) for f in args), tuple((k, aka_sizes(f, sizes)) for k, f in kwargs))
    return structure, sizes


def aka_distance(a, b):
    """Sizes compared on a log scale (M 8 is as far from 16 as 4096 from 8192); a sign change is far."""
    d = 0.0
    for x, y in zip(a, b):
        if (x < 0) != (y < 0):
            d += 1000.0
        d += abs(math.log2(1 + abs(x)) - math.log2(1 + abs(y)))
    return d


def aka_pick(key, table, default):
    """The variant for `key`: its own entry, else the entry of the nearest measured shape with the
    same structure (same arguments, ranks, dtypes and flags), else `default`."""
    if key in table:
        return table[key]
    structure, sizes = aka_split(key)
    best, best_d = default, None
    for k, index in table.items():
        s, z = aka_split(k)
        if s != structure or len(z) != len(sizes):
            continue
        d = aka_distance(sizes, z)
        if best_d is None or d < best_d:
            best, best_d = index, d
    return best


AKA_VARIANTS = (_v0_ModelNew, _v1_ModelNew,)
AKA_DEFAULT = 0
AKA_TABLE = {
    ((), (('w', ('t', (6144, 4096), 'torch.bfloat16')), ('x', ('t', (1, 4096), 'torch.bfloat16')))): 1,  # shape 0
    ((), (('w', ('t', (28672, 4096), 'torch.bfloat16')), ('x', ('t', (32, 4096), 'torch.bfloat16')))): 0,  # shape 1
    ((), (('w', ('t', (4096, 14336), 'torch.bfloat16')), ('x', ('t', (128, 14336), 'torch.bfloat16')))): 1,  # shape 2
    ((), (('w', ('t', (128256, 4096), 'torch.bfloat16')), ('x', ('t', (64, 4096), 'torch.bfloat16')))): 0,  # shape 3
    ((), (('w', ('t', (2560, 8192), 'torch.bfloat16')), ('x', ('t', (256, 8192), 'torch.bfloat16')))): 0,  # shape 4
    ((), (('w', ('t', (7168, 8192), 'torch.bfloat16')), ('x', ('t', (16, 8192), 'torch.bfloat16')))): 1,  # shape 5
    ((), (('w', ('t', (5120, 4096), 'torch.bfloat16')), ('x', ('t', (8, 4096), 'torch.bfloat16')))): 0,  # shape 6
    ((), (('w', ('t', (8192, 7392), 'torch.bfloat16')), ('x', ('t', (96, 7392), 'torch.bfloat16')))): 1,  # shape 7
    ((), (('w', ('t', (6144, 4096), 'torch.bfloat16')), ('x', ('t', (8192, 4096), 'torch.bfloat16')))): 0,  # shape 8
    ((), (('w', ('t', (28672, 4096), 'torch.bfloat16')), ('x', ('t', (4096, 4096), 'torch.bfloat16')))): 0,  # shape 9
    ((), (('w', ('t', (8192, 3584), 'torch.bfloat16')), ('x', ('t', (16384, 3584), 'torch.bfloat16')))): 0,  # shape 10
    ((), (('w', ('t', (8192, 2048), 'torch.bfloat16')), ('x', ('t', (8192, 2048), 'torch.bfloat16')))): 0,  # shape 11
    ((), (('w', ('t', (25600, 5120), 'torch.bfloat16')), ('x', ('t', (4096, 5120), 'torch.bfloat16')))): 0,  # shape 12
    ((), (('w', ('t', (8192, 7392), 'torch.bfloat16')), ('x', ('t', (2048, 7392), 'torch.bfloat16')))): 0,  # shape 13
    ((), (('w', ('t', (37888, 3584), 'torch.bfloat16')), ('x', ('t', (1024, 3584), 'torch.bfloat16')))): 1,  # shape 14
    ((), (('w', ('t', (4096, 4096), 'torch.bfloat16')), ('x', ('t', (512, 4096), 'torch.bfloat16')))): 0,  # shape 15
}


class ModelNew(torch.nn.Module):
    """Builds every variant from the same arguments and forwards each call to the table's pick."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.variants = torch.nn.ModuleList([cls(*args, **kwargs) for cls in AKA_VARIANTS])
        self.picks = {}

    def forward(self, *args, **kwargs):
        key = aka_key(args, kwargs)
        i = self.picks.get(key)
        if i is None:
            i = aka_pick(key, AKA_TABLE, AKA_DEFAULT)
            self.picks[key] = i
        return self.variants[i](*args, **kwargs)

    # The harness loads the reference's weights by name into the candidate's own state dict: each
    # variant gets the entries its own state dict has, as it would evaluated alone.
    def state_dict(self, *args, **kwargs):
        out = {}
        for v in self.variants:
            for k, t in v.state_dict(*args, **kwargs).items():
                out.setdefault(k, t)
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        for v in self.variants:
            own = v.state_dict()
            mine = {k: t for k, t in state_dict.items() if k in own and tuple(own[k].shape) == tuple(t.shape)}
            v.load_state_dict(mine, strict=False, assign=assign)
