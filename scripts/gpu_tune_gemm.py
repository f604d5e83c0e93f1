"""Measure the dispatching GEMM kernels' configurations per bench shape, beside the peers.

    python scripts/gpu_tune_gemm.py OUTDIR [--deadline 100] [--ops gemm_bf16,fp8_block_scaled_gemm]
    python scripts/gpu_tune_gemm.py OUTDIR --cpu        # interpreter, tiny shapes, wall-clock times

For every shape of gemm_bf16 and fp8_block_scaled_gemm (fp8's large shapes first) it runs a pruned
grid of configurations of knowledge_base/kernels/<op>/dispatch.py (GEMV at M <= 4, pointer/TMA tiles,
persistent or not, split-K, warp specialisation), checks each on two fresh input draws against
the reference math (bf16 tolerances of aka/evaluate/compare.py), and times it by CUDA-graph
replay over rotating input sets (together at least 3x the L2, so the weights come from HBM as in
the harness) beside the peers in the same process: cuBLAS through F.linear for bf16; for fp8
torch._scaled_mm with block-wise scales where this torch accepts them (checked against the
reference) and tensor-wise (the measured fp8 ceiling's kernel, not the same math). Work runs in
rank order over all shapes (peers and the heuristic default first), so a deadline cuts the least
promising configs, never a whole shape. OUTDIR/tune.json is rewritten after every measurement;
a table (shape, best config, ours us, peer us, ratio) is printed last.
Then `python scripts/bake_dispatch.py OUTDIR/tune.json` writes the winners into the kernels.

Budget (H200, one process, about 120 s): 244 (shape, config) measurements need about 57 distinct
compiles (M, split and grid counts are not specialised: one compile per config serves every
shape); `scripts/check_gemm_grid.py` compiles the whole grid for sm_90a offline and flags
failures and spills before any GPU time is spent. The deadline is checked before each
measurement, so the run ends a few seconds after it with everything measured so far.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the source commit: AKA_GIT_SHA on the device, whose .git is a stale copy (until 2026-12-06 the
# tuners read that copy's HEAD: results/h100/device-2026-12-06g/call1's tunes name 66bbba2 for bebc668)
from aka.evaluate.api import git_sha  # noqa: E402
OPS = ("gemm_bf16", "fp8_block_scaled_gemm")
TOL = {"atol": 1e-2, "rtol": 1.6e-2, "rel_norm": 5e-3}   # bf16 row of aka/evaluate/compare.py
L2_BYTES = 60 * 2**20          # H200 (DESIGN.md); the set count only needs the right order
TIMED_MS = 25.0                # replay time per measurement
CPU_SHAPES = {                 # one shape per dispatch bucket, small enough for the interpreter
    "c0": {"M": 3, "N": 40, "K": 256}, "c1": {"M": 12, "N": 40, "K": 128},
    "c2": {"M": 40, "N": 48, "K": 200}, "c3": {"M": 80, "N": 64, "K": 256},
    "c4": {"M": 300, "N": 48, "K": 128},
}


def tile(bm, bn, bk, warps, stages, tma, split=0, persist=0, ws=0, group=8, occ=1):
    return {"path": "tile", "BM": bm, "BN": bn, "BK": bk, "GROUP": group, "SPLIT_K": split,
            "num_warps": warps, "num_stages": stages, "TMA": tma, "PERSIST": persist, "WS": ws, "OCC": occ}


def gemv(bn, bk, warps, split=0):
    return {"path": "gemv", "BN": bn, "BK": bk, "SPLIT_K": split, "num_warps": warps, "num_stages": 1}


# Added 2026-12-03 after the first full-grid run: the shapes under 0.9x of cuBLAS were M 1-8 (the
# split-K launch and partials against a 12-15 us weight stream) and M 96-256 (tiles of 64 rows
# read each weight tile twice, and 32-64 tiles leave the GPU idle without a split): deeper
# pipelines and narrower tiles for decode; 128-row tiles with explicit splits for mid M.
DECODE_MORE = [tile(16, 32, 128, 4, 6, 1), tile(16, 64, 128, 4, 6, 1), tile(16, 64, 256, 4, 3, 1),
               tile(16, 128, 64, 4, 6, 1), tile(16, 32, 256, 4, 4, 1, split=2), tile(16, 64, 128, 4, 4, 1, split=2),
               tile(16, 64, 128, 4, 4, 1, split=3), tile(16, 32, 128, 4, 6, 1, split=2), tile(16, 64, 128, 8, 4, 1),
               tile(16, 128, 128, 4, 4, 1, split=4), tile(16, 64, 128, 4, 4, 1, persist=1, occ=3)]
MID_MORE = [tile(128, 64, 128, 4, 4, 1, split=2), tile(128, 64, 128, 4, 4, 1, split=3), tile(128, 64, 64, 4, 6, 1, split=2),
            tile(128, 128, 64, 8, 4, 1, split=3), tile(128, 128, 64, 8, 4, 1, split=4), tile(128, 128, 64, 8, 5, 1, split=2),
            tile(128, 128, 128, 8, 3, 1, split=2), tile(128, 128, 128, 8, 3, 1, split=3), tile(128, 64, 128, 8, 4, 1, split=2),
            tile(128, 256, 64, 8, 3, 1, split=2), tile(128, 128, 64, 8, 4, 1, split=2, persist=1),
            tile(64, 128, 128, 4, 4, 1, split=2), tile(64, 128, 128, 4, 4, 1, split=3), tile(64, 64, 128, 4, 4, 1, split=2),
            tile(256, 128, 64, 8, 3, 1, split=2), tile(128, 128, 64, 4, 4, 1, split=2)]

# Added 2026-12-05: M 96 (N 8192, K 7392) stays at 0.80x cuBLAS on every config above, all of which pad
# it to 128 rows (one 128-row tile, or two of 64): a third of the MMA work is on zeros at a shape
# that sits near the ridge (15.5 GFLOP padded, 121 MB of weight). 32-row tiles cover it exactly in
# three row tiles; grouped order (GROUP 8) runs the three that share a weight tile back to back, so
# the weight is read from DRAM once and from L2 twice. Only for M an odd multiple of 32.
# Measured on the H200 the same day (results/h200/optimize-2026-12-05, the re-tune's tune.json): all six
# correct and slower, 63-102 us against 44.4 us for 128x128x64 split 2 (cuBLAS 35.6 us). Padding is
# not what holds M 96 back; the six stay in the grid as measured evidence (they cost about a second).
MID_ROWS32 = [tile(32, 128, 128, 4, 4, 1), tile(32, 128, 128, 4, 4, 1, split=2), tile(32, 256, 64, 4, 4, 1),
              tile(32, 128, 64, 4, 6, 1), tile(32, 64, 128, 4, 6, 1, split=2), tile(32, 256, 128, 8, 3, 1)]


# Added 2026-12-05 (sixth session): the mid-M shapes still under 0.9x cuBLAS (H100: M 256,
# N 2560, K 8192 at 0.69x; H200: M 96, N 8192, K 7392 at 0.79x) ran 128x128 tiles, whose operand
# loads are (128 + 128) x 64 x 2 B = 32 KB per 2 MFLOP: 64 FLOP/B of L2-to-SM traffic, so a few TB/s
# of L2 bandwidth caps them near a third of the MMA peak (H100 at M 256: 34 us = 314 TFLOP/s; the
# 128x128 tiles re-read A 20 times, 168 MB from L2 for a 46 MB problem). 256x128 or 128x256 tiles
# move 85 FLOP/B and cut that traffic by a quarter, but the grid held them only at split 2: 40 and
# 64 programs on 132 SMs. These splits fill one wave (M 256 N 2560: 20 tiles x 6 = 120 programs;
# M 96 N 8192: 32 x 4 = 128; M 128 N 4096: 16 x 8 = 128), at 12-17 MB of fp32 partials that stay
# in the 50-60 MB L2 for the fixup. All compile offline for sm_90a (scripts/check_gemm_grid.py).
# Timed since (H100, the optimize re-tune of results/h100/device-2026-12-05c, retune/r002-dispatch/tune):
# slower than 128x128, not faster. At M 256 N 2560 K 8192 they ran 51.9-77.8 us against 34.6 us for
# 128x128x64 split 2, and more splits ran slower still (256x128 split 6: 65.7 us). Kept in the grid
# until the H200 has timed them; why they are slow is not known (ncu first: scripts/probe_gemm_peer.py).
MID_BIG = [tile(256, 128, 64, 8, 3, 1, split=6), tile(128, 256, 64, 8, 3, 1, split=4),
           tile(256, 128, 64, 8, 3, 1, split=4), tile(128, 256, 64, 8, 3, 1, split=8),
           tile(256, 128, 64, 8, 3, 1, split=3), tile(128, 256, 64, 8, 3, 1, split=3)]


# Added 2026-12-06 (fifteenth session): what cuBLAS runs at M 96 (N 8192, K 7392), where we are 0.80x of
# it: one wave of 128 programs (grid [2, 64]), each a 64 x 96 tile over the whole K (no split-K) with a
# ten-stage pipeline (nvjet_sm90_tst_64x96_64x10, 221 KB of shared memory; scripts/probe_gemm_peer.py,
# results/h100/device-2026-12-06c/call1/gemm_probe.md). Triton tiles are powers of two, so the nearest:
# 64-wide column tiles over M padded to 128 (128 programs at N 8192) or 128-wide ones over two 64-row
# tiles, as deep as _stages allows (offline sm_90a, no spills: 128x64x64 7 stages, 188 KB, 90 registers;
# 64x128x64 8 stages, 205 KB, 90 registers).
# Every grid above pads M 96 the same way, so the prediction is that depth, not padding, is the gap.
# Timed on the H100 the same day (results/h100/device-2026-12-06g/call1, one process): 64x128x64 s8 won
# M 96 (50.0 us against 56.6 for the table's 128x128x64 split 2; cuBLAS 48.4) and M 256 (28.8 against
# 34.6; cuBLAS 23.2); 128x64x64 s7 came second at M 256 and sixth at M 96.
DEEP_NARROW = [tile(128, 64, 64, 4, 7, 1, split=1), tile(64, 128, 64, 4, 8, 1, split=1),
               tile(128, 64, 64, 8, 7, 1, split=1), tile(128, 64, 128, 8, 4, 1, split=1),
               tile(128, 64, 64, 4, 7, 1, split=2)]


def bf16_grid(M):
    """Candidates per M bucket, most promising first (the deadline drops the tail)."""
    if M <= 4:
        return [gemv(32, 256, 4), tile(16, 64, 128, 4, 4, 1), gemv(64, 256, 8), gemv(16, 256, 4),
                gemv(32, 512, 8), tile(16, 64, 128, 4, 4, 0), gemv(32, 256, 4, split=1)] + DECODE_MORE
    if M <= 16:
        return [tile(16, 64, 128, 4, 4, 1), tile(16, 64, 128, 4, 4, 0), tile(16, 128, 128, 4, 4, 1),
                tile(16, 64, 256, 4, 3, 0), tile(16, 32, 256, 4, 4, 1), tile(16, 64, 128, 4, 6, 1, split=4)] + DECODE_MORE
    if M <= 64:
        bm = 32 if M <= 32 else 64
        return [tile(bm, 128, 128, 4, 4, 1), tile(bm, 64, 128, 4, 4, 1), tile(bm, 128, 128, 4, 4, 1, persist=1),
                tile(bm, 64, 128, 4, 4, 0), tile(bm, 128, 64, 4, 5, 1), tile(bm, 256, 64, 8, 4, 1, split=1),
                tile(bm, 128, 128, 4, 4, 1, persist=1, occ=2), tile(bm, 128, 128, 4, 4, 1, split=2),
                tile(bm, 64, 256, 4, 3, 1), tile(bm, 64, 128, 4, 6, 1), tile(bm, 32, 128, 4, 6, 1),
                tile(bm, 64, 128, 4, 4, 1, split=2), tile(bm, 64, 128, 4, 4, 1, split=4)]
    if M <= 256:  # explicit splits last: `auto` (two programs per SM) takes 9 at M 128, N 4096, 19 MB of partials
        return [tile(64, 128, 64, 4, 4, 1), tile(128, 128, 64, 8, 4, 1), tile(64, 128, 128, 4, 4, 1)] + DEEP_NARROW + [
                tile(128, 128, 64, 8, 4, 1, persist=1), tile(64, 64, 128, 4, 4, 0), tile(64, 256, 64, 8, 3, 1),
                tile(64, 128, 64, 4, 4, 1, persist=1, occ=2), tile(64, 128, 64, 4, 4, 1, split=4),
                tile(128, 128, 64, 8, 4, 1, split=2)] + MID_BIG + MID_MORE + (MID_ROWS32 if M % 32 == 0 and M % 64 else [])
    if M <= 1024:  # one wave of 128x128 tiles or less (M 512, N 4096: 128 tiles), see MID_PREFILL
        return PREFILL_BASE[:3] + MID_PREFILL + PREFILL_BASE[3:]
    return PREFILL_BASE


# Added 2026-12-04: M 512, N 4096, K 4096 was 0.89x cuBLAS on the best of the prefill list (30.6 us,
# 128 tiles of 128x128 on 132 SMs, one partial wave, no split tried); splits and narrower tiles give
# 2-4 programs per SM.
MID_PREFILL = [tile(128, 128, 64, 8, 4, 1, split=2), tile(128, 128, 64, 8, 4, 1, split=2, persist=1),
               tile(128, 64, 64, 4, 4, 1, split=1, persist=1), tile(128, 64, 128, 4, 4, 1, split=2),
               tile(64, 128, 64, 4, 4, 1, split=1, persist=1), tile(128, 128, 64, 8, 4, 1, split=3),
               tile(128, 256, 64, 8, 3, 1, split=2)]
PREFILL_BASE = [tile(128, 256, 64, 8, 3, 1, split=1, persist=1), tile(128, 256, 64, 8, 3, 1, split=1),
                tile(128, 128, 64, 8, 4, 1, split=1, persist=1), tile(128, 256, 64, 8, 3, 1, split=1, persist=1, ws=1),
                tile(256, 128, 64, 8, 3, 1, split=1, persist=1), tile(128, 128, 64, 8, 4, 1),
                tile(128, 256, 64, 8, 4, 0, split=1), tile(128, 128, 64, 8, 4, 1, split=0, persist=1)]


# Added 2026-12-06 (twelfth session): in Triton 3.6 a warpgroup waits for each K step's fresh fp8 dot
# to finish (WARPGROUP.DEPBAR.LE gsb0, 0x0) before it scales the result in, with at most 3 of the
# scaling's FP32 multiplies issued under the MMA, whether the dot is written fresh, carried into the
# next trip or issued in pairs (`python scripts/probe_fp8_wgmma_waits.py`). So the tensor cores idle
# while a warpgroup scales, unless another program on the SM has MMAs in flight then. The table's
# prefill rows run 128x128 tiles on 8 warps, persistent at one program per SM (0.61 of the measured
# ceiling on the H200). These give the SM two or three programs: 64-row or 64-column tiles on 4 warps
# (155-157 registers; 82-91 KB of shared memory at 3 stages, two programs an SM; 57 KB at 2 stages,
# three), persistent at OCC 2 or 3, or one program per tile (scripts/check_gemm_grid.py: no spills).
# Timed on the H100 (results/h100/device-2026-12-06e, call 1): they won 5 of the 8 prefill shapes by 1-12%;
# not baked there (the table is the H200's); not yet timed on the H200.
FP8_OVERLAP = [tile(64, 128, 128, 4, 3, 1, split=1, persist=1, occ=2), tile(64, 128, 128, 4, 2, 1, split=1, persist=1, occ=3),
               tile(128, 64, 128, 4, 3, 1, split=1, persist=1, occ=2), tile(64, 128, 128, 4, 3, 1, split=1)]


def fp8_grid(M):
    if M <= 4:
        return [gemv(32, 128, 4), tile(16, 64, 128, 4, 4, 1), gemv(64, 128, 4), tile(16, 128, 128, 4, 4, 1)]
    if M <= 16:
        return [tile(16, 64, 128, 4, 4, 1), tile(16, 128, 128, 4, 4, 1), tile(16, 64, 128, 4, 4, 0),
                tile(16, 32, 128, 4, 5, 1)]
    if M <= 64:
        bm = 32 if M <= 32 else 64
        return [tile(bm, 128, 128, 4, 4, 1), tile(bm, 64, 128, 4, 4, 1), tile(bm, 128, 128, 4, 3, 1, persist=1),
                tile(bm, 64, 128, 4, 5, 0)]
    if M <= 256:
        return [tile(64, 128, 128, 4, 4, 1), tile(128, 128, 128, 8, 4, 1), tile(64, 128, 128, 4, 4, 1, persist=1),
                tile(64, 256, 128, 8, 3, 1)]
    # 128x256 at 8 warps, 128x128 at 4 and 256x128 at 8 spill (fresh dot result beside the accumulator:
    # scripts/check_gemm_grid.py), so prefill stays at 128x128 / 64x128 / 128x64 tiles.
    return [tile(128, 128, 128, 8, 4, 1, split=1, persist=1), tile(128, 128, 128, 8, 4, 1, split=1),
            *FP8_OVERLAP, tile(128, 128, 128, 8, 3, 1, split=1, persist=1), tile(64, 128, 128, 4, 5, 1, split=1, persist=1),
            tile(128, 64, 128, 4, 4, 1, split=1, persist=1), tile(128, 128, 128, 8, 4, 1, split=1, persist=1, group=16),
            tile(128, 128, 128, 8, 4, 0, split=1)]


def cpu_grid(M, fp8):
    """Every path once (split, persistent, TMA, WS), small tiles so the interpreter is quick."""
    bk = 128 if fp8 else 64
    g = [gemv(32, bk, 4, split=1), gemv(16, bk, 4, split=0)] if M <= 4 else [gemv(16, bk, 4)]
    return g + [tile(16, 32, bk, 4, 2, 0, split=1), tile(16, 32, bk, 4, 2, 0, split=2, persist=1),
                tile(32, 32, bk, 4, 2, 1, split=1, persist=1, ws=1), tile(16, 64, bk, 4, 2, 1, split=3),
                tile(16, 128, bk, 4, 2, 1, split=1)]


def cfg_name(cfg):
    if cfg["path"] == "gemv":
        return f"gemv BN{cfg['BN']} BK{cfg.get('BK', 128)} w{cfg['num_warps']} split{cfg['SPLIT_K'] or 'auto'}"
    flags = "".join(f" {k.lower()}" for k in ("TMA", "PERSIST", "WS") if cfg.get(k))
    flags += f" occ{cfg['OCC']}" if cfg.get("PERSIST") and cfg.get("OCC", 1) > 1 else ""
    return (f"tile {cfg['BM']}x{cfg['BN']}x{cfg.get('BK', 128)} w{cfg['num_warps']} s{cfg['num_stages']} "
            f"g{cfg['GROUP']} split{cfg['SPLIT_K'] or 'auto'}{flags}")


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def close_enough(out, ref):
    """(ok, max_abs_err, rel_err): elementwise atol + rtol * |ref| and relative norm, no NaN/Inf."""
    import torch
    o, r = out.float(), ref.float()
    if not torch.isfinite(o).all():
        return False, float("inf"), float("inf")
    diff = (o - r).abs()
    rel = float(diff.norm() / r.norm().clamp_min(1e-30))
    ok = bool((diff <= TOL["atol"] + TOL["rtol"] * r.abs()).all()) and rel <= TOL["rel_norm"]
    return ok, float(diff.max()), rel


class Timer:
    """CUDA-graph replay over rotating input sets (GPU) or wall-clock calls (CPU interpreter)."""

    def __init__(self, torch, cuda):
        self.torch, self.cuda = torch, cuda

    def __call__(self, fn, sets):
        torch = self.torch
        if not self.cuda:
            t0 = time.perf_counter()
            fn(sets[0])
            return (time.perf_counter() - t0) * 1e6
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        keep = []
        with torch.cuda.graph(g):
            for s in sets:
                keep.append(fn(s))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        g.replay()
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        one_ms = max(start.elapsed_time(end), 1e-3)
        reps = max(3, min(50, int(TIMED_MS / one_ms)))
        times = []
        for _ in range(reps):
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / len(sets))
        del g, keep
        return statistics.median(times)


def make_problem(op, kw, device, torch, cpu):
    """Input sets and the reference output of sets 0 and 1 for one shape."""
    inp = load_module(ROOT / "bench" / "ops" / op / "input.py", f"_tune_input_{op}")
    ref_mod = load_module(ROOT / "bench" / "ops" / op / "reference.py", f"_tune_ref_{op}")
    model = ref_mod.Model()
    first = inp._make_inputs(**kw, device=device)
    set_bytes = sum(t.numel() * t.element_size() for t in first.values())
    n_sets = 2 if cpu else max(2, min(64, math.ceil(3 * L2_BYTES / set_bytes)))
    sets = [first] + [inp._make_inputs(**kw, device=device) for _ in range(n_sets - 1)]
    with torch.no_grad():
        refs = [model(**s) for s in sets[:2]]
    return {"sets": sets, "refs": refs, "set_bytes": set_bytes}


def peer_calls(op, torch, late=False):
    """name -> (callable(inputs) -> output, same_math)."""
    import torch.nn.functional as F
    if op == "gemm_bf16":
        return {} if late else {"cublas F.linear": (lambda s: F.linear(s["x"], s["w"]), True)}
    one = torch.ones((), dtype=torch.float32, device="cuda")
    if not late:
        return {"_scaled_mm tensorwise (ceiling kernel)":
                (lambda s: torch._scaled_mm(s["a"], s["b"].t(), scale_a=one, scale_b=one,
                                            out_dtype=torch.bfloat16), False)}
    # Block-wise 1x128 / 128x128 scales, two layouts of scale_a; each counts only if it matches the reference.
    out = {}
    out["_scaled_mm blockwise"] = (lambda s: torch._scaled_mm(s["a"], s["b"].t(), scale_a=s["a_scale"],
                                                              scale_b=s["b_scale"].t(), out_dtype=torch.bfloat16), True)
    out["_scaled_mm blockwise (scale_a M-major)"] = (
        lambda s: torch._scaled_mm(s["a"], s["b"].t(), scale_a=s["a_scale"].t().contiguous().t(),
                                   scale_b=s["b_scale"].t(), out_dtype=torch.bfloat16), True)
    return out


def ceilings(torch):
    """Measured fp8 matmul rate (tensor-wise _scaled_mm at 8192^3, as `aka hw calibrate`) and copy TB/s."""
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), dtype=torch.float32, device="cuda")
    f = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    res = {}
    cases = (("fp8_tflops", f, 2.0 * n**3 / 1e12), ("copy_tbps", lambda: dst.copy_(src), 2 * 2**30 / 1e12))
    for key, fn, work in cases:
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(10):
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        res[key] = work / statistics.median(ts)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--deadline", type=float, default=100.0, help="seconds of wall time for the whole run")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--shapes", default="", help="comma-separated shape ids (default: all)")
    ap.add_argument("--cpu", action="store_true", help="Triton interpreter, tiny shapes (a smoke test)")
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"   # before triton is imported
    import torch
    cuda = torch.cuda.is_available() and not args.cpu
    if not cuda and not args.cpu:
        sys.exit("gpu_tune_gemm: no CUDA device (use --cpu for the interpreter smoke test)")
    if args.cpu:
        from aka.evaluate.interp_fix import install   # the interpreter's bf16/fp8 fixes, as the harness uses
        install()
    import triton
    ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in ops if o not in OPS]
    if bad:
        sys.exit(f"gpu_tune_gemm: unknown op {bad[0]} (choose from {', '.join(OPS)})")
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if cuda else "cpu"
    env = {"gpu": torch.cuda.get_device_name() if cuda else None, "torch": torch.__version__,
           "triton": triton.__version__, "git_sha": git_sha(), "deadline_s": args.deadline,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "timing": "cpu wall clock (interpreter)" if not cuda else
           f"CUDA graph replay over rotating input sets (>= 3 x {L2_BYTES >> 20} MiB), median of replays / sets"}
    doc = {"env": env, "records": [], "peers": [], "errors": [], "best": {}}

    def save():
        tmp = out / "tune.json.tmp"
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(out / "tune.json")

    if cuda and "fp8_block_scaled_gemm" in ops:
        try:
            env["ceilings"] = ceilings(torch)
        except Exception as exc:
            doc["errors"].append({"stage": "ceilings", "error": f"{type(exc).__name__}: {exc}"})
    timer = Timer(torch, cuda)
    kernels, shapes, tasks = {}, {}, []
    for op in ops:
        kernels[op] = load_module(ROOT / "knowledge_base" / "kernels" / op / "dispatch.py", f"_tune_{op}")
        meta = json.loads((ROOT / "bench" / "ops" / op / "meta.json").read_text())
        if args.cpu:
            table = CPU_SHAPES
        else:
            bench = json.loads((ROOT / "bench" / "ops" / op / "shapes.json").read_text())
            table = {sid: s["input_kwargs"] for sid, s in bench.items()}
        wanted = [x for x in args.shapes.split(",") if x]
        for sid in wanted:
            if sid not in table:
                sys.exit(f"gpu_tune_gemm: {op} has no shape {sid} (shapes: {', '.join(table)})")
        for sid, kw in table.items():
            if wanted and sid not in wanted:
                continue
            M, N, K = kw["M"], kw["N"], kw["K"]
            large = 2 * M * N * K / 1e12 / 1979.0 * 1e6 >= 10 or (M * K + N * K) / 4.8e12 * 1e6 >= 10
            shapes[(op, sid)] = {"kw": kw, "large": large, "phase": meta.get("shapes", {}).get(sid, {}).get("phase")}
            fp8 = op != "gemm_bf16"
            grid = cpu_grid(M, fp8) if args.cpu else (fp8_grid(M) if fp8 else bf16_grid(M))
            default = kernels[op]._heuristic(M, N, K)
            cfgs = [default] + [c for c in grid if c != default]
            # fp8's small decode shapes are outside the goal (median of large shapes): they go last
            shift = 0 if (not fp8 or large) else 100
            if cuda:
                tasks.append((shift - 1, op, sid, "peers"))
                if fp8:  # last: a device fault in an untried scale layout would poison every later measurement
                    tasks.append((1000, op, sid, "late peers"))
            tasks += [(shift + r, op, sid, c) for r, c in enumerate(cfgs)]
    tasks.sort(key=lambda t: (t[0], OPS.index(t[1]), t[2]))
    problems = {}
    skipped = 0
    for rank, op, sid, cfg in tasks:
        if time.monotonic() - t_start > args.deadline:
            skipped += 1
            continue
        try:
            run_task(doc, problems, shapes, kernels, timer, torch, device, cuda, args.cpu, rank, op, sid, cfg)
        except Exception as exc:  # whatever went wrong, the run goes on and says so
            doc["errors"].append({"op": op, "shape": sid, "stage": "task", "config": cfg,
                                  "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-1500:]})
        save()
    doc["skipped_for_deadline"] = skipped
    doc["wall_s"] = round(time.monotonic() - t_start, 1)
    try:
        summarize(doc, shapes)
    finally:
        save()
    print_table(doc)
    return 0


def run_task(doc, problems, shapes, kernels, timer, torch, device, cuda, cpu, rank, op, sid, cfg):
    """The peers (cfg "peers" / "late peers") or one config of one shape: correctness on two draws, then time."""
    kw = shapes[(op, sid)]["kw"]
    try:
        if (op, sid) not in problems:
            problems[(op, sid)] = make_problem(op, kw, device, torch, cpu)
        prob = problems[(op, sid)]
    except Exception as exc:
        doc["errors"].append({"op": op, "shape": sid, "stage": "inputs", "error": f"{type(exc).__name__}: {exc}"})
        problems[(op, sid)] = None
        return
    if prob is None:
        return
    if isinstance(cfg, str):
        for name, (fn, same_math) in peer_calls(op, torch, late=cfg == "late peers").items():
            rec = {"op": op, "shape": sid, **kw, "peer": name, "same_math": same_math}
            try:
                outs = [fn(s) for s in prob["sets"][:2]]
                checks = [close_enough(o, r) for o, r in zip(outs, prob["refs"])]
                rec.update(correct=all(c[0] for c in checks), max_abs_err=max(c[1] for c in checks))
                rec["us"] = timer(fn, prob["sets"])
            except Exception as exc:
                first = str(exc).strip().splitlines()
                rec.update(correct=False, error=f"{type(exc).__name__}: {first[0][:300] if first else ''}")
            doc["peers"].append(rec)
        return
    mod = kernels[op]
    if op == "gemm_bf16":
        fn = lambda s, c=cfg: mod.gemm(s["x"], s["w"], c)  # noqa: E731
    else:
        fn = lambda s, c=cfg: mod.gemm(s["a"], s["a_scale"], s["b"], s["b_scale"], c)  # noqa: E731
    rec = {"op": op, "shape": sid, **kw, "rank": rank, "config": cfg, "name": cfg_name(cfg),
           "default": rank % 100 == 0}
    t0 = time.monotonic()
    try:
        checks = []
        for s, ref in zip(prob["sets"][:2], prob["refs"]):
            if cuda:  # an output never written must not inherit the previous config's result
                torch.full((ref.numel() + 4096,), float("nan"), dtype=torch.float32, device=device)
            checks.append(close_enough(fn(s), ref))
        rec["first_call_s"] = round(time.monotonic() - t0, 3)
        rec.update(correct=all(c[0] for c in checks), max_abs_err=max(c[1] for c in checks),
                   rel_err=max(c[2] for c in checks))
        if rec["correct"]:
            rec["us"] = timer(fn, prob["sets"])
    except Exception as exc:
        msg = str(exc).strip().splitlines()
        rec.update(correct=False, error=f"{type(exc).__name__}: {msg[0][:300] if msg else ''}")
        if not cuda:
            rec["traceback"] = traceback.format_exc()[-2000:]
    rec["wall_s"] = round(time.monotonic() - t0, 3)
    doc["records"].append(rec)


def summarize(doc, shapes):
    ceil = doc["env"].get("ceilings") or {}
    for (op, sid), info in shapes.items():
        recs = [r for r in doc["records"] if r["op"] == op and r["shape"] == sid and r.get("correct") and r.get("us")]
        peers = [p for p in doc["peers"] if p["op"] == op and p["shape"] == sid and p.get("us")]
        same = [p for p in peers if p.get("correct") and p["same_math"]]
        if not recs:
            continue
        best = min(recs, key=lambda r: r["us"])
        default = next((r for r in recs if r.get("default")), None)
        kw = info["kw"]
        row = {**kw, "large": info["large"], "config": best["config"], "name": best["name"], "us": best["us"],
               "default_us": default["us"] if default else None}
        if same:
            p = min(same, key=lambda p: p["us"])
            row.update(peer=p["peer"], peer_us=p["us"], ratio=p["us"] / best["us"])
        if op != "gemm_bf16" and ceil:
            M, N, K = kw["M"], kw["N"], kw["K"]
            flop_us = 2 * M * N * K / (ceil["fp8_tflops"] * 1e12) * 1e6
            byte_us = (M * K + N * K + 2 * M * N) / (ceil["copy_tbps"] * 1e12) * 1e6
            row["ceiling_us"] = max(flop_us, byte_us)
            row["frac_ceiling"] = row["ceiling_us"] / best["us"]
        doc["best"].setdefault(op, {})[sid] = row


def _geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def print_table(doc):
    print(f"# {doc['env']['gpu'] or 'cpu'} torch {doc['env']['torch']} triton {doc['env']['triton']} "
          f"sha {doc['env']['git_sha']} wall {doc['wall_s']} s, {len(doc['records'])} configs measured, "
          f"{doc['skipped_for_deadline']} skipped at the deadline, {len(doc['errors'])} errors")
    for op, rows in doc["best"].items():
        print(f"\n{op}")
        print(f"{'shape':>5} {'M':>6} {'N':>7} {'K':>6}  {'best config':<52} {'ours us':>9} {'peer us':>9} "
              f"{'ratio':>6} {'default':>8}" + ("  frac_ceiling" if op != "gemm_bf16" else ""))
        for sid, r in sorted(rows.items(), key=lambda kv: (len(kv[0]), kv[0])):
            peer = f"{r['peer_us']:9.1f} {r['ratio']:6.2f}" if r.get("peer_us") else f"{'-':>9} {'-':>6}"
            dflt = f"{r['default_us']:8.1f}" if r.get("default_us") else f"{'-':>8}"
            extra = f"  {r['frac_ceiling']:.2f}{'' if r['large'] else ' (small)'}" if r.get("frac_ceiling") else ""
            print(f"{sid:>5} {r['M']:>6} {r['N']:>7} {r['K']:>6}  {r['name']:<52} {r['us']:9.1f} {peer} {dflt}{extra}")
        g = _geomean([r.get("ratio") for r in rows.values()])
        worst = min((r["ratio"] for r in rows.values() if r.get("ratio")), default=None)
        line = f"geomean peer/ours {g:.3f}, worst {worst:.3f}" if g else "no peer ratio"
        fr = sorted(r["frac_ceiling"] for r in rows.values() if r.get("frac_ceiling") and r["large"])
        if fr:
            line += f"; ceiling fraction median over large shapes {statistics.median(fr):.3f}"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
