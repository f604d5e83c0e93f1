"""Which ops a per-shape dispatch kernel would help, from the knowledge base's recorded verdicts.

    python scripts/dispatch_oracle.py [--gpu H200] [--records results/kb] [--min-gain 0.01] [--out FILE]

For every op with two or more kernels holding a current, passing, all-shape verdict on the GPU: the
best single kernel's objective (what `aka kb best` ranks by), the objective of taking, shape by
shape, the fastest of those kernels (an oracle dispatch), which kernel that is per shape, and the
minimum over large shapes of torch.compile's time over each (the knowledge base's "faster than
compile at large shapes"). The records come from different device calls (2-7% apart between calls
on the H200), so the oracle is an upper bound that favours noise; a dispatch kernel built from it
is a prediction for `aka kb verify` to check, not a result.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aka.kb.best import scan, summarize  # noqa: E402
from aka.problem import load_problem  # noqa: E402
from aka.roofline import LARGE_SOL_US  # noqa: E402


def oracle(entries: list[tuple[str, dict]], weights: dict[str, float]) -> dict:
    """entries: (kernel name, verdict) over the same shapes. The per-shape fastest's summary, and
    which kernel that is per shape id."""
    by_id: dict[str, list[tuple[str, dict]]] = {}
    for name, e in entries:
        for s in e["shapes"]:
            if s.get("time_us"):
                by_id.setdefault(str(s["id"]), []).append((name, s))
    picks, shapes = {}, []
    for sid, cands in by_id.items():
        name, s = min(cands, key=lambda t: t[1]["time_us"])
        picks[sid] = name
        shapes.append(s)
    return {"summary": summarize(shapes, weights), "picks": picks}


def table(root: Path, gpu: str, min_gain: float) -> str:
    by_op: dict[str, list[tuple[str, dict]]] = {}
    for v in scan(root, "cuda", gpu):
        if v.counts:
            by_op.setdefault(v.op, []).append((v.path.stem, v.entry))
    lines = [f"Per-shape oracle dispatch over the kernels' {gpu} verdicts (`scripts/dispatch_oracle.py --gpu {gpu} "
             f"--min-gain {min_gain:g}`; ops whose oracle gains less are left out). Records from different calls: "
             "an upper bound that favours noise, a prediction for `aka kb verify` to check.",
             "", "| op | kernels | best single (objective, x compile large min) | oracle (objective, x compile large min) "
             "| gain | per shape (id: kernel), large shapes in bold |", "|---|---|---|---|---|---|"]
    for op, entries in sorted(by_op.items()):
        n = max(len(e["shapes"]) for _, e in entries)
        entries = [(k, e) for k, e in entries if len(e["shapes"]) == n]   # the same (all-shape) set
        if len(entries) < 2:
            continue
        prob = load_problem(op)
        weights = {s.id: s.weight for s in prob.shapes.values()}
        singles = sorted(((k, summarize(e["shapes"], weights)) for k, e in entries),
                         key=lambda t: t[1]["objective"] or 0, reverse=True)
        best_k, best = singles[0]
        o = oracle(entries, weights)
        gain = (o["summary"]["objective"] or 0) / (best["objective"] or 1) - 1
        if gain < min_gain:
            continue
        large = {str(s.get("id")) for _, e in entries for s in e["shapes"] if (s.get("sol_us") or 0) >= LARGE_SOL_US}
        picks = ", ".join((f"**{sid}**" if sid in large else sid) + f": {k}"
                          for sid, k in sorted(o["picks"].items(), key=lambda t: int(t[0]) if t[0].isdigit() else t[0]))

        def cell(s):
            m = s["large_vs_compile_min"]
            return f"{s['objective']:.3f}, " + (f"{m:.2f}" if m else "-")
        lines.append(f"| {op} | {len(entries)} | {best_k}: {cell(best)} | {cell(o['summary'])} | {gain:+.1%} | {picks} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="H200")
    ap.add_argument("--records", default=str(REPO / "knowledge_base"),
                    help="the knowledge base whose kernels' records are read (default: the bundled one)")
    ap.add_argument("--min-gain", type=float, default=0.0)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    text = table(Path(a.records), a.gpu, a.min_gain)
    if a.out:
        Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
