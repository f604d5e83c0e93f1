"""The objective of one operator, defined once for the agent (aka/agent/objective.py), the offline
proposer's ordering of families (aka/agent/offline.py), `aka kb best` and `aka bench`.

Per shape, sol_fraction = roofline time / measured time (Atrex-Bench's per-shape score); per op,
its importance-weighted geometric mean over the op's shapes (weights: `ShapeCase.weight`), the
way DESIGN.md aggregates a suite. A shape without a positive value (failed, untimed) leaves the op
without an objective: the agent does not promote such a candidate, the benchmark scores it 0.

The harness scores the candidate's own time (ShapeResult.sol_fraction, speedups, impossible); a
baseline's time (eager, torch.compile) gets the same figures from `fraction`, `impossible` here.
"""
from __future__ import annotations

from collections.abc import Iterable

from aka.evaluate.stats import geomean
from aka.roofline import IMPOSSIBLE_MARGIN


def objective(values: Iterable[float | None], weights: Iterable[float]) -> float | None:
    """Weighted geomean of per-shape values; None for no shape or any value missing or <= 0."""
    v, w = list(values), list(weights)
    if len(v) != len(w):
        raise ValueError(f"{len(v)} values for {len(w)} weights")
    if not v or any(x is None or x <= 0 for x in v):
        return None
    return geomean(v, w)


def fraction(sol_us: float | None, time_us: float | None) -> float | None:
    """The fraction of the roofline a time reaches (sol_us / time_us): for a time the harness timed
    but did not score (a baseline's), the way roofline.perf_metrics scores a candidate's."""
    return sol_us / time_us if sol_us and time_us else None


def impossible(sol_us: float | None, time_us: float | None) -> bool:
    """A time under the roofline floor by more than the harness's margin (roofline.IMPOSSIBLE_MARGIN)."""
    return bool(sol_us and time_us and time_us < sol_us * (1.0 - IMPOSSIBLE_MARGIN))
