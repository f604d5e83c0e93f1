"""Parent side of `aka eval --ncu`: profile one shape's forward under Nsight Compute.

The worker's `ncu` mode warms the candidate up (JIT, autotune) and runs one more forward; ncu
profiles every launch of the candidate's own kernels, and the trailing launches (as many as one
forward makes, from the main evaluation) are the steady-state ones summarised here.

The profiled program runs the candidate's code, so it is confined like the evaluation's runner
(aka/evaluate/confine.py): its own mount namespace where every mount is read-only but its
temporary directory and its own Triton cache, the knowledge base, run stores, results and caches
hidden, no capabilities, and the runner's audit hook (aka/evaluate/runner.py) refusing writes
elsewhere, new processes and sockets. Two differences: it keeps the host's network namespace
(ncu talks to the process it profiles over local sockets) and it sees the problem's directory
(it builds the reference's inputs and weights itself). Before this (until 2026-12-05) it ran
unconfined, with the shared Triton cache writable: a candidate profiled with --ncu could have
rewritten cached baselines or another kernel's compiled binary. ncu itself, a trusted program,
runs outside the confinement, and the parent, not the target, holds the GPU lock (the lock files
are hidden from the target). A refusal makes the profile an error: no metrics from such a run.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from aka.evaluate.ncu import FOCUSED_METRICS, STALL_METRICS, run_ncu, summarize_ncu
from aka.evaluate.sandbox import scrubbed_env

REFUSED_FILE = "refused.json"
TARGET = "aka.evaluate.ncu_target"


def profile_shape(spec, source: str, shape_id: str, launches_per_forward: int,
                  min_bytes: float | None, timeout_s: float = 300.0, stalls: bool = False) -> dict:
    from aka.evaluate.confine import child_setup, hidden_paths
    from aka.evaluate.gpulock import for_worker
    from aka.hardware import cache_dir
    tmp = Path(tempfile.mkdtemp(prefix="aka-ncu-"))
    try:
        (tmp / "home").mkdir()
        cand = tmp / "candidate.py"
        cand.write_text(source)
        one = spec.with_(candidate=str(cand), shapes=tuple(s for s in spec.shapes if s.id == shape_id))
        (tmp / "spec.json").write_text(one.dumps())
        cache_root = cache_dir()
        hidden = hidden_paths(one, cache_root, problem=False)
        # on a CPU (no ncu there) only the tests' stand-in profiles it
        prefix, info, extra, writable = child_setup(tmp, source.encode(), spec.device, hidden,
                                                    spec.settings.runner_user, cache_root, network=True)
        extra["AKA_NCU_WRITABLE"] = json.dumps(writable)
        argv = prefix + [sys.executable, "-m", TARGET, str(tmp / "spec.json")]
        # ncu replays every profiled kernel: it owns the GPU like a timed region does.
        with for_worker({"gpu_lock": spec.settings.gpu_lock}, spec.device, None).exclusive():
            metrics = FOCUSED_METRICS + (STALL_METRICS if stalls else ())
            out = run_ncu(argv, list(spec.kernels), timeout_s, env=scrubbed_env(extra), min_bytes=min_bytes,
                          metrics=metrics)
        launches = out.pop("per_launch", None)
        refused = tmp / REFUSED_FILE
        if refused.is_file():
            what = json.loads(refused.read_text() or "[]")
            return {"available": True, "shape": shape_id, "confinement": info, "refused": what,
                    "error": "the profiled candidate did what the sandbox refuses: " + "; ".join(what[:3])}
        if launches and launches_per_forward:
            tail = launches[-launches_per_forward:]
            out.update(summarize_ncu(tail, min_bytes))
            out["launches_profiled_total"] = len(launches)
        out["shape"] = shape_id
        out["confinement"] = info
        out.pop("command", None)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
