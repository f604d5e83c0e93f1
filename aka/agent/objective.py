"""What a candidate scores and when it may replace the incumbent.

GPU: the objective of aka/objective.py (the importance-weighted geometric mean of sol_fraction
over the task's shapes). When the GPU has no datasheet entry (no sol_fraction), the same mean of
the speedup over eager PyTorch stands in, and the score's `kind` says so; scores of different kinds
are never compared. CPU (Triton interpreter): no timings exist, so the objective is the weighted pass rate.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from aka.evaluate.result import EvalResult
from aka.evaluate.stats import faster_beyond_noise
from aka.objective import objective


@dataclass
class Score:
    value: float | None                 # None: the candidate does not score (not a pass, or nothing timed)
    kind: str                            # sol_fraction | speedup_eager | pass_rate
    per_shape: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict | None) -> "Score | None":
        return cls(**d) if d else None


def acceptable(res: EvalResult) -> tuple[bool, str]:
    """Only an honest pass may be promoted: correct, own kernels, no time under the roofline floor."""
    if res.status != "pass":
        return False, f"status {res.status}"
    if any(s.impossible for s in res.shapes):
        return False, "a time below the roofline floor (impossible)"
    if any(s.fallback_ops for s in res.shapes):
        return False, "PyTorch compute inside forward (fallback)"
    if any(s.correct is False for s in res.shapes):
        return False, "a shape is incorrect"
    return True, "pass"


def compiles_for_gpu(res: EvalResult) -> tuple[bool, str]:
    """A CPU run's second check: the interpreter takes kernels the GPU compiler refuses (tl.dot under
    16, a constexpr specialisation it cannot build), so a launch refused by the offline compile
    (aka/evaluate/compile_report.py) is not a kernel to promote. The report comes from the
    candidate's own process: a forged refusal only hurts the candidate, and a forged success gains
    nothing a GPU run would not take back, so it may reject but never accept."""
    from aka.evaluate.compile_report import refused_launches
    for s in res.shapes:
        rep = s.compile or {}
        bad = refused_launches(rep)
        if bad:
            return False, (f"passes the interpreter but {bad[0].get('kernel')} does not compile for "
                           f"sm_{rep.get('capability', 90)}a: {bad[0]['error']}")
    return True, "pass"


def score(res: EvalResult, weights: dict[str, float], device: str) -> Score:
    ids = [s.id for s in res.shapes if s.id in weights] or list(weights)
    by_id = {s.id: s for s in res.shapes}
    w = [weights.get(i, 1.0) for i in ids]
    if device.startswith("cpu"):
        # A shape passes when it is correct and no later stage (fallback check) failed on it.
        ok = {i: (1.0 if by_id.get(i) is not None and by_id[i].correct and not by_id[i].failed_stage
                  and not by_id[i].fallback_ops else 0.0) for i in ids}
        total = sum(w) or 1.0
        return Score(sum(wi * ok[i] for wi, i in zip(w, ids)) / total, "pass_rate", ok)
    sol = {i: getattr(by_id.get(i), "sol_fraction", None) for i in ids}
    if not acceptable(res)[0]:
        return Score(None, "sol_fraction", sol)
    if (v := objective([sol[i] for i in ids], w)) is not None:
        return Score(v, "sol_fraction", sol)
    sp = {i: getattr(by_id.get(i), "speedup_eager", None) for i in ids}
    if (v := objective([sp[i] for i in ids], w)) is not None:
        return Score(v, "speedup_eager", sp)
    return Score(None, "sol_fraction", sol)


def better(challenger: Score, incumbent: Score | None, min_rel_gain: float = 0.0) -> bool:
    """Screen on one measurement: strictly higher, by `min_rel_gain` relative, same kind."""
    if challenger.value is None:
        return False
    if incumbent is None or incumbent.value is None:
        return True
    if challenger.kind != incumbent.kind:
        return False
    return challenger.value > incumbent.value * (1.0 + min_rel_gain)


def confirmed(challenger: list[float], incumbent: list[float], min_rel_gain: float) -> bool:
    """Beyond noise on repeated evaluations: the objective is a rate (higher is better), so
    1/objective behaves like a time and goes through `faster_beyond_noise` (median gain of at
    least min_rel_gain and non-overlapping 95% CIs of the medians, [min, max] at <= 5 samples)."""
    if not challenger or not incumbent or min(challenger) <= 0 or min(incumbent) <= 0:
        return False
    return faster_beyond_noise([1.0 / v for v in challenger], [1.0 / v for v in incumbent], min_rel_gain)
