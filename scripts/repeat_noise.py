"""How far two `aka kb verify` runs of the same kernels differ: between-run noise, from their records.

    python scripts/repeat_noise.py A=DIR B=DIR [--out FILE]

Each DIR holds results/kb/kernels/<op>/<kernel>.results.json (a verify's scratch copy, as
collect_kbverify.py reads). For every kernel both runs passed with the same source on the same GPU
model, per shape: B's median time over A's, and whether the two runs' 95% CIs overlap; the same for
torch.compile's and eager's times where both runs measured them (not taken from one cache). Prints
a markdown summary: per kernel the geomean ratio and its range, then over all shapes the median
and 90th percentile of |ratio - 1| and the share of shapes whose intervals are apart. A CI is one
run's; this says how much two runs differ, which is what a claimed speedup has to exceed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aka.evaluate.stats import geomean  # noqa: E402
from aka.roofline import LARGE_SOL_US  # noqa: E402


def _records(d: Path) -> dict[str, dict]:
    root = d / "results" / "kb" / "kernels"
    out = {}
    for p in sorted(root.glob("*/*.results.json")):
        e = json.loads(p.read_text()).get("devices", {}).get("cuda")
        if e and e.get("status") == "pass" and e.get("shapes"):
            out[f"{p.parent.name}/{p.name.removesuffix('.results.json')}"] = e
    return out


def _apart(a, b) -> bool | None:
    if not (a and b and len(a) == 2 and len(b) == 2):
        return None
    return a[1] < b[0] or b[1] < a[0]


def compare(a: dict[str, dict], b: dict[str, dict]) -> dict:
    """{kernel: [(shape id, key, ratio, apart, large)]} over the kernels both passed with one source and GPU."""
    keys = (("time_us", "time_ci_us"), ("compile_us", "compile_ci_us"), ("eager_us", None))
    out = {}
    for k in sorted(a.keys() & b.keys()):
        ea, eb = a[k], b[k]
        if ea.get("source_hash") != eb.get("source_hash") or ea.get("gpu") != eb.get("gpu"):
            continue
        sb = {str(s["id"]): s for s in eb["shapes"]}
        rows = []
        for s in ea["shapes"]:
            t = sb.get(str(s["id"]))
            if not t:
                continue
            for key, ci in keys:
                if s.get(key) and t.get(key):
                    rows.append((str(s["id"]), key, t[key] / s[key], _apart(s.get(ci), t.get(ci)) if ci else None,
                                 (s.get("sol_us") or 0) >= LARGE_SOL_US))
        out[k] = rows
    return out


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def markdown(rows: dict, la: str, lb: str) -> str:
    lines = [f"Between-run noise: {lb} over {la} (`scripts/repeat_noise.py`)", "",
             "| kernel | shapes | kernel time: geomean, min, max | compile: geomean | CIs apart (kernel) |",
             "|---|---|---|---|---|"]
    allk: dict[str, list] = {}
    for k, rs in rows.items():
        kt = [r for r in rs if r[1] == "time_us"]
        ct = [r for r in rs if r[1] == "compile_us"]
        for r in rs:
            allk.setdefault(r[1], []).append(r)
        if not kt:
            continue
        g = geomean([r[2] for r in kt])
        cg = f"{geomean([r[2] for r in ct]):.3f}" if ct else "-"
        apart = [r[3] for r in kt if r[3] is not None]
        lines.append(f"| {k} | {len(kt)} | {g:.3f}, {min(r[2] for r in kt):.3f}, {max(r[2] for r in kt):.3f} | {cg} | "
                     + (f"{sum(apart)} of {len(apart)}" if apart else "-") + " |")
    lines += ["", f"Large shapes: roofline time >= {LARGE_SOL_US:g} us (launch latency does not dominate).", "",
              "| times of | shapes | median abs(ratio - 1) | 90th percentile | max | CIs apart |", "|---|---|---|---|---|---|"]
    for key, every in allk.items():
        for which, rs in (("all", every), ("large", [r for r in every if r[4]])):
            if not rs:
                continue
            dev = [abs(r[2] - 1) for r in rs]
            apart = [r[3] for r in rs if r[3] is not None]
            lines.append(f"| {key.removesuffix('_us')}, {which} | {len(rs)} | {statistics.median(dev):.1%} | "
                         f"{_q(dev, 0.9):.1%} | {max(dev):.1%} | " + (f"{sum(apart)} of {len(apart)}" if apart else "-") + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs=2, help="LABEL=DIR, twice")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    (la, da), (lb, db) = (r.partition("=")[::2] for r in a.runs)
    text = markdown(compare(_records(Path(da)), _records(Path(db))), la, lb)
    if a.out:
        Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
