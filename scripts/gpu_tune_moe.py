"""Tune the grouped fused_moe kernel per bench shape, beside torch._grouped_mm, in one process.

    python scripts/gpu_tune_moe.py OUTDIR [--deadline 100] [--device cuda|cpu] [--shapes all|small|0,3]

For every shape of bench/ops/fused_moe: fresh inputs (bench input.py), the reference, then each
config of a pruned grid (decode or prefill list by expected rows per expert) run through the
kernel's `moe_forward`, checked against the reference on that draw, and timed twice, cold L2
(Timer): per call between CUDA events as `aka eval` times this op, which picks the winner, and
as a CUDA graph replay. The winner is re-checked on a second, fresh draw. Beside it the peer:
torch._grouped_mm for both expert GEMMs with routing (argsort, gather), SiLU-and-mul and the
weighted top-k combine around it in torch, timed the same way.

Fractions are the op's cost model (meta.json) over the time, against the datasheet and against
the ceiling measured in this process by aka.hardware.calibrate (copy bandwidth, bf16 matmul),
as `aka kb best` reports them. Writes OUTDIR/moe_tune.json after every shape (a cut-off run
keeps what it measured) and prints a table last. `--device cpu` runs the same steps through the
Triton interpreter with wall-clock "times" that measure nothing (a crash test for the device).
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# the source commit: AKA_GIT_SHA on the device, whose .git is a stale copy (until 2026-12-06 the
# tuners read that copy's HEAD: results/h100/device-2026-12-06g/call1's tunes name 66bbba2 for bebc668)
from aka.evaluate.api import git_sha  # noqa: E402
OP_DIR = ROOT / "bench" / "ops" / "fused_moe"
KERNEL = ROOT / "knowledge_base" / "kernels" / "fused_moe" / "grouped_dispatch.py"
REPS = 15
FIRST_PASS = 2               # configs per shape before any shape gets its third
MARGIN_S = 8.0             # one config's compile (two GEMM kernels) and timing fit in it
BASE = {"TABLE": 0, "GROUP": 8, "SPLIT_K": 1, "PERSIST": 0, "USE_TMA": 0}
# Decode: rows per expert <= 64, weight streaming: BM 16-32, deep BK, atomic combine, split-K
# where (experts hit) x (H / BN2) tiles are few (8-expert shapes).
DECODE = [dict(BASE, BM=16, BN=64, BN2=64, BK=128, num_warps=4, num_stages=4, COMBINE=1),
          dict(BASE, BM=16, BN=32, BN2=128, BK=128, num_warps=4, num_stages=4, COMBINE=1),
          dict(BASE, BM=16, BN=64, BN2=64, BK=128, num_warps=4, num_stages=4, COMBINE=1, SPLIT_K=2),
          dict(BASE, BM=32, BN=64, BN2=128, BK=64, num_warps=4, num_stages=4, COMBINE=1),
          dict(BASE, BM=64, BN=64, BN2=64, BK=64, num_warps=4, num_stages=3, COMBINE=1),
          dict(BASE, BM=16, BN=64, BN2=64, BK=128, num_warps=4, num_stages=4, COMBINE=1, USE_TMA=1)]
# Prefill: MMA-bound tiles (wgmma wants BM >= 64), both combines, TMA weight tiles or not,
# persistent and not. Ordered by expected value: a run cut short has tried the first ones.
PREFILL = [dict(BASE, BM=128, BN=128, BN2=128, BK=64, num_warps=8, num_stages=3, COMBINE=1, USE_TMA=1),
           dict(BASE, BM=128, BN=128, BN2=128, BK=64, num_warps=8, num_stages=3, COMBINE=0, USE_TMA=1),
           dict(BASE, BM=128, BN=128, BN2=128, BK=64, num_warps=8, num_stages=3, COMBINE=1),
           dict(BASE, BM=64, BN=128, BN2=128, BK=64, num_warps=4, num_stages=4, COMBINE=1, USE_TMA=1),
           # BN2 256 with the atomic epilogue spills (255 registers, 104 B, offline sm_90a compile)
           dict(BASE, BM=128, BN=64, BN2=256, BK=64, num_warps=8, num_stages=4, COMBINE=0, USE_TMA=1),
           dict(BASE, BM=128, BN=128, BN2=128, BK=64, num_warps=8, num_stages=3, COMBINE=1, USE_TMA=1, PERSIST=1),
           dict(BASE, BM=64, BN=128, BN2=128, BK=64, num_warps=4, num_stages=4, COMBINE=0)]
# Added 2026-12-06 (fourteenth session): at about 256 rows per expert (bench shapes 10, 13, 14: 0.31-0.44
# of the H200's measured ceiling, the lowest of the op) the H100's profile put GEMM1 at 359-376 TFLOP/s
# against 535-624 at 512-2048 rows. Two losses the PREFILL rows cannot avoid there: a segment's last
# 128-row block is half empty on average, about a quarter of the MMA work on padding at ~256 rows; and shape 14's GEMM1 has 8 experts x ~2.5 blocks x 16 N tiles = about 320 tiles of 112 K
# steps on 132 SMs, three waves with the last 40 % full. 64-row blocks pad by 12 % on average and give
# twice the tiles; 8 warps keep two warpgroups per 64-row tile (each a 64 x BN slice of gate and up);
# a fourth stage and BK 128 deepen the weight stream, which is half the time at this intensity
# (256 FLOP per weight byte, the ridge). Only for 64 < rows per expert <= 768.
# Timed on the H100 the same day (results/h100/device-2026-12-06f call 1): 64-row blocks won shape 13 alone
# (1.3 %); at 14 and 10 the 128-row blocks stayed 4-6 % ahead of the best of them (ops/fused_moe.md).
MID = [dict(BASE, BM=64, BN=128, BN2=128, BK=64, num_warps=8, num_stages=4, COMBINE=0, USE_TMA=1),
       dict(BASE, BM=64, BN=128, BN2=128, BK=64, num_warps=4, num_stages=4, COMBINE=0, USE_TMA=1),
       dict(BASE, BM=64, BN=64, BN2=128, BK=128, num_warps=4, num_stages=4, COMBINE=0, USE_TMA=1),
       dict(BASE, BM=128, BN=128, BN2=128, BK=64, num_warps=8, num_stages=4, COMBINE=0, USE_TMA=1),
       dict(BASE, BM=64, BN=128, BN2=128, BK=128, num_warps=8, num_stages=3, COMBINE=0, USE_TMA=1),
       dict(BASE, BM=64, BN=128, BN2=256, BK=64, num_warps=8, num_stages=4, COMBINE=0, USE_TMA=1),
       dict(BASE, BM=128, BN=64, BN2=128, BK=64, num_warps=4, num_stages=4, COMBINE=0, USE_TMA=1),
       dict(BASE, BM=64, BN=128, BN2=128, BK=64, num_warps=8, num_stages=4, COMBINE=0, USE_TMA=1, PERSIST=1),
       dict(BASE, BM=64, BN=128, BN2=128, BK=64, num_warps=8, num_stages=4, COMBINE=1, USE_TMA=1),
       dict(BASE, BM=64, BN=128, BN2=128, BK=64, num_warps=8, num_stages=4, COMBINE=0, USE_TMA=1, GROUP=16)]
# Added 2026-12-06 (fifteenth session): A tiles by TMA (grouped_dispatch TMA_ACT, GATHER_X). Every row above
# feeds both GEMMs' A tiles by pointer loads; offline (sm_90a, triton 3.6, DeepSeek-V3 EP32 geometry)
# GEMM1's 128x128 tile on 8 warps sits at 255 registers with them and 172 with x gathered into sorted
# order first and read by TMA, GEMM2's at 128 against 111. Predicted: faster GEMMs at the prefill shapes,
# most where I / BN N tiles re-read each A row (shape 14: 16), against GATHER_X's extra copy of the
# routed rows (shape 11's 131k rows x 2048: 0.5 GB written and as much read, ~220 us at 4.8 TB/s; the
# bare TMA_ACT row pays nothing).
# Timed on the H100 the same day (results/h100/device-2026-12-06g/call1): an A-by-TMA row won all eight
# prefill shapes, by 0.1-5.7% over the best pointer-fed row; least at 256 rows per expert (0.9-1.6%).
A_TMA = [dict(BASE, BM=128, BN=128, BN2=128, BK=64, num_warps=8, num_stages=3, COMBINE=0, USE_TMA=1, TMA_ACT=1, GATHER_X=1),
         dict(BASE, BM=128, BN=128, BN2=128, BK=64, num_warps=8, num_stages=3, COMBINE=0, USE_TMA=1, TMA_ACT=1),
         dict(BASE, BM=128, BN=128, BN2=128, BK=64, num_warps=8, num_stages=4, COMBINE=0, USE_TMA=1, TMA_ACT=1, GATHER_X=1),
         dict(BASE, BM=64, BN=128, BN2=128, BK=64, num_warps=4, num_stages=4, COMBINE=0, USE_TMA=1, TMA_ACT=1, GATHER_X=1),
         dict(BASE, BM=128, BN=128, BN2=128, BK=64, num_warps=8, num_stages=3, COMBINE=1, USE_TMA=1, TMA_ACT=1, GATHER_X=1)]
TINY = [dict(BASE, BM=16, BN=32, BN2=32, BK=32, num_warps=4, num_stages=2, COMBINE=1),
        dict(BASE, BM=16, BN=32, BN2=32, BK=32, num_warps=4, num_stages=2, COMBINE=1, SPLIT_K=2, PERSIST=1),
        dict(BASE, BM=32, BN=32, BN2=64, BK=32, num_warps=4, num_stages=2, COMBINE=0, USE_TMA=1)]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rows_per_expert(kw: dict) -> float:
    return kw["num_tokens"] * kw["top_k"] / (kw["num_experts"] * kw.get("ep_size", 1))


def grid_for(kw: dict, device: str) -> list[dict]:
    if device == "cpu":
        return TINY
    rows = rows_per_expert(kw)
    if rows <= 64:
        return DECODE
    # the PREFILL rows first (what the table holds today), then the mid-rows grid,
    # and the A-by-TMA rows right after the first two
    head = PREFILL[:FIRST_PASS] + A_TMA
    return head + MID + PREFILL[FIRST_PASS:] if rows <= 768 else head + PREFILL[FIRST_PASS:]


def check(got, want, tol: dict) -> dict:
    import torch
    g, w = got.float(), want.float()
    finite = bool(torch.isfinite(g).all())
    rel = float((g - w).norm() / w.norm().clamp_min(1e-30))
    max_abs = float((g - w).abs().max())
    close = bool(torch.allclose(g, w, atol=tol["atol"], rtol=tol["rtol"]))
    return {"ok": finite and close and rel <= tol["rel_norm"], "rel_err": rel, "max_abs_err": max_abs}


class Timer:
    """Two figures per call on the GPU, each the median of REPS samples after an L2 flush (a read
    of 2x the L2, as the harness does: a write would leave dirty lines to drain inside the timed
    call) and a GPU spin that lets the host enqueue the call before the start event fires:
      events_us: one plain call between two events, the method `aka eval` uses for this op (its
                 inputs exceed 3x the L2), so the winner is picked by it;
      graph_us:  a CUDA graph of one call replayed, without the host's launch cost.
    On CPU one wall-clock call (the interpreter: a crash test, not a time)."""

    HEAD_START_CYCLES = 400_000       # aka/evaluate/timing.py's head start (~200 us at 1.98 GHz)

    def __init__(self, torch, device: str, l2_bytes: int):
        self.torch, self.device = torch, device
        self.flush_buf = torch.empty(2 * l2_bytes, dtype=torch.uint8, device=device) if device == "cuda" else None

    def _sample(self, call) -> tuple[float, object]:
        torch = self.torch
        torch.sum(self.flush_buf, dtype=torch.int32)
        torch.cuda._sleep(self.HEAD_START_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3, out

    def __call__(self, fn) -> tuple[dict, object]:
        torch = self.torch
        if self.device != "cuda":
            t0 = time.perf_counter()
            out = fn()
            return {"time_us": (time.perf_counter() - t0) * 1e6, "timer": "cpu wall"}, out
        fn()                                        # compile and warm up outside any timing
        events = []
        for _ in range(REPS):
            us, res = self._sample(fn)              # res: the last timed call's output, checked
            events.append(us)
        times = {"time_us": statistics.median(events), "events_us": statistics.median(events),
                 "events_spread": (max(events) - min(events)) / statistics.median(events), "timer": "events"}
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                gout = fn()
            times["graph_us"] = statistics.median([self._sample(graph.replay)[0] for _ in range(REPS)])
            del graph, gout
        except Exception as exc:  # noqa: BLE001 - a call a graph cannot hold keeps its event time
            torch.cuda.synchronize()
            times["graph_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        torch.cuda.synchronize()
        return times, res


def grouped_mm_peer(torch, local_only: bool = False):
    """torch._grouped_mm for the expert GEMMs, routing and combine around it in torch (the way
    torchtitan runs MoE): rows sorted by expert, EP-remote pairs (-1) last and outside `offs`.
    local_only (expert-parallel shapes): read the local row count on the host and gather only
    those rows, as a rank that received only its tokens would; without it the gather copies all
    T*k rows (1.9 GB at DeepSeek-V3 EP16, 16k tokens) for 1/16 of them to be used. The sync
    keeps that variant out of a CUDA graph: it is timed by events only."""
    if not hasattr(torch, "_grouped_mm"):
        return None
    F = torch.nn.functional

    def peer(hidden, w1, w2, topk_weights, topk_ids):
        T, H = hidden.shape
        E, k, I = w1.shape[0], topk_ids.shape[1], w2.shape[2]
        key = topk_ids.reshape(-1).long()
        key = torch.where(key >= 0, key, E)
        order = torch.argsort(key, stable=True)
        # counts by scatter_add: bincount reads its max on the host, which a graph capture refuses
        counts = torch.zeros(E + 1, dtype=torch.int64, device=hidden.device).scatter_add_(0, key, torch.ones_like(key))
        offs = torch.cumsum(counts[:E], 0).to(torch.int32)
        if local_only:
            order = order[:int(offs[-1])]
        tok = order // k
        h = torch._grouped_mm(hidden.index_select(0, tok), w1.transpose(-2, -1), offs=offs)
        gate, up = h.float().split(I, dim=-1)
        act = (F.silu(gate) * up).to(hidden.dtype)
        y = torch._grouped_mm(act, w2.transpose(-2, -1), offs=offs)
        keep = (key[order] < E)[:, None]           # rows past offs[-1] are undefined: drop them
        yw = torch.where(keep, y.float() * topk_weights.reshape(-1)[order][:, None], 0.0)
        out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device).index_add_(0, tok, yw)
        return out.to(hidden.dtype)
    return peer


def ceilings(torch, device: str, out: dict) -> tuple[dict | None, dict | None]:
    """(datasheet, measured) as {"mem_tbps", "peak_tflops"}; measured by aka.hardware.calibrate."""
    if device != "cuda":
        return None, None
    from aka.hardware import calibrate, ceilings_for
    name = torch.cuda.get_device_name()
    cal = calibrate(save=False, warmup=3, reps=10)
    out["calibration"] = {k: cal.get(k) for k in ("copy_tbps", "bf16_tflops", "fp8_tflops", "kernel_floor_us")}
    sheet, measured = ceilings_for(name, cal)
    as_dict = lambda c: {"mem_tbps": c.mem_tbps, "peak_tflops": c.peak_tflops, "source": c.source}  # noqa: E731
    return as_dict(sheet), (as_dict(measured) if measured else None)


def sol_us(cost, ceil: dict | None) -> float | None:
    if ceil is None:
        return None
    from aka.roofline import roofline
    return roofline(cost, ceil["mem_tbps"], ceil["peak_tflops"]).sol_us


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--deadline", type=float, default=90.0, help="wall seconds for the whole run (new configs stop MARGIN_S before)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--shapes", default=None, help="all (cuda default), small (cpu default) or ids 0,3")
    ap.add_argument("--kernel", type=Path, default=KERNEL)
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    left = lambda: args.deadline - (time.monotonic() - t_start)  # noqa: E731
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    if args.device == "cpu":
        from aka.evaluate.interp_fix import install
        install()
    from aka.roofline import cost_from_meta
    args.outdir.mkdir(parents=True, exist_ok=True)
    out_path = args.outdir / "moe_tune.json"
    meta = json.loads((OP_DIR / "meta.json").read_text())
    shapes = json.loads((OP_DIR / "shapes.json").read_text())
    sel = args.shapes or ("all" if args.device == "cuda" else "small")
    if sel == "small":
        shapes = meta["small_shapes"]
    elif sel == "all":
        # decode and prefill alternate, so a run cut off by the deadline has covered both
        dec = [s for s in shapes if rows_per_expert(shapes[s]["input_kwargs"]) <= 64]
        pre = [s for s in shapes if s not in dec]
        order = [s for pair in zip(pre, dec) for s in pair] + pre[len(dec):] + dec[len(pre):]
        shapes = {s: shapes[s] for s in order}
    else:
        known = {**shapes, **meta["small_shapes"]}
        bad = [s for s in sel.split(",") if s not in known]
        if bad:
            print(f"gpu_tune_moe: unknown shape id(s) {bad}; known: {sorted(known)}", file=sys.stderr)
            return 2
        shapes = {s: known[s] for s in sel.split(",")}
    tol = meta["tolerance"]
    ref_mod, inp_mod = load(OP_DIR / "reference.py", "_moe_ref"), load(OP_DIR / "input.py", "_moe_inp")
    kern = load(args.kernel, "_moe_kernel")
    import triton
    result = {"provenance": {"gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu (interpreter)",
                             "torch": torch.__version__, "triton": triton.__version__, "git_sha": git_sha(),
                             "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                             "kernel": str(args.kernel.relative_to(ROOT) if args.kernel.is_relative_to(ROOT) else args.kernel),
                             "timer": (f"CUDA events per call (aka eval's method for this op) and CUDA graph replay, "
                                       f"L2 flushed and a GPU head start before each, median of {REPS}"
                                       if args.device == "cuda" else "cpu wall clock of one interpreted call: not a time")},
              "errors": [], "shapes": []}

    def save():
        result["wall_s"] = round(time.monotonic() - t_start, 1)
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(out_path)

    try:
        sheet, measured = ceilings(torch, args.device, result)
    except Exception as exc:  # noqa: BLE001 - figures without the measured ceiling beat no figures
        sheet, measured = None, None
        result["errors"].append(f"calibrate: {type(exc).__name__}: {exc}")
    if args.device == "cuda" and sheet is None:
        from aka.hardware import ceilings_for
        try:
            sheet = {"mem_tbps": ceilings_for(torch.cuda.get_device_name())[0].mem_tbps,
                     "peak_tflops": ceilings_for(torch.cuda.get_device_name())[0].peak_tflops}
        except Exception as exc:  # noqa: BLE001
            result["errors"].append(f"datasheet: {exc}")
    result["ceilings"] = {"datasheet": sheet, "measured": measured}
    save()
    l2 = (int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 60 << 20))
          if args.device == "cuda" else 1 << 20)
    timer = Timer(torch, args.device, l2)
    model = ref_mod.Model()
    # Inputs and reference for every shape first, then the grid in two passes (FIRST_PASS configs
    # and the peer on every shape, then the rest), so a run the deadline cuts has tried every
    # shape; then the winners, each re-checked on a fresh draw.
    states = []
    for sid, spec in shapes.items():
        kw = dict(spec["input_kwargs"])
        rec = {"id": sid, "input_kwargs": kw, "configs": [], "best": None, "peer": None}
        result["shapes"].append(rec)
        cost = cost_from_meta(meta["cost"], {**{"ep_size": 1}, **kw}, None)
        rec["sol_us_datasheet"], rec["sol_us_measured"] = sol_us(cost, sheet), sol_us(cost, measured)
        st = {"rec": rec, "kw": kw, "inputs": None, "want": None}
        states.append(st)
        if left() < MARGIN_S:
            rec["skipped"] = "deadline"
            continue
        try:
            torch.manual_seed(1000 + len(states))
            st["inputs"] = inp_mod._make_inputs(**kw, device=args.device)
            with torch.no_grad():
                st["want"] = model(**st["inputs"])
        except Exception as exc:  # noqa: BLE001
            rec["error"] = f"inputs/reference: {type(exc).__name__}: {exc}"
            st["inputs"] = None

    def fractions(rec, us):
        return {"sol_fraction": rec["sol_us_datasheet"] / us if rec["sol_us_datasheet"] and us else None,
                "sol_fraction_measured": rec["sol_us_measured"] / us if rec["sol_us_measured"] and us else None}

    def timed(st, fn):
        with torch.no_grad():
            times, got = timer(fn)
        return {**check(got, st["want"], tol), **times, **fractions(st["rec"], times["time_us"])}

    for first in (True, False):
        for st in states:
            rec, kw, inputs = st["rec"], st["kw"], st["inputs"]
            if inputs is None:
                continue
            grid = grid_for(kw, args.device)
            for cfg in (grid[:FIRST_PASS] if first else grid[FIRST_PASS:]):
                if left() < MARGIN_S:
                    rec["skipped"] = "deadline (some configs)"
                    break
                try:
                    row = {"config": cfg, **timed(st, lambda: kern.moe_forward(**inputs, cfg=cfg))}
                except Exception as exc:  # noqa: BLE001 - one failing config must not stop the grid
                    row = {"config": cfg, "ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
                rec["configs"].append(row)
            peer = grouped_mm_peer(torch, local_only=kw.get("ep_size", 1) > 1)
            if first and peer is not None and left() > MARGIN_S / 2:
                head = {"impl": "torch._grouped_mm", "local_only": kw.get("ep_size", 1) > 1}
                try:
                    rec["peer"] = {**head, **timed(st, lambda: peer(**inputs))}
                except Exception as exc:  # noqa: BLE001
                    rec["peer"] = {**head, "ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
            save()

    for st in states:
        rec, kw = st["rec"], st["kw"]
        st["inputs"] = st["want"] = None            # the fresh draw needs the memory
        if args.device == "cuda":
            torch.cuda.empty_cache()
        passing = [r for r in rec["configs"] if r.get("ok")]
        if not passing:
            continue
        best = min(passing, key=lambda r: r["time_us"])
        if left() < 1:
            rec["error"] = "deadline before the winner's re-check: not bakeable"
            continue
        try:                                        # the winner once more, on a fresh draw
            torch.manual_seed(5000 + int(rec["id"].lstrip("s")))
            fresh = inp_mod._make_inputs(**kw, device=args.device)
            with torch.no_grad():
                recheck = check(kern.moe_forward(**fresh, cfg=best["config"]), model(**fresh), tol)
            fresh = None
        except Exception as exc:  # noqa: BLE001
            recheck = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        rec["best"] = dict(best, recheck=recheck) if recheck.get("ok") else None
        if not recheck.get("ok"):
            rec["error"] = f"winner failed on a fresh draw: {recheck}"
        save()
    save()
    print_table(result)
    return 0


def print_table(result: dict) -> None:
    f = lambda v, spec=".3f": "-" if v is None else format(v, spec)  # noqa: E731
    print(f"\n{result['provenance']['gpu']} · torch {result['provenance']['torch']} · triton "
          f"{result['provenance']['triton']} · {result['provenance']['timer']} · wall {result.get('wall_s')} s")
    print("| shape | T | E | rows/expert | best config | events µs | graph µs | of datasheet | of measured | "
          "grouped_mm µs | of measured | ×peer |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    fracs = []
    for r in result["shapes"]:
        kw, b, p = r["input_kwargs"], r.get("best") or {}, r.get("peer") or {}
        c = b.get("config") or {}
        name = (f"BM{c['BM']} BN{c['BN']}/{c['BN2']} BK{c['BK']} w{c['num_warps']} s{c['num_stages']} "
                f"{'atomic' if c['COMBINE'] else 'slots'} sk{c['SPLIT_K']}{' persist' if c['PERSIST'] else ''}"
                f"{' tma' if c.get('USE_TMA') else ''}{' tma-act' if c.get('TMA_ACT') else ''}"
                f"{' gather-x' if c.get('GATHER_X') else ''}"
                if c else (r.get("error") or r.get("skipped") or "no passing config")[:60])
        pok = p if p.get("ok") else {}
        vs = pok["time_us"] / b["time_us"] if b.get("time_us") and pok.get("time_us") else None
        if b.get("sol_fraction_measured"):
            fracs.append(b["sol_fraction_measured"])
        print(f"| {r['id']} | {kw['num_tokens']} | {kw['num_experts']} | {rows_per_expert(kw):.0f} | {name} | "
              f"{f(b.get('time_us'), '.1f')} | {f(b.get('graph_us'), '.1f')} | {f(b.get('sol_fraction'))} | "
              f"{f(b.get('sol_fraction_measured'))} | {f(pok.get('time_us'), '.1f')} | "
              f"{f(pok.get('sol_fraction_measured'))} | {f(vs, '.2f')} |")
    if fracs:
        print(f"median of the measured ceiling over {len(fracs)} shapes (events times): {statistics.median(fracs):.3f}")
    for e in result["errors"]:
        print("error:", e)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - say what killed the run; the JSON so far is on disk
        traceback.print_exc()
        sys.exit(1)
