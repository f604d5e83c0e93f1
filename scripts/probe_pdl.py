"""Programmatic dependent launch on the GPU in hand: correct, and what it saves between two short kernels.

    python scripts/probe_pdl.py [--out FILE] [--sizes 4096,262144,4194304] [--reps 200]
    python scripts/probe_pdl.py --table FILE [--provenance PROVENANCE.txt]   # a run's JSON as markdown

A producer (y = 2x, it signals gdc_launch_dependents first) and a consumer (z = y + 1, launched with
launch_pdl=True, it loads its own scale before gdc_wait and y after it), each size timed as a pair
inside one CUDA graph of `reps` pairs, with and without PDL, interleaved over five rounds; median
microseconds per pair. Every output is checked against x * 2 + 1 first. A probe for
knowledge_base/triton/programmatic-dependent-launch.md, not a benchmark of any op.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,262144,4194304")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out")
    ap.add_argument("--table", help="print this run JSON's markdown table and stop (no GPU needed)")
    ap.add_argument("--provenance", help="with --table: the call's provenance.txt (source commit, date)")
    a = ap.parse_args(argv)
    if a.table:
        print(table(json.load(open(a.table)), open(a.provenance).read() if a.provenance else ""))
        return 0
    import torch
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    if not torch.cuda.is_available():
        print("probe_pdl: needs a CUDA GPU", file=sys.stderr)
        return 2

    @triton.jit
    def producer(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        gdc_launch_dependents()
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

    @triton.jit
    def consumer(y_ptr, s_ptr, z_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        s = tl.load(s_ptr)                       # independent of the producer: before the wait
        gdc_wait()
        tl.store(z_ptr + offs, tl.load(y_ptr + offs, mask=offs < n) + s, mask=offs < n)

    rows = []
    for n in (int(v) for v in a.sizes.split(",")):
        x = torch.randn(n, device="cuda")
        y, z = torch.empty_like(x), torch.empty_like(x)
        one = torch.ones(1, device="cuda")
        grid = (triton.cdiv(n, 1024),)

        def pair(pdl: bool):
            producer[grid](x, y, n, BLOCK=1024)
            consumer[grid](y, one, z, n, BLOCK=1024, launch_pdl=pdl)
        graphs = {}
        for pdl in (False, True):
            z.fill_(float("nan"))
            pair(pdl)
            torch.cuda.synchronize()
            ok = bool(torch.equal(z, x * 2.0 + 1.0))
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(a.reps):
                    pair(pdl)
            graphs[pdl] = (g, ok)
        times = {False: [], True: []}
        for _ in range(5):
            for pdl in (False, True):
                g = graphs[pdl][0]
                g.replay()
                torch.cuda.synchronize()
                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0.record()
                g.replay()
                t1.record()
                torch.cuda.synchronize()
                times[pdl].append(t0.elapsed_time(t1) * 1000 / a.reps)
        z.fill_(float("nan"))
        graphs[True][0].replay()
        torch.cuda.synchronize()
        rows.append({"n": n, "grid": grid[0], "correct_plain": graphs[False][1], "correct_pdl": graphs[True][1],
                     "correct_pdl_in_graph": bool(torch.equal(z, x * 2.0 + 1.0)),
                     "pair_us_plain": statistics.median(times[False]), "pair_us_pdl": statistics.median(times[True])})
        print(json.dumps(rows[-1]), flush=True)
    import datetime
    import os
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "git_sha": os.environ.get("AKA_GIT_SHA"), "reps": a.reps, "rows": rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if all(r["correct_plain"] and r["correct_pdl"] and r["correct_pdl_in_graph"] for r in rows) else 1


def table(run: dict, provenance: str = "") -> str:
    """The run as the results README shows it: provenance line, then a row per size."""
    src = next((ln.split()[1] for ln in provenance.splitlines() if ln.startswith("source ")), run.get("git_sha"))
    date = next((ln for ln in provenance.splitlines() if ln[:4].isdigit() and "T" in ln), run.get("date"))
    lines = [f"{run['gpu']}, torch {run['torch']}, triton {run['triton']}, source {src or '?'}, {date or '?'}; "
             f"a pair timed inside a CUDA graph of {run['reps']} pairs, median of five rounds", "",
             "| elements | programs | correct (plain / PDL / PDL in graph) | pair, plain | pair, PDL | saved |",
             "|---|---|---|---|---|---|"]
    for r in run["rows"]:
        ok = " / ".join("yes" if r[k] else "NO" for k in ("correct_plain", "correct_pdl", "correct_pdl_in_graph"))
        lines.append(f"| {r['n']:,} | {r['grid']:,} | {ok} | {r['pair_us_plain']:.2f} us | {r['pair_us_pdl']:.2f} us "
                     f"| {r['pair_us_plain'] - r['pair_us_pdl']:.2f} us |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
