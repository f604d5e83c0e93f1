"""What scripts/gpu_peers.sh measures: per op that has a peer, the knowledge base's best kernel and
the op's large shapes.

    python scripts/peer_plan.py CAND_DIR PLAN.json [--ops a,b] [--small] [--shapes "a=2,3;b=1"]

Writes CAND_DIR/<op>/<kernel>.py (the kernel, copied), PLAN.json ({op: {kernel, why, shapes}}) and prints one
line per op, `op shape,shape,...`, in the order the issue's table lists them. The kernel is the one
`aka kb best` ranks first from its current results on the card in hand (an H100's where it has them),
else on the H200; without any, the op's first kernel file (and
PLAN.json says so). Large shapes: roofline time >= LARGE_SOL_US on the H200 datasheet, the bytes
counted from inputs made on this machine's device (a CPU makes them too, slowly for big shapes:
--small takes the op's small shapes instead, for a test run through the interpreter). --shapes
gives the named ops' shapes outright (e.g. the shapes an earlier call left unmeasured), unsized.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ORDER = ["gemm_bf16", "prefill_attention", "rms_norm", "fused_add_rms_norm", "layer_norm", "silu_and_mul",
         "gelu_and_mul", "softmax", "fused_moe", "fp8_block_scaled_gemm", "qk_norm"]


def kernel_choice(op: str, best: dict) -> tuple[Path | None, str]:
    kdir = ROOT / "knowledge_base" / "kernels" / op
    if op in best and (kdir / f"{best[op]}.py").is_file():
        return kdir / f"{best[op]}.py", "aka kb best (current GPU results)"
    files = sorted(kdir.glob("*.py")) if kdir.is_dir() else []
    if files:
        return files[0], "first kernel file: no current GPU result ranks the op's kernels"
    return None, "no kernel in the knowledge base"


def large_shapes(problem, device: str) -> list[str]:
    import torch

    from aka.evaluate.loader import ProblemRuntime
    from aka.evaluate.report import resolve_cost
    from aka.hardware import match_spec
    from aka.roofline import LARGE_SOL_US, roofline
    sheet = match_spec("NVIDIA H200")
    rt = ProblemRuntime(problem.worker_spec(), device)
    out = []
    for s in problem.shapes.values():
        spec = s.to_json()
        inputs = rt.make_inputs(spec)
        nbytes = sum(t.numel() * t.element_size() for t in inputs.values() if isinstance(t, torch.Tensor))
        if (problem.meta.get("cost") or {}).get("bytes", "auto") == "auto":  # outputs count too
            with torch.no_grad():
                o = rt.make_reference(spec)(**inputs)
            outs = o if isinstance(o, (tuple, list)) else [o]
            nbytes += sum(t.numel() * t.element_size() for t in outs if isinstance(t, torch.Tensor))
            del o, outs
        del inputs
        cost = resolve_cost(problem.meta, s, float(nbytes), {})
        if cost is not None and roofline(cost, sheet.mem_tbps, sheet.peak_tflops).sol_us >= LARGE_SOL_US:
            out.append(s.id)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cand_dir")
    ap.add_argument("plan")
    ap.add_argument("--ops", default=None)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--shapes", default="", help='"op=2,3;op2=1": these ops\' shapes in place of the sized ones')
    a = ap.parse_args(argv)
    given = dict(part.split("=", 1) for part in a.shapes.split(";") if part.strip())
    from aka.kb.best import best_table
    from aka.peers import peer_of
    from aka.problem import load_problem
    import torch
    # the best kernel on the card in hand (H100 or H200) where it has verdicts, else the H200's
    here = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    best = {}
    for gpu in ["H200"] + (["H100"] if "H100" in here else []):
        try:
            best.update({r["op"]: r["kernel"] for r in best_table(ROOT / "knowledge_base", "cuda", gpu)})
        except Exception as e:  # noqa: BLE001 - no results at all: every op falls back, said per op
            print(f"peer_plan: aka kb best --gpu {gpu} unavailable ({type(e).__name__}: {e})", file=sys.stderr)
    want = a.ops.split(",") if a.ops else ORDER
    cand = Path(a.cand_dir)
    cand.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    plan = {}
    for op in want:
        prob = load_problem(op)
        if peer_of(prob.meta) is None:
            continue
        path, why = kernel_choice(op, best)
        if path is None:
            print(f"peer_plan: {op}: {why}", file=sys.stderr)
            continue
        (cand / op).mkdir(exist_ok=True)
        shutil.copy(path, cand / op / path.name)  # DIR/<op>/<kernel>.py: the records name the kernel
        try:
            shapes = (given[op].split(",") if op in given else list(prob.small_shapes) if a.small
                      else large_shapes(prob, device))
        except Exception as e:  # noqa: BLE001 - an op whose shapes cannot be sized is left out, said
            print(f"peer_plan: {op}: shapes not sized ({type(e).__name__}: {e})", file=sys.stderr)
            continue
        if not shapes:
            continue
        plan[op] = {"kernel": str(path.relative_to(ROOT)), "why": why, "shapes": shapes}
        print(op, ",".join(shapes), flush=True)
    Path(a.plan).write_text(json.dumps(plan, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
