"""Compile every configuration scripts/gpu_tune_gemm.py would time, for sm_90a, without a GPU.

    python scripts/check_gemm_grid.py [--ops gemm_bf16,fp8_block_scaled_gemm] [--json OUT]

Each (bench shape, config) launch of the dispatch kernels is intercepted and compiled the way
`aka kb compile-check` does (aka/kb/compile_check.py: Triton's specialisation, ptxas for registers
and spills); nothing runs, the tensors are uninitialised CPU memory. A config that fails to compile
or spills here would waste the tuner's GPU seconds: prune or fix it before the device run.
Exit status 1 when any launch fails to compile.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="gemm_bf16,fp8_block_scaled_gemm")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import torch

    import gpu_tune_gemm as tune
    from aka.kb.compile_check import CompileReport, compiling_launches

    rows, failed = [], 0
    report = CompileReport(ok=True)
    with compiling_launches(report, 90):
        failed = _run(args, tune, torch, report, rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    n_err = sum(1 for r in rows if r.get("error"))
    n_spill = sum(1 for r in rows if (r.get("spill") or 0) > 0)
    print(f"{len(rows)} launches compiled for sm_90a: {n_err} errors, {n_spill} with spills")
    return 1 if failed else 0


def _run(args, tune, torch, report, rows):
    failed = 0
    for op in [o for o in args.ops.split(",") if o]:
        mod = tune.load_module(ROOT / "knowledge_base" / "kernels" / op / "dispatch.py", f"_grid_{op}")
        shapes = json.loads((ROOT / "bench" / "ops" / op / "shapes.json").read_text())
        fp8 = op != "gemm_bf16"
        for sid, s in shapes.items():
            M, N, K = (s["input_kwargs"][k] for k in ("M", "N", "K"))
            grid = tune.fp8_grid(M) if fp8 else tune.bf16_grid(M)
            cfgs = [mod._heuristic(M, N, K)] + grid
            for cfg in cfgs:
                t0 = time.monotonic()
                before = len(report.launches)
                host_error = None
                try:
                    if fp8:
                        e4 = torch.float8_e4m3fn
                        a, b = torch.empty(M, K, dtype=e4), torch.empty(N, K, dtype=e4)
                        sa = torch.empty(M, -(-K // 128))
                        sb = torch.empty(-(-N // 128), -(-K // 128))
                        mod.gemm(a, sa, b, sb, cfg)
                    else:
                        mod.gemm(torch.empty(M, K, dtype=torch.bfloat16), torch.empty(N, K, dtype=torch.bfloat16), cfg)
                except Exception as exc:  # a host-side refusal (descriptor checks) is a finding too
                        host_error = f"{type(exc).__name__}: {exc}"
                new = report.launches[before:]
                for lr in new:
                    row = {"op": op, "shape": sid, "config": tune.cfg_name(cfg), "kernel": lr.kernel,
                           "shared": lr.shared_bytes, "regs": lr.registers, "spill": lr.spill_bytes,
                           "error": lr.error}
                    rows.append(row)
                    if lr.error or (lr.spill_bytes or 0) > 0:
                        print(json.dumps(row), flush=True)
                if host_error:
                    rows.append({"op": op, "shape": sid, "config": tune.cfg_name(cfg), "error": host_error})
                    print(json.dumps(rows[-1]), flush=True)
                failed += bool(host_error) + sum(1 for lr in new if lr.error)
                dt = time.monotonic() - t0
                if dt > 1.0:
                    print(f"{op} {sid} {tune.cfg_name(cfg)}: {len(new)} compiles, {dt:.1f} s", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
