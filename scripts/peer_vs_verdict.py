#!/usr/bin/env python
"""A peer timed without its kernel (a `gpu_peers.sh` run cut off before the kernel's turn) against the
op's best kernel's kb verdict on the same GPU model: peer time / kernel time per shape. The two come
from different runs (another machine, another day), so the table says it is indicative only; the
yardstick a speed claim needs is the same run (`aka bench peers`). With --against, the peer's times
in two runs set side by side: how far one GPU model's figures move between machines and days.

    python scripts/peer_vs_verdict.py RUN_DIR [RUN_DIR ...] --gpu H100 [--against RUN_DIR ...] [--out F.md]

RUN_DIR: `aka bench run` output folders (records.jsonl). The kernel is the op's row of
`aka kb best --gpu GPU` (current, passing verdicts only).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aka.bench.run import load_records  # noqa: E402
from aka.evaluate.stats import geomean  # noqa: E402
from aka.kb.best import best_table, scan  # noqa: E402
from aka.problem import REPO_ROOT  # noqa: E402


def peer_times(dirs: list[Path]) -> dict[str, dict[str, float]]:
    """op -> shape -> the peer's time (correct, timed records only)."""
    out: dict[str, dict[str, float]] = {}
    for d in dirs:
        for r in load_records(d):
            if r.get("impl") == "peer" and r.get("correct") and r.get("time_us"):
                out.setdefault(r["op"], {})[str(r["shape"])] = float(r["time_us"])
    return out


def compare(peers: dict[str, dict[str, float]], kb: Path, gpu: str) -> list[dict]:
    verdicts = scan(kb, "cuda", gpu)
    rows = {r["op"]: r for r in best_table(kb, "cuda", gpu, verdicts)}
    out = []
    for op, times in sorted(peers.items()):
        row = rows.get(op)
        if row is None:
            out.append({"op": op, "kernel": None})
            continue
        (entry,) = [v.entry for v in verdicts if v.op == op and v.path.stem == row["kernel"]]
        kt = {str(s["id"]): s["time_us"] for s in entry["shapes"] if s.get("time_us")}
        ratios = {sid: t / kt[sid] for sid, t in times.items() if sid in kt}
        least = min(ratios, key=ratios.get) if ratios else None
        out.append({"op": op, "kernel": row["kernel"], "date": str(row.get("date") or "")[:10],
                    "n": len(ratios), "geomean": geomean(list(ratios.values())) if ratios else None,
                    "least": ratios.get(least) if least else None, "least_shape": least})
    return out


def drift(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> list[dict]:
    """Per op, the peer's time in runs `a` over its time in runs `b`, on the shapes both have."""
    out = []
    for op in sorted(set(a) & set(b)):
        r = [a[op][s] / b[op][s] for s in a[op] if s in b[op]]
        if r:
            out.append({"op": op, "n": len(r), "geomean": geomean(r), "min": min(r), "max": max(r)})
    return out


def markdown(rows: list[dict], drifts: list[dict] | None, gpu: str, runs: str, against: str) -> str:
    lines = [f"Peer (timed in {runs}) against the op's best kernel's kb verdict on {gpu} (`aka kb best --gpu {gpu}`):",
             "peer time / kernel time per shape. **Indicative only**: the two were timed in different runs;",
             "a speed claim needs them in one (`aka bench peers`). Written by `scripts/peer_vs_verdict.py`.", "",
             "| op | kernel (verdict date) | shapes | peer / kernel, geomean | least (shape) |", "|---|---|---|---|---|"]
    for r in rows:
        if r["kernel"] is None:
            lines.append(f"| {r['op']} | no current verdict on {gpu} | - | - | - |")
        elif not r["n"]:
            lines.append(f"| {r['op']} | {r['kernel']} ({r['date']}) | 0 | - | - |")
        else:
            lines.append(f"| {r['op']} | {r['kernel']} ({r['date']}) | {r['n']} | {r['geomean']:.2f}x | "
                         f"{r['least']:.2f}x ({r['least_shape']}) |")
    if drifts is not None:
        lines += ["", f"The peer's time in these runs over its time in {against} (same shapes):", "",
                  "| op | shapes | geomean | range |", "|---|---|---|---|"]
        lines += [f"| {d['op']} | {d['n']} | {d['geomean']:.3f} | {d['min']:.3f}-{d['max']:.3f} |" for d in drifts]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--gpu", required=True, help="substring of the GPU name the verdicts were recorded on, e.g. H100")
    ap.add_argument("--against", nargs="*", type=Path, default=None, help="earlier runs of the same peers")
    ap.add_argument("--kb", type=Path, default=REPO_ROOT / "knowledge_base",
                    help="the knowledge base whose kernels' verdicts (../results/kb) are read")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    peers = peer_times(args.runs)
    if not peers:
        print(f"no timed peer records in {', '.join(map(str, args.runs))}", file=sys.stderr)
        return 2
    rows = compare(peers, args.kb, args.gpu)
    drifts = drift(peers, peer_times(args.against)) if args.against else None
    md = markdown(rows, drifts, args.gpu, ", ".join(map(str, args.runs)),
                  ", ".join(map(str, args.against or [])))
    if args.out:
        args.out.write_text(md)
    print(md, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
