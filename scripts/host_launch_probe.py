"""Is an implementation's timed figure its GPU time or its host's launch time?

The harness times one-set shapes (inputs over 3x the L2) with CUDA events after a GPU spin of
HEAD_START_CYCLES (aka/evaluate/timing.py, ~200 us on an H200), so the host has enqueued the call
before the start event fires. A call whose host path (Python, descriptor set-up, several launches)
takes longer than that spin plus its own GPU time is timed at the host's pace, and a busy CPU then
moves the figure. For each implementation and shape this prints:

  host_us     the call's host time, GPU kept busy by a long spin (so no launch waits on the GPU)
  events_us   one call between events after the harness's own head start (what the harness records)
  gpu_us      one call between events after a 50 ms head start (the host is never the limit)
  graph_us    one call replayed from a CUDA graph, where the call can be captured

each the median of --reps, first with the host otherwise idle and then, with --load N, beside N
processes spinning on the CPU. events_us well above gpu_us means the harness measured the host.

    python3 scripts/host_launch_probe.py fused_moe 2,3,10,11 \
        --impl peer,knowledge_base/kernels/fused_moe/grouped_dispatch.py --load 8 --out probe.jsonl
    python3 scripts/host_launch_probe.py --table probe.jsonl      # the table again, from the rows

Needs a GPU (but not for --table).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LONG_SPIN_CYCLES = 100_000_000  # ~50 ms at 2 GHz: far longer than any host path measured here


def _spin_cpu(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def probe(fn, reps: int) -> dict:
    """host_us, events_us, gpu_us and graph_us (None when capture fails) of fn()."""
    import torch

    from aka.evaluate.timing import _head_start

    host, ev, gpu = [], [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(LONG_SPIN_CYCLES)
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    for heads, out in ((_head_start, ev), (lambda: torch.cuda._sleep(LONG_SPIN_CYCLES), gpu)):
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            heads()
            s.record()
            fn()
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) * 1000.0)
    graph_us = None
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        g.replay()
        torch.cuda.synchronize()
        gr = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(LONG_SPIN_CYCLES // 10)
            s.record()
            g.replay()
            e.record()
            e.synchronize()
            gr.append(s.elapsed_time(e) * 1000.0)
        graph_us = _median(gr)
    except Exception as exc:  # a call that syncs with the host cannot be captured: say so, go on
        print(f"  (not capturable: {type(exc).__name__}: {str(exc)[:120]})", flush=True)
        torch.cuda.synchronize()
    return {"host_us": _median(host), "events_us": _median(ev), "gpu_us": _median(gpu), "graph_us": graph_us}


def table(rows: list[dict]) -> str:
    """The rows as a markdown table, with the GPU and repetitions they were measured with."""
    extra = ", ".join(f"{k} {rows[0][k]}" for k in ("torch", "triton", "git_sha", "date") if rows and rows[0].get(k))
    head = (f"{rows[0]['op']} on {rows[0]['gpu']}: host launch time against GPU time (us, median of "
            f"{rows[0]['reps']}; `scripts/host_launch_probe.py`" + (f"; {extra}" if extra else "") + ")\n\n") if rows else ""
    lines = ["| shape | impl | CPU load | host | events (harness head start) | GPU | graph | events / GPU |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = "-" if r["graph_us"] is None else f"{r['graph_us']:.1f}"
        lines.append(f"| {r['shape']} | {r['impl']} | {r['cpu_load']} | {r['host_us']:.1f} | {r['events_us']:.1f} | "
                     f"{r['gpu_us']:.1f} | {g} | {r['events_us'] / r['gpu_us']:.2f} |")
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("op", nargs="?")
    ap.add_argument("shapes", nargs="?", help="comma list of shape ids")
    ap.add_argument("--impl", help="comma list: peer and/or candidate .py files")
    ap.add_argument("--table", metavar="JSONL", help="print the table of an earlier run's --out file and stop")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--load", type=int, default=0, help="also measure beside N CPU-spinning processes")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default="", help="also append the rows as JSON lines here")
    a = ap.parse_args(argv)
    if a.table:
        print(table([json.loads(x) for x in Path(a.table).read_text().splitlines() if x.strip()]), end="")
        return 0
    if not (a.op and a.shapes and a.impl):
        ap.error("give OP, SHAPES and --impl (or --table JSONL)")
    if a.reps < 1 or a.load < 0:
        ap.error("--reps must be >= 1 and --load >= 0")

    import torch
    if not torch.cuda.is_available():
        print("host_launch_probe.py needs a CUDA GPU", file=sys.stderr)
        return 2

    from aka.evaluate.loader import ProblemRuntime, call, import_file
    from aka.evaluate.tensors import draw_inputs
    from aka.peers import peer_class, peer_of
    from aka.problem import load_problem

    import datetime

    import triton

    from aka.evaluate.api import git_sha
    prov = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "git_sha": git_sha(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    prob = load_problem(a.op)
    rt = ProblemRuntime(prob.worker_spec(), "cuda")
    rows = []
    loads = [0] + ([a.load] if a.load else [])
    for sid in a.shapes.split(","):
        shape = prob.select(sid)[0].to_json()
        ref = rt.make_reference(shape)
        impls = {}
        for item in a.impl.split(","):
            if item == "peer":
                impls["peer"] = peer_class(peer_of(prob.meta))(ref).to("cuda").eval()
            else:
                mod = import_file(item, "_aka_probe_" + Path(item).stem)
                cls = getattr(mod, "ModelNew", None) or getattr(mod, "Model")
                args, kwargs = rt.init_args(shape)
                impls[Path(item).stem] = cls(*args, **kwargs).to("cuda").eval()
        inputs = draw_inputs(rt, shape, a.seed, False, prob.meta, 0.0, 1.0)
        for name, m in impls.items():
            def fn(m=m):
                with torch.no_grad():
                    return call(m, inputs)
            for _ in range(3):  # compiles and autotuning outside the measurement
                fn()
            torch.cuda.synchronize()
            for load in loads:
                ctx = mp.get_context("spawn")  # no fork of a process holding a CUDA context
                stop = ctx.Event()
                procs = [ctx.Process(target=_spin_cpu, args=(stop,), daemon=True) for _ in range(load)]
                for p in procs:
                    p.start()
                time.sleep(0.5 if load else 0.0)
                try:
                    r = probe(fn, a.reps)
                finally:
                    stop.set()
                    for p in procs:
                        p.join(5)
                row = {"op": a.op, "shape": sid, "impl": name, "cpu_load": load, "reps": a.reps, **prov, **r}
                rows.append(row)
                print(json.dumps(row), flush=True)
        del impls, inputs, ref
        torch.cuda.empty_cache()
    print("\n" + table(rows))
    if a.out:
        with open(a.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
