"""Fractions of the measured ceiling from `aka bench run` records, per op and implementation.

    python scripts/ceiling_fractions.py CALIBRATION.json RUN_DIR [RUN_DIR ...] [--out TABLE.md]

A bench record carries its shape's cost (bytes, FLOPs per dtype) and the datasheet fraction
(`sol_fraction`); issue 21's goals are stated against the *measured* ceiling, the roofline with
`aka hw calibrate`'s copy bandwidth and matmul rates (aka.hardware.ceilings_for: measured where
measured, other dtypes scaled by measured/datasheet bf16). This recomputes that roofline per
record from the calibration file given (one taken on the same GPU model, ideally in the same
device session) and prints per (op, implementation): shapes, the datasheet objective's geomean,
and over the large shapes (datasheet roofline >= LARGE_SOL_US) the median and minimum fraction
of the measured ceiling, and the peer ratio's geomean and minimum where the run timed a peer.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("calibration")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    from aka.hardware import ceilings_for
    from aka.roofline import LARGE_SOL_US, Cost, roofline
    cal = json.loads(Path(a.calibration).read_text())
    gpu = cal.get("gpu") or cal.get("provenance", {}).get("gpu")
    _, meas = ceilings_for(gpu, cal)
    if meas is None:
        print(f"error: {a.calibration} holds no copy bandwidth", file=sys.stderr)
        return 2
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for d in a.runs:
        path = Path(d) / "records.jsonl"
        if not path.is_file():
            print(f"error: no records.jsonl in {d}", file=sys.stderr)
            return 2
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r.get("time_us") and r.get("correct"):
                groups[(r["op"], r["impl"])].append(r)
    lines = [f"Fractions of the measured ceiling ({gpu}: copy {cal['copy_tbps']:.3f} TB/s, bf16 "
             f"{cal['bf16_tflops']:.0f} TFLOP/s, fp8 {cal.get('fp8_tflops') or float('nan'):.0f} TFLOP/s; "
             f"calibrated {cal.get('provenance', {}).get('date', '?')}), from {', '.join(a.runs)}; "
             f"large shapes: datasheet roofline >= {LARGE_SOL_US:.0f} us. Produced by `scripts/ceiling_fractions.py`.",
             "", "| op | impl | shapes | datasheet fraction, geomean | large shapes | of measured ceiling: median, min | "
             "vs peer: geomean, min |", "|---|---|---|---|---|---|---|"]
    for (op, impl), rs in sorted(groups.items()):
        if impl == "peer":
            continue
        rs.sort(key=lambda r: int(r["shape"]) if str(r["shape"]).isdigit() else str(r["shape"]))
        fr, large, peer = [], [], []
        for r in rs:
            fl = r.get("flops") or {}
            cost = Cost(flops=fl if isinstance(fl, dict) else {"bf16": float(fl)}, bytes=float(r.get("bytes") or 0),
                        source="record")
            f_meas = roofline(cost, meas.mem_tbps, meas.peak_tflops).sol_us / r["time_us"]
            if r.get("sol_fraction"):
                fr.append(r["sol_fraction"])
            if (r.get("sol_us") or 0) >= LARGE_SOL_US:
                large.append((f_meas, r["shape"]))
            if r.get("speedup_peer"):
                peer.append((r["speedup_peer"], r["shape"]))
        g = math.exp(sum(map(math.log, fr)) / len(fr)) if fr else None
        med = f"{statistics.median(f for f, _ in large):.3f}, {min(large)[0]:.3f} (shape {min(large)[1]})" if large else "-"
        pr = (f"{math.exp(sum(math.log(p) for p, _ in peer) / len(peer)):.2f}x, {min(peer)[0]:.2f}x (shape {min(peer)[1]})"
              if peer else "-")
        lines.append(f"| {op} | {impl} | {len(rs)} | {g:.3f} | {len(large)} | {med} | {pr} |" if g else
                     f"| {op} | {impl} | {len(rs)} | - | {len(large)} | {med} | {pr} |")
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
