"""How often does each implementation fail the judge's outlier stage on one shape? The judge draws a
fresh seed per evaluation, so a kernel that fails one draw in a hundred passes one `kb verify` and
fails the next. This runs N outlier draws (inputs made exactly as the judge makes them: seeded
make_inputs, then 0.1% of the float inputs scaled by 50) through the reference and through each
implementation, and prints per implementation: draws failed, the worst element's distance in band
units (|out - ref| / (atol + rtol * band)), and the same distance against a "terms" band, where an
element's rtol applies to the magnitude of the terms its reduction summed (the reference rerun with
--abs-inputs replaced by their absolute values: for attention, p @ |v|; for a GEMM, |x| @ |w|^T),
the bound rounding error actually follows.

    python3 scripts/outlier_rate.py prefill_attention 2 --draws 20 \
        --impl peer,knowledge_base/kernels/prefill_attention/flash_dispatch.py --abs-inputs v

Needs the GPU for the benchmark shapes (a CPU run takes small shapes: --device cpu, shape s0).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("op")
    ap.add_argument("shape")
    ap.add_argument("--impl", required=True, help="comma list: peer and/or candidate .py files")
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--abs-inputs", default="", help="comma list of inputs whose |.| gives the terms band")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="", help="also write the table as JSON lines here")
    a = ap.parse_args(argv)

    import torch

    from aka.evaluate import compare as cmp
    from aka.evaluate.loader import ProblemRuntime, call, import_file
    from aka.evaluate.tensors import draw_inputs
    from aka.peers import peer_class, peer_of
    from aka.problem import load_problem

    if a.device == "cpu":  # Triton's interpreter with the harness's fixes, as a CPU evaluation runs it
        import os
        os.environ["TRITON_INTERPRET"] = "1"
        from aka.evaluate.interp_fix import install
        install()
    prob = load_problem(a.op)
    shape = prob.select(a.shape)[0].to_json()
    rt = ProblemRuntime(prob.worker_spec(), a.device)
    meta = prob.meta
    abs_inputs = [s for s in a.abs_inputs.split(",") if s]
    ref = rt.make_reference(shape)
    impls = {}
    for item in a.impl.split(","):
        if item == "peer":
            impls["peer"] = peer_class(peer_of(meta))(ref).to(a.device).eval()
        else:
            mod = import_file(item, "_aka_outlier_" + Path(item).stem)
            cls = getattr(mod, "ModelNew", None) or getattr(mod, "Model")
            args, kwargs = rt.init_args(shape)
            impls[Path(item).stem] = cls(*args, **kwargs).to(a.device).eval()
    stats = {k: {"failed": 0, "worst_row_band": 0.0, "worst_terms_band": 0.0, "reasons": []} for k in impls}
    t0 = time.time()
    for d in range(a.draws):
        seed = a.seed + d
        inputs = draw_inputs(rt, shape, seed, True, meta, 1e-3, 50.0)
        clone = lambda src: {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in src.items()}  # noqa: E731
        with torch.no_grad():
            out_r = call(ref, clone(inputs))
            terms = call(ref, cmp.abs_inputs(inputs, abs_inputs)).float() if abs_inputs else None
        r = out_r.float()
        rowmax = r.abs().amax(dim=-1, keepdim=True)
        for name, m in impls.items():
            with torch.no_grad():
                o = call(m, clone(inputs))
            worst, _ = cmp.compare_outputs(o, out_r, meta, outliers=True)
            tol = cmp.tolerance_for(out_r.dtype)
            err = (o.float() - r).abs()
            s = stats[name]
            s["worst_row_band"] = max(s["worst_row_band"], float((err / (tol["atol"] + tol["rtol"] * rowmax)).max()))
            if terms is not None:
                s["worst_terms_band"] = max(s["worst_terms_band"], float((err / (tol["atol"] + tol["rtol"] * terms.abs())).max()))
            if not worst.ok:
                s["failed"] += 1
                s["reasons"].append(f"seed {seed}: {worst.reason}")
        torch.cuda.synchronize() if a.device == "cuda" else None
        print(f"draw {d + 1}/{a.draws} ({time.time() - t0:.0f} s): "
              + ", ".join(f"{k} {v['failed']} failed" for k, v in stats.items()), flush=True)
    print(f"\n{a.op} shape {a.shape}, {a.draws} outlier draws (seeds {a.seed}..{a.seed + a.draws - 1})")
    print("| impl | draws failed | worst, row band units | worst, terms band units |")
    print("|---|---|---|---|")
    for k, s in stats.items():
        print(f"| {k} | {s['failed']}/{a.draws} | {s['worst_row_band']:.2f} | "
              + (f"{s['worst_terms_band']:.2f}" if abs_inputs else "-") + " |")
        for reason in s["reasons"][:3]:
            print(f"  {k}: {reason}")
    if a.out:
        with open(a.out, "a") as f:
            for k, s in stats.items():
                f.write(json.dumps({"op": a.op, "shape": a.shape, "impl": k, "draws": a.draws, **s}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
