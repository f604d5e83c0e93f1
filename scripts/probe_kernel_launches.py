"""Where a multi-launch knowledge-base kernel spends its time: each Triton launch of one forward
timed on its own (CUDA events around every launch; on a CPU, under TRITON_INTERPRET=1, wall time),
per bench shape and per parameter variant.

    python scripts/probe_kernel_launches.py OP KERNEL --shapes 0,2,7 [--set BINS=512 --set BLOCK=1024 ...] \
        [--reps 10] [--out FILE.json]

Each --set is one variant (comma-separated KEY=VALUE pairs inside it), run beside the kernel's own
AKA_PARAMS. Prints, per shape and variant, the median time of each launch (by kernel name, summed
over its launches in one forward) and of the whole forward; --out writes the same as JSON after
every shape, so a call cut short keeps what it measured. Times are not harness verdicts (no
correctness check, no cold L2): they say which launch to work on.

On a GPU the event spans (`launch_us`, `forward_us`) start when the host enqueues a launch, so a
launch shorter than Triton's host-side launch path is charged that path: fused_moe's three
alignment launches read 28-110 us each on an H100 (results/h100/device-2026-12-06e), and paged
decode's forward 87.6 us where the harness's graph replay measured 57.2 us. `kernel_us` is the
GPU's own time per kernel (torch.profiler's CUDA activity, summed by kernel name over a forward,
torch's own kernels such as fills included) and `gpu_us` their sum: use those to rank launches.
Inputs are seeded per shape (--seed): before 2026-12-06 they were not, so a shape's routing
(fused_moe's expert loads) depended on the shapes listed before it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    import torch
    import triton

    from aka.evaluate.loader import ProblemRuntime, import_file
    from aka.problem import load_problem
    from aka.util import parse_assignments
    ap = argparse.ArgumentParser()
    ap.add_argument("op")
    ap.add_argument("kernel", help="knowledge_base/kernels/OP/KERNEL.py, by name")
    ap.add_argument("--shapes", default="0")
    ap.add_argument("--set", action="append", default=[], help="a parameter variant: KEY=VALUE[,KEY=VALUE]")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=0,
                    help="inputs of each shape drawn from seed + its position in the bench's shape list, so a "
                         "shape gets the same inputs whatever --shapes lists beside it (default 0)")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    if not cuda:                                              # the interpreter's fixes, as the runner's
        from aka.evaluate.interp_fix import install
        install()
    prob = load_problem(a.op)
    rt = ProblemRuntime(prob.worker_spec(), dev)
    mod = import_file(str(REPO / "knowledge_base" / "kernels" / a.op / f"{a.kernel}.py"), f"_probe_{a.kernel}")
    defaults = dict(mod.AKA_PARAMS)
    from triton.runtime.interpreter import InterpretedFunction
    kinds = (triton.runtime.jit.JITFunction, InterpretedFunction)
    jits = {n: f for n, f in vars(mod).items() if isinstance(f, kinds) and not n.startswith("__")}
    spans: list[tuple[str, object, object]] = []

    def timed(name, run):
        def wrapper(*args, **kw):
            if cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                out = run(*args, **kw)
                e.record()
                spans.append((name, s, e))
                return out
            t = time.perf_counter()
            out = run(*args, **kw)
            spans.append((name, t, time.perf_counter()))
            return out
        return wrapper
    for n, f in jits.items():
        f.run = timed(n, f.run)
    report = {"op": a.op, "kernel": a.kernel, "device": torch.cuda.get_device_name() if cuda else "cpu (interpreter)",
              "defaults": defaults, "seed": a.seed, "rows": []}
    variants = [{}] + [parse_assignments(s) for s in a.set]
    order = {sid: i for i, sid in enumerate(list(prob.shapes) + list(prob.small_shapes))}
    for sid in a.shapes.split(","):
        spec = prob.select(sid)[0].to_json()
        init, kw = rt.init_args(spec)
        torch.manual_seed(a.seed + order.get(sid, 0))
        inputs = rt.make_inputs(spec)
        digest = [round(float(v.double().sum()), 4) for v in inputs.values() if torch.is_tensor(v)]
        for var in variants:
            mod.AKA_PARAMS = dict(defaults, **var)
            model = mod.ModelNew(*init, **kw)
            model(**inputs)                                   # compile
            per: dict[str, list[float]] = {}
            whole = []
            for _ in range(a.reps):
                spans.clear()
                if cuda:
                    torch.cuda.synchronize()
                model(**inputs)
                if cuda:
                    torch.cuda.synchronize()
                tot: dict[str, float] = {}
                for n, s, e in spans:
                    ms = s.elapsed_time(e) if cuda else (e - s) * 1e3
                    tot[n] = tot.get(n, 0.0) + ms * 1e3
                for n, us in tot.items():
                    per.setdefault(n, []).append(us)
                if cuda:
                    whole.append(spans[0][1].elapsed_time(spans[-1][2]) * 1e3)
                else:
                    whole.append(sum(tot.values()))
            row = {"shape": sid, "label": spec.get("label") or sid, "variant": var, "inputs_sum": digest,
                   "launch_us": {n: round(statistics.median(v), 2) for n, v in per.items()},
                   "forward_us": round(statistics.median(whole), 2)}
            if cuda:
                row.update(gpu_kernel_times(model, inputs, a.reps))
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
            if a.out:
                Path(a.out).write_text(json.dumps(report, indent=1))
    return 0


def gpu_kernel_times(model, inputs, reps: int) -> dict:
    """{"kernel_us": GPU time per forward by kernel name, "gpu_us": their sum} from the CUDA
    activity torch.profiler records over `reps` forwards (mean per forward); {"kernel_error": why}
    when the profiler gives nothing."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                model(**inputs)
            torch.cuda.synchronize()
        tot: dict[str, float] = {}
        for ev in prof.events():
            if ev.device_type != torch.autograd.DeviceType.CUDA:
                continue
            name = ev.name if ev.name.startswith("_") or len(ev.name) <= 40 else "torch: " + ev.name[:60]
            tot[name] = tot.get(name, 0.0) + ev.time_range.elapsed_us() / reps
    except Exception as e:  # noqa: BLE001 - a probe: say why and keep the event spans
        return {"kernel_error": f"{type(e).__name__}: {e}"[:300]}
    if not tot:
        return {"kernel_error": "the profiler recorded no CUDA kernel"}
    return {"kernel_us": {n: round(v, 2) for n, v in sorted(tot.items(), key=lambda kv: -kv[1])},
            "gpu_us": round(sum(tot.values()), 2)}


if __name__ == "__main__":
    raise SystemExit(main())
