"""The offline proposer over several benchmark operators, against eager, torch.compile and the
best knowledge-base kernel with its default parameters (the agent's no-LLM baseline), and the
knowledge base's own table: how close its best kernel per op gets to the measured ceiling.

    python experiments/offline_sweep.py --ops rms_norm,silu_and_mul,... --iters 6 --jobs 6 --out DIR

For each op: every knowledge-base kernel of the op untuned (defaults) on all shapes, then
`aka optimize op=<op> shape=all model=offline iters=N n=K` in its own process. Objectives are the
importance-weighted geomean of sol_fraction over the op's shapes (aka/objective.py); eager
and compile get the same aggregate from the times the harness measured for the same shapes.
With --jobs > 1 several ops run at once: their checks share the GPU and their timings take turns
under the harness's GPU lock (aka/evaluate/gpulock.py), so no timed region overlaps another.

The untuned side comes from the kernels' recorded H200 results (`aka kb verify --device cuda`,
run here for kernels that lack current ones). Writes DIR/offline_sweep.{md,json} and
DIR/kb_best.md (aka/kb/best.py: per op, the best kernel's fraction of the *measured* ceiling on
the large shapes and its objective against torch.compile's). Results are written after every op,
so a run cut short keeps what finished. Without a GPU it refuses: there is nothing to measure.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def kb_untuned(op: str, log) -> dict:
    """The knowledge base's kernels for `op` with their default parameters: their recorded H200
    results (`aka kb verify --device cuda`), evaluated first where missing or stale."""
    from aka.kb.best import best_table
    from aka.kb.verify import verify
    from aka.problem import REPO_ROOT
    t0 = time.time()
    root = REPO_ROOT / "knowledge_base"
    done = verify(root, "cuda", op=op)
    log(f"{op}: knowledge-base kernels: " + ", ".join(f"{p.stem} {s}" for p, s in done))
    best = next((r for r in best_table(root, "cuda") if r["op"] == op), None)
    return {"op": op, "eager": best and best["eager"], "compile": best and best["compile"],
            "best_kb_untuned": best and best["objective"], "best_kb_kernel": best and best["kernel"], "kb": best,
            "offline_tuned": None, "optimize_rc": None, "kb_wall_s": round(time.time() - t0, 1)}


def tune(op: str, a, out: Path, log) -> dict:
    """`aka optimize model=offline` on all the op's shapes, in its own process."""
    t0 = time.time()
    run_id = f"sweep-{op}"
    if (out / "runs" / run_id / "config.yaml").exists():
        # A sweep cut short (a device call's deadline) and carried back: continue that run, its
        # wall budget and iterations counting what it already spent.
        cmd = [sys.executable, "-m", "aka.cli", "optimize", f"resume={run_id}", f"runs_dir={out / 'runs'}",
               f"iters={a.iters}", "live=off"]
        log(f"{op}: resuming {run_id}")
    else:
        cmd = [sys.executable, "-m", "aka.cli", "optimize", f"op={op}", "shape=all", "model=offline",
               f"iters={a.iters}", f"n={a.n}", f"runs_dir={out / 'runs'}", f"run_id={run_id}", "live=off"]
    if a.wall_s:
        cmd.append(f"budget.max_wall_s={a.wall_s}")
    with open(out / f"optimize-{op}.log", "a") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO))).returncode
    best = out / "runs" / run_id / "best.json"
    tuned = (json.loads(best.read_text()).get("score") or {}).get("value") if best.exists() else None
    log(f"{op}: offline proposer objective {tuned} (rc {rc}), {time.time() - t0:.0f} s")
    return {"offline_tuned": tuned, "optimize_rc": rc, "tune_wall_s": round(time.time() - t0, 1)}


def write_tables(rows: list[dict], out: Path, prov: str) -> None:
    from aka.kb.best import markdown
    from aka.util import fmt
    rows = sorted(rows, key=lambda r: r["op"])
    (out / "offline_sweep.json").write_text(json.dumps(rows, indent=1))
    lines = ["| op | eager | torch.compile | best KB kernel, untuned | offline proposer | proposer / compile |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("optimize_rc") is None:
            continue
        ratio = r["offline_tuned"] / r["compile"] if r.get("offline_tuned") and r.get("compile") else None
        lines.append(f"| {r['op']} | {fmt(r.get('eager'), '.3f')} | {fmt(r.get('compile'), '.3f')} "
                     f"| {fmt(r.get('best_kb_untuned'), '.3f')} ({r.get('best_kb_kernel')}) "
                     f"| {fmt(r.get('offline_tuned'), '.3f')} | {fmt(ratio, '.2f')} |")
    (out / "offline_sweep.md").write_text(
        "# Offline proposer sweep\n\n" + prov + "\n\nObjective: importance-weighted geomean of sol_fraction "
        "(datasheet roofline) over all the op's shapes, cold L2. Produced by experiments/offline_sweep.py.\n\n"
        + "\n".join(lines) + "\n")
    (out / "kb_best.md").write_text(markdown([r["kb"] for r in rows if r.get("kb")], prov))


def prior_rows(out: Path) -> dict[str, dict]:
    """The rows an earlier invocation wrote into the same DIR (a sweep carried across device calls,
    perhaps over other ops), by op: a run updates the ops it covers and keeps the others' rows."""
    f = out / "offline_sweep.json"
    return {r["op"]: r for r in json.loads(f.read_text())} if f.exists() else {}


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

    by_op = prior_rows(out)
    rows[:] = list(by_op.values())

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
