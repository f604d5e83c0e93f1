"""Issue 17's figures: the same work on one GPU and on every GPU of the host.

    python scripts/scaling_report.py [--bench RUN_1 [RUN_N]] [--convert LIB_1 [LIB_N]] [--noise 0.05] [--out F.md]

--bench: two `aka bench run` directories over the same implementations, ops and shapes, the first
with `--gpus 0`, the second with `--gpus all` (run.json's invocation segments name the GPUs). --convert: two `aka convert`
libraries of the same suite, `gpus=0` and all GPUs (their batch.jsonl: every job's wall time,
finish time and worker). For each pair: wall time (bench: the run's invocation segments; convert:
the union of the jobs' start-to-end intervals, so time between device calls is not counted), evaluations (bench: (impl, op) evaluations; convert: jobs) per
hour, and the scaling efficiency T_1 / (N x T_N). For bench runs also whether per-shape timings
taken on the other GPUs agree with GPU 0's within the noise: per GPU of the N-GPU run, the ratio
time_N / time_1 over the (impl, op, shape) cases both timed: median, the share within
1 +- noise (default 5%, the timing tests' bound), the worst. Given only the one-GPU run of a pair
(a host with one GPU: the half issue 17 asks for until a multi-GPU machine is lent), its row is
reported and the N-GPU row says it was not run.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def bench_run(d: Path) -> dict:
    meta = json.loads((d / "run.json").read_text())
    rows = [json.loads(x) for x in (d / "records.jsonl").read_text().splitlines() if x.strip()]
    wall = sum(s.get("wall_s") or 0.0 for s in meta.get("segments", []))
    evals = {(r["impl"], r["op"]) for r in rows}
    used = [s["gpus"] for s in meta.get("segments", []) if s.get("gpus")]   # each invocation's --gpus
    gpus = (used[-1] if used else None) or sorted({str(r["gpu_index"]) for r in rows
                                                   if r.get("gpu_index") is not None}) or ["?"]
    return {"dir": str(d), "wall_s": wall, "evals": len(evals), "cases": len(rows), "gpus": gpus, "rows": rows,
            "gpu": next((r.get("gpu") for r in rows if r.get("gpu")), None)}


def convert_lib(d: Path) -> dict:
    jobs = [json.loads(x) for x in (d / "batch.jsonl").read_text().splitlines() if x.strip()]
    ends, starts, workers = [], [], set()
    for j in jobs:
        end = dt.datetime.fromisoformat(j["at"]).timestamp()
        w = float(j.get("wall_s") or 0.0)
        ends.append(end)
        starts.append(end - w)
        workers.add(str(j.get("worker", "")).rsplit("cuda=", 1)[-1])
    # the union of the jobs' intervals: a library finished over several device calls is not charged
    # the hours between them
    wall, cur = 0.0, None
    for a, b in sorted(zip(starts, ends)):
        if cur is None or a > cur[1]:
            if cur is not None:
                wall += cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    if cur is not None:
        wall += cur[1] - cur[0]
    return {"dir": str(d), "wall_s": wall, "evals": len(jobs), "gpus": sorted(workers - {""}) or ["?"]}


def scaling_lines(kind: str, one: dict, many: dict | None) -> list[str]:
    per_h = lambda r: r["evals"] / r["wall_s"] * 3600 if r["wall_s"] else float("nan")  # noqa: E731
    first = f"| {kind} | 1 ({','.join(one['gpus'])}) | {one['wall_s']:.0f} | {one['evals']} | {per_h(one):.0f} | - |"
    if many is None:
        return [first, f"| {kind} | N | not run | - | - | - |"]
    n = len(many["gpus"])
    eff = one["wall_s"] / (n * many["wall_s"]) if many["wall_s"] else float("nan")
    return [first, f"| {kind} | {n} ({','.join(many['gpus'])}) | {many['wall_s']:.0f} | {many['evals']} | "
                   f"{per_h(many):.0f} | {eff:.2f} |"]


def agreement(one: dict, many: dict, noise: float) -> list[str]:
    base = {(r["impl"], r["op"], r["shape"]): r["time_us"] for r in one["rows"] if r.get("time_us")}
    per_gpu: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for r in many["rows"]:
        k = (r["impl"], r["op"], r["shape"])
        if r.get("time_us") and k in base:
            per_gpu[str(r.get("gpu_index"))].append((r["time_us"] / base[k], f"{r['op']} {r['shape']}"))
    lines = ["| GPU of the N-GPU run | cases | median time_N / time_1 | within noise | worst |", "|---|---|---|---|---|"]
    for g in sorted(per_gpu):
        rs = per_gpu[g]
        worst = max(rs, key=lambda x: abs(x[0] - 1))
        within = sum(abs(x - 1) <= noise for x, _ in rs) / len(rs)
        lines.append(f"| {g} | {len(rs)} | {statistics.median(x for x, _ in rs):.3f} | {within:.0%} | "
                     f"{worst[0]:.3f} ({worst[1]}) |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", nargs="+", metavar="RUN", help="RUN_1 [RUN_N]")
    ap.add_argument("--convert", nargs="+", metavar="LIB", help="LIB_1 [LIB_N]")
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if not (a.bench or a.convert):
        ap.error("give --bench and/or --convert")
    for name, pair in (("--bench", a.bench), ("--convert", a.convert)):
        if pair and len(pair) > 2:
            ap.error(f"{name} takes the one-GPU run and, optionally, the N-GPU run")
    lines = ["# One GPU against every GPU of the host", "",
             "Produced by `scripts/scaling_report.py`. Efficiency: T_1 / (N x T_N).", "",
             "| work | GPUs | wall s | evaluations | per hour | efficiency |", "|---|---|---|---|---|---|"]
    extra = []
    try:
        if a.bench:
            one = bench_run(Path(a.bench[0]))
            many = bench_run(Path(a.bench[1])) if len(a.bench) == 2 else None
            lines += scaling_lines("aka bench run", one, many)
            if many is not None:
                extra = ["", f"Per-shape timings on each GPU against GPU {one['gpus'][0]}'s (noise bound "
                         f"{a.noise:.0%}; GPU {one.get('gpu') or '?'}):", ""] + agreement(one, many, a.noise)
            else:
                extra = ["", f"GPU: {one.get('gpu') or '?'}. The N-GPU runs need a host with several GPUs."]
        if a.convert:
            lines += scaling_lines("aka convert", convert_lib(Path(a.convert[0])),
                                   convert_lib(Path(a.convert[1])) if len(a.convert) == 2 else None)
    except (OSError, KeyError, ValueError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    text = "\n".join(lines + extra) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
