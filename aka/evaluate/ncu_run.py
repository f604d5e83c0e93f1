"""Parent side of `aka eval --ncu`: profile one shape's forward under Nsight Compute.

The worker's `ncu` mode warms the candidate up (JIT, autotune) and runs one more forward; ncu
profiles every launch of the candidate's own kernels, and the trailing launches (as many as one
forward makes, from the main evaluation) are the steady-state ones summarised here.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from aka.evaluate.ncu import run_ncu, summarize_ncu
from aka.evaluate.sandbox import scrubbed_env


def profile_shape(spec, source: str, shape_id: str, launches_per_forward: int,
                  min_bytes: float | None, timeout_s: float = 300.0) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="aka-ncu-"))
    try:
        cand = tmp / "candidate.py"
        cand.write_text(source)
        one = spec.with_(candidate=str(cand), shapes=tuple(s for s in spec.shapes if s.id == shape_id))
        (tmp / "spec.json").write_text(one.dumps())
        env = scrubbed_env({"HOME": str(tmp)})
        argv = [sys.executable, "-m", "aka.evaluate.ncu_target", str(tmp / "spec.json")]
        out = run_ncu(argv, list(spec.kernels), timeout_s, env=env, min_bytes=min_bytes)
        launches = out.pop("per_launch", None)
        if launches and launches_per_forward:
            tail = launches[-launches_per_forward:]
            out.update(summarize_ncu(tail, min_bytes))
            out["launches_profiled_total"] = len(launches)
        out["shape"] = shape_id
        out.pop("command", None)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
