"""The program Nsight Compute profiles for `aka eval --ncu` (metrics, not a verdict):

    python -m aka.evaluate.ncu_target SPEC.json

Builds the shape's inputs and reference weights, arms the runner's audit hook, then imports the
candidate, warms it up (JIT, autotune) and runs exactly one more forward; the parent keeps the
trailing launches, those of that last forward. The verdict of the same source comes from the
judge's evaluation that ran before it; this process decides nothing. It runs confined (the parent,
aka/evaluate/ncu_run.py, starts it so) and the parent holds the GPU lock while it runs. What the
audit hook refused is written to refused.json beside the spec: the parent then reports an error,
not metrics (a report only: the mount namespace is what stops the writes).
"""
from __future__ import annotations

import json
import os
import sys

import torch

from aka.evaluate.guards import LaunchLog
from aka.evaluate.loader import ProblemRuntime, call, import_file
from aka.evaluate.ncu_run import REFUSED_FILE
from aka.evaluate.runner import install_audit, resolve_gpu_driver
from aka.evaluate.spec import EvalSpec


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        spec = EvalSpec.loads(f.read())
    here = os.path.dirname(os.path.abspath(argv[1]))
    writable = tuple(json.loads(os.environ.get("AKA_NCU_WRITABLE") or "[]"))
    violations: list[str] = []
    gpu = spec.device.startswith("cuda")
    if gpu:   # Triton's /sbin/ldconfig and `file` runs, before the hook that refuses new processes
        resolve_gpu_driver()
    arm = install_audit(here, violations, writable)
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    launches = LaunchLog().install(interpreted=not gpu)
    rt = ProblemRuntime(spec.problem, spec.device)
    shape = spec.shapes[0]
    args, kwargs = rt.init_args(shape.to_spec)
    torch.manual_seed(spec.settings.seed)
    ref = rt.make_reference(shape.to_spec)
    inputs = rt.make_inputs(shape.to_spec)
    refused_path = os.path.join(here, REFUSED_FILE)
    arm()
    try:
        mod = import_file(spec.candidate, "_aka_candidate")
        cls = getattr(mod, spec.model_class or ("ModelNew" if hasattr(mod, "ModelNew") else "Model"))
        cand = cls(*args, **kwargs)
        if isinstance(cand, torch.nn.Module):
            cand = cand.to(spec.device)
            cs = cand.state_dict()
            cand.load_state_dict({k: v for k, v in ref.state_dict().items() if k in cs and cs[k].shape == v.shape},
                                 strict=False)
            cand.eval()
        with torch.no_grad():
            for _ in range(3):
                call(cand, inputs)
            sync()
            launches.reset()
            call(cand, inputs)
            sync()
    finally:
        if violations:
            with open(refused_path, "w") as f:   # inside its own directory: the hook lets it through
                json.dump(list(dict.fromkeys(violations)), f)
    print("AKA_NCU_LAUNCHES_PER_FORWARD", json.dumps(launches.counts))
    return 3 if violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
