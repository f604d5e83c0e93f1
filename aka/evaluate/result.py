"""One typed result per evaluation, serialised as JSON with the same keys from every runner.

Standard library only: the worker, the parent, the agent and the benchmark all use it.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields

# Ordered by how far the candidate got; `pass` is the only verdict that scores.
STATUSES = ("pass", "incorrect", "fallback", "compile_error", "runtime_error", "timeout", "crashed", "rejected")
STAGES = ("static", "import", "first_call", "correctness", "outliers", "fallback", "timing")


class StageFailure(Exception):
    """Raised inside the worker when a stage gives its verdict; here so every module (the worker
    runs as __main__) shares one class."""

    def __init__(self, status: str, reason: str, stage: str):
        super().__init__(reason)
        self.status, self.reason, self.stage = status, reason, stage


@dataclass
class ShapeResult:
    id: str
    label: str = ""
    correct: bool | None = None
    failed_stage: str | None = None
    reason: str = ""
    max_abs_err: float | None = None
    rel_err: float | None = None
    outlier_rel_err: float | None = None
    draws: int = 0
    # timing (GPU only); microseconds
    time_us: float | None = None
    time_ci_us: list[float] | None = None
    eager_call_us: float | None = None  # un-graphed per-call time (launch overhead included)
    timing_method: str | None = None    # "cuda_graph" or "cuda_events"
    host_us: float | None = None        # cuda_events: a call's host time (median; the runner's report)
    head_start_us: float | None = None  # cuda_events: the GPU spin before each sample (sized to host_us)
    eager_us: float | None = None       # PyTorch eager reference
    compile_us: float | None = None     # torch.compile(reference)
    compile_ci_us: list[float] | None = None  # its median's 95% CI, as time_ci_us is the candidate's
    baseline_methods: dict | None = None  # {"eager": "cuda_graph", "compile": ..., "peer": ...}: how each was timed
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    # the op's peer (meta.json `peer`, env["peer"] names it and its version): checked, then timed
    peer_us: float | None = None
    peer_ci_us: list[float] | None = None
    speedup_peer: float | None = None
    peer_status: str | None = None      # pass | incorrect | error | unavailable (None: no peer)
    peer_reason: str = ""
    peer_rel_err: float | None = None
    # roofline
    flops: dict | None = None
    bytes: float | None = None
    # values of the inputs the op's cost model names (input.py's _cost_vars, e.g. fused_moe's
    # experts_hit): counted on the timed inputs, they replace the model's estimate for that batch
    cost_vars: dict | None = None
    sol_us: float | None = None
    sol_fraction: float | None = None
    sol_us_measured: float | None = None
    sol_fraction_measured: float | None = None
    iou: float | None = None
    mfu: float | None = None
    bound: str | None = None
    impossible: bool = False
    kernels: dict | None = None         # own kernel launches per forward
    fallback_ops: list[str] | None = None
    profile: list[dict] | None = None   # per-kernel breakdown (torch.profiler)
    ncu: dict | None = None
    compile: dict | None = None         # offline GPU compile of its launches (aka/evaluate/compile_report.py)


@dataclass
class EvalResult:
    status: str
    reason: str = ""
    problem: str = ""
    candidate: str = ""
    device: str = "cpu"
    shapes: list[ShapeResult] = field(default_factory=list)
    stages_run: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    wall_s: dict = field(default_factory=dict)  # per-phase wall time: worker_start, compile, ...
    stdout_tail: str = ""
    stderr_tail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_json(self) -> dict:
        return _clean(asdict(self))

    def dumps(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_json(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, d: dict) -> "EvalResult":
        names = {f.name for f in fields(ShapeResult)}
        shapes = [ShapeResult(**{k: v for k, v in s.items() if k in names}) for s in d.get("shapes", [])]
        keep = {f.name for f in fields(cls)} - {"shapes"}
        return cls(shapes=shapes, **{k: v for k, v in d.items() if k in keep})


def _clean(x):
    """JSON has no NaN/Inf: write them as strings so the file stays strict and the fact visible."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


# Failures of the machine, not of the code under test: several evaluations sharing one GPU can
# run it out of memory. Resumable runs (`aka bench run`, `aka kb verify`) measure these again.
MACHINE_FAILURES = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED")


def wall_summary(wall_s: dict) -> str:
    """Where an evaluation's time went: 'correctness 40 s, outliers 9 s, fallback 21 s, timing 80 s;
    GPU wait ...' (the stages that ran, then gpulock.lock_summary)."""
    from aka.evaluate.gpulock import lock_summary
    w = wall_s or {}
    stages = ", ".join(f"{st} {w[st + '_s']:.0f} s" for st in STAGES if (w.get(st + "_s") or 0) >= 0.5)
    return "; ".join(p for p in (stages, lock_summary(w)) if p)


def machine_failure(status: str | None, reason: str | None) -> bool:
    return status != "pass" and any(k in (reason or "") for k in MACHINE_FAILURES)
