"""One op's knowledge-base kernels side by side on one card, from their `aka kb verify` records.

    python scripts/kernels_side_by_side.py OP KERNEL[,KERNEL...] [--records DIR] [--base KERNEL] [--gpu NAME]

Reads DIR/kernels/OP/<kernel>.results.json (default DIR: results/kb; a verify's scratch copy works
too) and prints a markdown table: per shape, each kernel's median time, the base kernel's time
over each other kernel's (above 1: faster than the base), torch.compile and eager from the first
kernel's record, and each kernel's fraction of the datasheet roofline; then the geomean of each
ratio. Refuses records of different GPU models: times from two cards are not compared. --gpu
(e.g. H100): each record's verdict on that GPU model (a record keeps one per model:
aka.kb.verify.cuda_entry), else its primary one.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aka.evaluate.stats import geomean  # noqa: E402
from aka.kb.verify import cuda_entry  # noqa: E402


def _geomean(xs: list[float | None]) -> float:
    """The project's geomean over the shapes that have the ratio (nan when none does)."""
    xs = [x for x in xs if x]
    return geomean(xs) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("op")
    ap.add_argument("kernels", help="comma list; the first is the one compared")
    ap.add_argument("--records", default=str(REPO / "results" / "kb"))
    ap.add_argument("--base", help="the kernel the others are compared with (default: the second)")
    ap.add_argument("--gpu", help="each record's verdict on this GPU model (a substring of its name, e.g. H100)")
    a = ap.parse_args(argv)
    names = a.kernels.split(",")
    base = a.base or (names[1] if len(names) > 1 else names[0])
    recs = {}
    for n in names:
        p = Path(a.records) / "kernels" / a.op / f"{n}.results.json"
        if not p.is_file():
            raise SystemExit(f"{p}: no such record (has `aka kb verify` run this kernel?)")
        cuda = cuda_entry(json.loads(p.read_text()), a.gpu)
        if not cuda:
            raise SystemExit(f"{p}: no GPU record" + (f" of a GPU named like {a.gpu!r}" if a.gpu else ""))
        recs[n] = cuda
    gpus = {r.get("gpu") for r in recs.values()}
    if len(gpus) != 1:
        raise SystemExit(f"records from different GPUs ({', '.join(map(str, gpus))}): not comparable")
    first = recs[names[0]]
    shapes = {n: {s["id"]: s for s in r["shapes"]} for n, r in recs.items()}
    others = [n for n in names if n != base]
    print(f"{a.op} on {gpus.pop()}; sources " + ", ".join(f"{n} {r.get('git_sha')} {r.get('date', '')[:16]}"
                                                        for n, r in recs.items()))
    print()
    print("| shape | " + " | ".join(f"{n} us" for n in names) + " | "
          + " | ".join(f"{base} / {n}" for n in others) + " | compile us | eager us | "
          + " | ".join(f"{n} of roofline" for n in names) + " |")
    print("|" + "---|" * (1 + len(names) + len(others) + 2 + len(names)))
    ratios = {n: [] for n in others}
    vs_compile = {n: [] for n in names}
    for sid, s0 in shapes[names[0]].items():
        row = [s0.get("label") or sid]
        t = {n: (shapes[n].get(sid) or {}).get("time_us") for n in names}
        row += [f"{t[n]:.1f}" if t[n] else "-" for n in names]
        for n in others:
            r = t[base] / t[n] if t[base] and t[n] else None
            ratios[n].append(r)
            row.append(f"{r:.2f}" if r else "-")
        c, e = s0.get("compile_us"), s0.get("eager_us")
        for n in names:
            vs_compile[n].append(c / t[n] if c and t[n] else None)
        row += [f"{c:.1f}" if c else "-", f"{e:.1f}" if e else "-"]
        row += [f"{(shapes[n].get(sid) or {}).get('sol_fraction') or 0:.3f}" for n in names]
        print("| " + " | ".join(row) + " |")
    print()
    for n in others:
        print(f"- {base} / {n}, geomean over {sum(1 for r in ratios[n] if r)} shapes: {_geomean(ratios[n]):.2f}")
    for n in names:
        k = sum(1 for r in vs_compile[n] if r)
        if k:
            print(f"- compile / {n}, geomean over the {k} shapes compile was timed on: {_geomean(vs_compile[n]):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
