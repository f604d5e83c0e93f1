"""The offline proposer over several benchmark operators, against eager, torch.compile and the
best knowledge-base kernel with its default parameters (the agent's no-LLM baseline), and the
knowledge base's own table: how close its best kernel per op gets to the measured ceiling.

    python experiments/offline_sweep.py --ops rms_norm,silu_and_mul,... --iters 6 --jobs 6 --out DIR

For each op: every knowledge-base kernel of the op evaluated untuned (defaults) on all shapes,
then `aka optimize op=<op> shape=all model=offline iters=N` in its own process. Objectives are the
importance-weighted geomean of sol_fraction over the op's shapes (aka/agent/objective.py); eager
and compile get the same aggregate from the times the harness measured for the same shapes.
With --jobs > 1 several ops run at once: their checks share the GPU and their timings take turns
under the harness's GPU lock (aka/evaluate/gpulock.py), so no timed region overlaps another.

Writes DIR/offline_sweep.{md,json} and DIR/kb_best.md (per op, the best untuned kernel's fraction
of the *measured* ceiling on the large shapes, those whose roofline time is >= 10 us, and its
weighted objective against torch.compile's). Results are written after every op, so a run cut
short keeps what finished. Without a GPU it refuses: there is nothing to measure.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
LARGE_SOL_US = 10.0  # "prefill-sized": the roofline time is well above launch latency


def baseline_objective(res, problem, which: str) -> float | None:
    from aka.evaluate.stats import geomean
    vals, ws = [], []
    for s in res.shapes:
        t = s.eager_us if which == "eager" else s.compile_us
        if not (t and s.sol_us):
            return None
        vals.append(s.sol_us / t)
        ws.append(problem.shapes[s.id].weight if s.id in problem.shapes else 1.0)
    return geomean(vals, ws) if vals else None


def shape_rows(res) -> list[dict]:
    keep = ("id", "label", "time_us", "sol_us", "sol_fraction", "sol_fraction_measured", "bound", "eager_us",
            "compile_us", "speedup_compile")
    return [{k: getattr(s, k, None) for k in keep} for s in res.shapes]


def kb_untuned(op: str, log) -> dict:
    """Every knowledge-base kernel of `op` with its default parameters, on all shapes."""
    from aka.agent.objective import score
    from aka.evaluate.api import EvalConfig, evaluate
    from aka.problem import REPO_ROOT, load_problem
    t0 = time.time()
    prob = load_problem(op)
    weights = {s.id: s.weight for s in prob.shapes.values()}
    best_untuned, best_name, base, best_rows, statuses = None, None, {}, [], {}
    for k in sorted((REPO_ROOT / "knowledge_base" / "kernels" / op).glob("*.py")):
        res = evaluate(prob, k, config=EvalConfig(device="cuda"))
        statuses[k.stem] = res.status
        sc = score(res, weights, "cuda")
        log(f"{op}: {k.stem} untuned: {res.status}, objective {sc.value}")
        if sc.value is not None and (best_untuned is None or sc.value > best_untuned):
            best_untuned, best_name, best_rows = sc.value, k.stem, shape_rows(res)
            base = {w: baseline_objective(res, prob, w) for w in ("eager", "compile")}
    return {"op": op, "eager": base.get("eager"), "compile": base.get("compile"), "best_kb_untuned": best_untuned,
            "best_kb_kernel": best_name, "kb_statuses": statuses, "best_kb_shapes": best_rows,
            "offline_tuned": None, "optimize_rc": None, "kb_wall_s": round(time.time() - t0, 1)}


def tune(op: str, a, out: Path, log) -> dict:
    """`aka optimize model=offline` on all the op's shapes, in its own process."""
    t0 = time.time()
    run_id = f"sweep-{op}"
    cmd = [sys.executable, "-m", "aka.cli", "optimize", f"op={op}", "shape=all", "model=offline",
           f"iters={a.iters}", f"n={a.n}", f"runs_dir={out / 'runs'}", f"run_id={run_id}", "live=off"]
    if a.wall_s:
        cmd.append(f"budget.max_wall_s={a.wall_s}")
    with open(out / f"optimize-{op}.log", "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO))).returncode
    best = out / "runs" / run_id / "best.json"
    tuned = (json.loads(best.read_text()).get("score") or {}).get("value") if best.exists() else None
    log(f"{op}: offline proposer objective {tuned} (rc {rc}), {time.time() - t0:.0f} s")
    return {"offline_tuned": tuned, "optimize_rc": rc, "tune_wall_s": round(time.time() - t0, 1)}


def _f(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def write_tables(rows: list[dict], out: Path, prov: str) -> None:
    rows = sorted(rows, key=lambda r: r.get("op"))
    (out / "offline_sweep.json").write_text(json.dumps(rows, indent=1))
    lines = ["| op | eager | torch.compile | best KB kernel, untuned | offline proposer | proposer / compile |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("optimize_rc") is None:
            continue
        ratio = r.get("offline_tuned") / r.get("compile") if r.get("offline_tuned") and r.get("compile") else None
        lines.append(f"| {r.get('op')} | {_f(r.get('eager'))} | {_f(r.get('compile'))} | {_f(r.get('best_kb_untuned'))} "
                     f"({r.get('best_kb_kernel')}) | {_f(r.get('offline_tuned'))} | {_f(ratio, '.2f')} |")
    (out / "offline_sweep.md").write_text(
        "# Offline proposer sweep\n\n" + prov + "\n\nObjective: importance-weighted geomean of sol_fraction "
        "(datasheet roofline) over all the op's shapes, cold L2. Produced by experiments/offline_sweep.py.\n\n"
        + "\n".join(lines) + "\n")
    kb = ["| op | best KB kernel | large shapes | fraction of measured ceiling on them (median, min) "
          "| objective / compile's | ≥ 0.85 and beats compile |", "|---|---|---|---|---|---|"]
    for r in rows:
        large = [s for s in r.get("best_kb_shapes", []) if (s.get("sol_us") or 0) >= LARGE_SOL_US
                 and s.get("sol_fraction_measured")]
        fr = [s["sol_fraction_measured"] for s in large]
        med = statistics.median(fr) if fr else None
        vs = r.get("best_kb_untuned") / r.get("compile") if r.get("best_kb_untuned") and r.get("compile") else None
        ok = med is not None and vs is not None and med >= 0.85 and vs > 1.0
        kb.append(f"| {r.get('op')} | {r.get('best_kb_kernel')} | {len(large)} | {_f(med, '.2f')}, {_f(min(fr) if fr else None, '.2f')} "
                  f"| {_f(vs, '.2f')} | {'yes' if ok else 'no'} |")
    (out / "kb_best.md").write_text(
        "# Best knowledge-base kernel per op on the H200\n\n" + prov + "\n\nLarge shapes: roofline time >= "
        f"{LARGE_SOL_US:.0f} us. Fraction of the measured ceiling: sol_fraction_measured (the roofline with "
        "`aka hw calibrate`'s copy bandwidth and matmul rates). Objective / compile's: the weighted geomean "
        "of sol_fraction over all shapes, kernel against torch.compile (> 1: faster on the weighted set).\n\n"
        + "\n".join(kb) + "\n")


def main() -> int:
    import torch
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", required=True)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--n", type=int, default=2, help="candidates per round (evaluated at once)")
    ap.add_argument("--jobs", type=int, default=1, help="ops at once (timings still take turns)")
    ap.add_argument("--wall-s", type=float, default=None, help="wall-clock budget of each op's optimize run")
    ap.add_argument("--tune-ops", default=None, help="ops the offline proposer tunes (default: all of --ops)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("offline_sweep needs a GPU: objectives are sol_fractions", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = (f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, iters {a.iters}, n {a.n}")
    lock = threading.Lock()
    rows: list[dict] = []

    def log(msg: str) -> None:
        with lock:
            print(msg, flush=True)

    by_op: dict[str, dict] = {}

    def guarded(fn, op: str) -> None:
        try:
            row = fn(op)
        except Exception as e:  # noqa: BLE001 - one op's failure must not lose the others
            log(f"{op}: {fn.__name__} failed: {type(e).__name__}: {e}")
            return
        with lock:
            by_op.setdefault(op, {"op": op}).update(row)
            rows[:] = list(by_op.values())
            write_tables(rows, out, prov)

    ops = a.ops.split(",")
    tune_ops = a.tune_ops.split(",") if a.tune_ops else ops
    # Phase 1: the knowledge base untuned (baselines are measured here, then cached); phase 2: tuning.
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        list(pool.map(lambda op: guarded(lambda o: kb_untuned(o, log), op), ops))
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        list(pool.map(lambda op: guarded(lambda o: tune(o, a, out, log), op), tune_ops))
    print((out / "offline_sweep.md").read_text() if rows else "no op finished")
    print((out / "kb_best.md").read_text() if rows else "")
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
