"""The program Nsight Compute profiles for `aka eval --ncu` (metrics, not a verdict):

    python -m aka.evaluate.ncu_target SPEC.json

Imports the candidate, warms it up (JIT, autotune) and runs exactly one more forward; the parent
keeps the trailing launches, those of that last forward. The verdict of the same source comes from
the judge's evaluation that ran before it; this process decides nothing.
"""
from __future__ import annotations

import json
import sys

import torch

from aka.evaluate.guards import LaunchLog
from aka.evaluate.loader import ProblemRuntime, call, import_file
from aka.evaluate.spec import EvalSpec


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        spec = EvalSpec.loads(f.read())
    launches = LaunchLog().install(interpreted=False)
    rt = ProblemRuntime(spec.problem, spec.device)
    from aka.evaluate.gpulock import for_worker
    shape = spec.shapes[0]
    # ncu replays every profiled kernel: it owns the GPU like a timed region does.
    with for_worker({"gpu_lock": spec.settings.gpu_lock}, spec.device, None).exclusive():
        mod = import_file(spec.candidate, "_aka_candidate")
        cls = getattr(mod, spec.model_class or ("ModelNew" if hasattr(mod, "ModelNew") else "Model"))
        args, kwargs = rt.init_args(shape.to_spec)
        torch.manual_seed(spec.settings.seed)
        ref = rt.make_reference(shape.to_spec)
        cand = cls(*args, **kwargs)
        if isinstance(cand, torch.nn.Module):
            cand = cand.to(spec.device)
            cs = cand.state_dict()
            cand.load_state_dict({k: v for k, v in ref.state_dict().items() if k in cs and cs[k].shape == v.shape},
                                 strict=False)
            cand.eval()
        inputs = rt.make_inputs(shape.to_spec)
        with torch.no_grad():
            for _ in range(3):
                call(cand, inputs)
            torch.cuda.synchronize()
            launches.reset()
            call(cand, inputs)
            torch.cuda.synchronize()
    print("AKA_NCU_LAUNCHES_PER_FORWARD", json.dumps(launches.counts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
