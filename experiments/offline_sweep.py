"""The offline proposer over several benchmark operators, against eager, torch.compile and the
best knowledge-base kernel with its default parameters (issue: the agent's no-LLM baseline).

    python experiments/offline_sweep.py --ops rms_norm,silu_and_mul,... --iters 12 --out DIR

For each op: every knowledge-base kernel of the op evaluated untuned (defaults) on all shapes,
then `aka optimize op=<op> shape=all model=offline iters=N`; all objectives are the importance-
weighted geomean of sol_fraction over the op's shapes (aka/agent/objective.py), and eager and
compile get the same aggregate from the times the harness measured beside the candidate.
Writes DIR/offline_sweep.md and DIR/offline_sweep.json. On a machine without a GPU it refuses:
there is nothing to measure.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


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


def main() -> int:
    import torch

    from aka.agent.objective import score
    from aka.cli import main as aka_main
    from aka.evaluate.api import EvalConfig, evaluate
    from aka.problem import REPO_ROOT, load_problem

    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", required=True)
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("offline_sweep needs a GPU: objectives are sol_fractions", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for op in a.ops.split(","):
        prob = load_problem(op)
        weights = {s.id: s.weight for s in prob.shapes.values()}
        best_untuned, best_name, base = None, None, {}
        for k in sorted((REPO_ROOT / "knowledge_base" / "kernels" / op).glob("*.py")):
            res = evaluate(prob, k, config=EvalConfig(device="cuda"))
            sc = score(res, weights, "cuda")
            if sc.value is not None and (best_untuned is None or sc.value > best_untuned):
                best_untuned, best_name = sc.value, k.stem
                base = {w: baseline_objective(res, prob, w) for w in ("eager", "compile")}
        run_id = f"sweep-{op}"
        rc = aka_main(["optimize", f"op={op}", "shape=all", "model=offline", f"iters={a.iters}",
                       f"runs_dir={out / 'runs'}", f"run_id={run_id}", "live=off"])
        best = out / "runs" / run_id / "best.json"
        tuned = (json.loads(best.read_text()).get("score") or {}).get("value") if best.exists() else None
        rows.append({"op": op, "eager": base.get("eager"), "compile": base.get("compile"),
                     "best_kb_untuned": best_untuned, "best_kb_kernel": best_name, "offline_tuned": tuned,
                     "optimize_rc": rc})
        (out / "offline_sweep.json").write_text(json.dumps(rows, indent=1))
    f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    lines = ["| op | eager | torch.compile | best KB kernel, untuned | offline proposer |", "|---|---|---|---|---|"]
    lines += [f"| {r['op']} | {f(r['eager'])} | {f(r['compile'])} | {f(r['best_kb_untuned'])} ({r['best_kb_kernel']}) "
              f"| {f(r['offline_tuned'])} |" for r in rows]
    (out / "offline_sweep.md").write_text("Objective: weighted geomean of sol_fraction over all shapes.\n\n"
                                          + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
