"""What cuBLAS runs where our GEMM trails it: per bench shape of gemm_bf16, the kernels `F.linear`
launches (name, grid, block, registers, shared memory, cluster where the trace has it) beside the
ones knowledge_base/kernels/gemm_bf16/dispatch.py launches at its table's configuration, and both
timed by CUDA-graph replay in this process. A probe for choosing what to build next (the shapes at
0.69-0.86x of cuBLAS, results/h100/device-2026-12-05c), not a verdict: verdicts come from the
harness (`aka bench run --impl peer,...`).

    device: python3 scripts/probe_gemm_peer.py --shapes 4,15,7,6 --out $OUT/gemm_probe.json

cuBLAS kernel names spell their tile and cluster (Hopper's `sm90_xmma_gemm_..._128x256x64_...
_cluster2x1x1_...` style), which is the single most useful fact about a configuration we trail:
torch.profiler's trace gives names and launch geometry without Nsight Compute.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNEL = REPO / "knowledge_base" / "kernels" / "gemm_bf16" / "dispatch.py"
SHAPES = REPO / "bench" / "ops" / "gemm_bf16" / "shapes.json"
TRACE_KEYS = ("grid", "block", "registers per thread", "shared memory", "cluster", "est. achieved occupancy %")


def load_kernel():
    spec = importlib.util.spec_from_file_location("gemm_dispatch_probe", KERNEL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shape_dims(sid: str) -> tuple[int, int, int]:
    s = json.loads(SHAPES.read_text())[sid]
    kw = s.get("input_kwargs", s)
    return int(kw["M"]), int(kw["N"]), int(kw["K"])


def graph_us(fn, reps: int = 20, samples: int = 7) -> tuple[float, list[float]]:
    """Median time of one call, from `samples` replays of a CUDA graph holding `reps` calls."""
    import torch
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000.0 / reps)
    return statistics.median(out), out


def launches(fn) -> list[dict]:
    """The GPU kernels one call launches, from torch.profiler's trace (name and launch geometry)."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.loads(Path(f.name).read_text()).get("traceEvents", [])
    out = []
    for e in events:
        if e.get("cat") != "kernel":
            continue
        args = e.get("args", {})
        out.append({"name": e.get("name", ""), "dur_us": e.get("dur"),
                    **{k: args[k] for k in TRACE_KEYS if k in args}})
    return out


def probe(sid: str, mod) -> dict:
    import torch
    M, N, K = shape_dims(sid)
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / math.sqrt(K)
    cfg = mod.pick_config(M, N, K)
    ours = lambda: mod.gemm(x, w, cfg)  # noqa: E731
    peer = lambda: torch.nn.functional.linear(x, w)  # noqa: E731
    err = (ours().float() - peer().float()).abs().max().item()
    t_ours, s_ours = graph_us(ours)
    t_peer, s_peer = graph_us(peer)
    flops = 2.0 * M * N * K
    return {"shape": sid, "M": M, "N": N, "K": K, "config": cfg, "max_abs_diff": err,
            "ours_us": t_ours, "peer_us": t_peer, "ours_samples": s_ours, "peer_samples": s_peer,
            "ours_tflops": flops / t_ours / 1e6, "peer_tflops": flops / t_peer / 1e6,
            "ours_kernels": launches(ours), "peer_kernels": launches(peer)}


def table(rows: list[dict]) -> str:
    out = ["| shape | M N K | ours us | cuBLAS us | ours / cuBLAS speed | ours: config | cuBLAS: kernel, grid, block, regs, smem |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["config"]
        conf = (f"{c.get('path')} {c.get('BM', '')}x{c.get('BN')}x{c.get('BK')} w{c.get('num_warps')} "
                f"s{c.get('num_stages')} split{c.get('SPLIT_K')}")
        pk = "; ".join(f"{k['name'][:90]} grid {k.get('grid')} block {k.get('block')} regs "
                       f"{k.get('registers per thread')} smem {k.get('shared memory')}" for k in r["peer_kernels"])
        out.append(f"| {r['shape']} | {r['M']} {r['N']} {r['K']} | {r['ours_us']:.1f} | {r['peer_us']:.1f} | "
                   f"{r['peer_us'] / r['ours_us']:.2f}x | {conf} | {pk} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="4,15,7,6", help="gemm_bf16 bench shape ids (comma list)")
    ap.add_argument("--out", required=True, help="JSON file (a markdown table goes beside it, .md)")
    a = ap.parse_args(argv)
    ids = [s.strip() for s in a.shapes.split(",") if s.strip()]
    known = json.loads(SHAPES.read_text())
    bad = [s for s in ids if s not in known]
    if bad:
        print(f"probe_gemm_peer: unknown shape id(s) {', '.join(bad)} (gemm_bf16 has {', '.join(known)})",
              file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("probe_gemm_peer: needs a CUDA GPU (cuBLAS and the trace are the point)", file=sys.stderr)
        return 2
    mod = load_kernel()
    rows = []
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for sid in ids:  # written after every shape: a call cut at its deadline keeps what it measured
        rows.append(probe(sid, mod))
        r = rows[-1]
        print(f"shape {sid}: ours {r['ours_us']:.1f} us, cuBLAS {r['peer_us']:.1f} us; "
              f"cuBLAS kernels: {', '.join(k['name'][:80] for k in r['peer_kernels'])}", flush=True)
        out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
                                  indent=1, default=str) + "\n")
        out.with_suffix(".md").write_text(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}\n\n"
                                          + table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
