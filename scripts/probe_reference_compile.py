"""How long torch.compile spends tracing fused_moe's reference, and whether new routing retraces it.

    python scripts/probe_reference_compile.py [--experts 8,128] [--tokens 512] [--backend eager]

The reference (bench/ops/fused_moe/reference.py) reads the per-expert pair counts to the host
(`.tolist()`) and loops over experts in Python, so Dynamo unrolls the loop with the counts as
constants and guards on them: every new routing is a new trace. With backend "eager" (no Inductor)
this measures Dynamo alone, on the CPU, at small hidden sizes (the trace does not depend on them):
the first call, the same inputs again, and a second routing. A probe for why the op's compile
baseline takes minutes per kb verify (results/h100/device-2026-12-06g), not a benchmark.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experts", default="8,128")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--backend", default="eager")
    a = ap.parse_args(argv)
    import torch
    sys.path.insert(0, str(ROOT / "bench" / "ops" / "fused_moe"))
    from reference import Model
    torch.manual_seed(0)
    T, H, I, k = a.tokens, 64, 32, a.top_k
    for E in (int(e) for e in a.experts.split(",")):
        x = torch.randn(T, H, dtype=torch.bfloat16)
        w1 = torch.randn(E, 2 * I, H, dtype=torch.bfloat16)
        w2 = torch.randn(E, H, I, dtype=torch.bfloat16)
        tw = torch.rand(T, k)
        ids = [torch.randint(0, E, (T, k), dtype=torch.int32) for _ in range(2)]
        torch._dynamo.reset()
        m = torch.compile(Model(), backend=a.backend)
        times = []
        for routing in (ids[0], ids[0], ids[1]):
            t = time.perf_counter()
            m(x, w1, w2, tw, routing)
            times.append(time.perf_counter() - t)
        print(f"experts {E}: first call {times[0]:.2f} s, same inputs again {times[1]:.2f} s, "
              f"a new routing {times[2]:.2f} s (backend {a.backend}, torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
