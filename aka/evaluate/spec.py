"""The typed contract between `evaluate()` and the judge process: built once, serialised once.

Standard library only (the judge and the runner both import it). Shapes and stages are fields, not
strings parsed back, and every setting has its default here, where it is declared.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

MODES = ("candidate", "baselines")


@dataclass(frozen=True)
class ShapeSpec:
    id: str
    label: str = ""
    init_kwargs: dict = field(default_factory=dict)
    input_kwargs: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)   # other keys of the shape entry (weights, notes, ...)

    @property
    def to_spec(self) -> dict:
        """The shape as the problem runtime reads it (loader.ProblemRuntime)."""
        return dict(self.extra, id=self.id, init_kwargs=self.init_kwargs, input_kwargs=self.input_kwargs)

    @classmethod
    def from_case(cls, d: dict) -> "ShapeSpec":
        known = {"id", "label", "init_kwargs", "input_kwargs"}
        return cls(id=str(d["id"]), label=str(d.get("label", "")), init_kwargs=dict(d.get("init_kwargs") or {}),
                   input_kwargs=dict(d.get("input_kwargs") or {}),
                   extra={k: v for k, v in d.items() if k not in known})


@dataclass(frozen=True)
class Settings:
    draws: int = 3                  # fresh input draws per shape in the correctness stage (>= 3 enforced)
    outliers: bool = True           # the outlier stage (meta.json may opt out)
    outlier_frac: float = 1e-3
    outlier_scale: float = 50.0
    timing: bool = True             # GPU only
    checks: bool = True             # False: re-measurement of a source that already passed the checks
    baselines: bool = True          # time eager and torch.compile of the reference too
    peer: bool = True               # check the op's peer (meta.json `peer`) and, on a GPU, time it too
    fresh_baselines: bool = False
    costs: bool = True              # count bytes and FLOPs of the reference (roofline inputs)
    seed: int = 0
    baseline_cache: str = ""        # directory of cached baseline timings ("" = none)
    gpu_lock: str = ""              # directory of the GPU lock ("" = none)
    observe: bool = True            # GPU: the kernels of an observed forward read from outside (ncu)
    runner_user: str = "auto"       # "auto": an unprivileged user when the judge runs as root; "same": none
    unlock_compiles: bool = False   # GPU: the runner's Triton compiles let the lock's shared hold go
                                    # (trusted candidates only: gpulock.py, runner.report_compiles)


@dataclass(frozen=True)
class EvalSpec:
    problem: dict                   # Problem.worker_spec() + source_hash: the judge's own, never the runner's
    shapes: tuple[ShapeSpec, ...]
    device: str = "cpu"
    mode: str = "candidate"
    candidate: str = ""             # path of the candidate's copy (read by the runner only)
    candidate_name: str = "candidate.py"
    model_class: str | None = None
    kernels: tuple[str, ...] = ()   # the candidate's own @triton.jit names (static check)
    settings: Settings = field(default_factory=Settings)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}")

    @property
    def meta(self) -> dict:
        return self.problem.get("meta") or {}

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> "EvalSpec":
        d = json.loads(text)
        settings = Settings(**{f.name: d["settings"][f.name] for f in fields(Settings) if f.name in d["settings"]})
        return cls(problem=d["problem"], shapes=tuple(ShapeSpec(**s) for s in d["shapes"]), device=d["device"],
                   mode=d["mode"], candidate=d["candidate"], candidate_name=d["candidate_name"],
                   model_class=d.get("model_class"), kernels=tuple(d.get("kernels") or ()), settings=settings)

    def with_(self, **kw) -> "EvalSpec":
        from dataclasses import replace
        return replace(self, **kw)
