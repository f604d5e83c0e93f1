"""The candidate folder for a whole-suite run of aka's best kernel per op.

    python scripts/suite_plan.py CAND_DIR PLAN.json [--ops a,b] [--overrides scripts/suite_kernels.json]

For every operator of the bundled benchmark: the kernel `scripts/suite_kernels.json` names (with its
reason), else the one `aka kb best` ranks first from the current H200 results, else the op's first
kernel file, copied to CAND_DIR/<op>/<kernel>.py (what `aka bench run --impl CAND_DIR` reads; its
records then name the kernel). PLAN.json says which kernel each op got and why. Then
`aka bench run --impl CAND_DIR --shapes all` measures the suite score of the best kernel per op
(issue 21's goal): scripts/gpu_suite.sh does that on the device, resumably.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def plan(ops: list[str], overrides: dict, best: dict) -> dict:
    """Per op the override when its file exists, else peer_plan's choice (kb best, else the first file)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from peer_plan import kernel_choice
    out = {}
    for op in ops:
        o = overrides.get(op)
        if o and (ROOT / "knowledge_base" / "kernels" / op / f"{o['kernel']}.py").is_file():
            out[op] = {"kernel": o["kernel"], "why": o["why"]}
        else:
            path, why = kernel_choice(op, best)
            out[op] = {"kernel": path.stem if path else None, "why": why}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cand_dir")
    ap.add_argument("plan")
    ap.add_argument("--ops", default=None)
    ap.add_argument("--overrides", default=str(ROOT / "scripts" / "suite_kernels.json"))
    a = ap.parse_args(argv)
    from aka.bench.suite import load_suite
    from aka.kb.best import best_table
    suite_ops = [p.name for p in load_suite().problems]
    ops = a.ops.split(",") if a.ops else suite_ops
    bad = [o for o in ops if o not in suite_ops]
    if bad:
        print(f"error: not in the bundled suite: {bad}", file=sys.stderr)
        return 2
    overrides = {k: v for k, v in json.loads(Path(a.overrides).read_text()).items() if not k.startswith("_")}
    # one GPU's ranking: a kernel last verified on another GPU is not compared with H200 figures
    best = {r["op"]: r["kernel"] for r in best_table(ROOT / "knowledge_base", "cuda", "H200")}
    p = plan(ops, overrides, best)
    cand = Path(a.cand_dir)
    for op, e in p.items():
        if e["kernel"] is None:
            print(f"suite_plan: {op}: {e['why']}", file=sys.stderr)
            continue
        (cand / op).mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "knowledge_base" / "kernels" / op / f"{e['kernel']}.py", cand / op / f"{e['kernel']}.py")
    Path(a.plan).write_text(json.dumps(p, indent=2) + "\n")
    for op, e in p.items():
        print(f"{op:32} {e['kernel']}  ({e['why'][:70]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
