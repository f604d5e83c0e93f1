"""Robust statistics for kernel timings (standard library and numpy only).

Timings are skewed (a floor set by the hardware, a right tail of interrupts,
clock changes and cache misses), so every comparison here goes through the
median and a distribution-free confidence interval for it, never the mean.

This module may be imported inside the sandboxed timing worker: import
nothing beyond the standard library and numpy.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

# Up to this many samples the CI uses exact binomial probabilities; above it,
# the normal approximation to Binomial(n, 1/2) (error < 0.5% in coverage).
_EXACT_MAX_N = 1000


def _ci_ranks(n: int, confidence: float) -> tuple[int, int]:
    """1-based ranks (lo, hi) of the order statistics bounding the median.

    [x_(r), x_(n-r+1)] covers the population median with probability
    1 - 2 P(B <= r-1). The largest r whose coverage is >= confidence is used,
    so the interval is conservative. When even r = 1 falls short (n <= 5 at
    95%), the interval is [min, max] and its true coverage, 1 - 2^(1-n), is
    below the level asked for: tiny samples cannot support a 95% claim.
    """
    alpha = 1.0 - confidence
    if n <= _EXACT_MAX_N:
        # Coverage falls as r grows; keep the last r that still meets it.
        # cum = number of outcomes with B <= r (exact integers, out of 2^n).
        total = 2**n
        r, cum = 1, 1 + n
        while r + 1 <= (n + 1) // 2 and 2 * cum / total <= alpha:
            r += 1
            cum += math.comb(n, r)
    else:
        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        r = max(1, math.floor((n - z * math.sqrt(n)) / 2.0))
    return r, n - r + 1


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, lo, hi): distribution-free CI of the median from order statistics.

    Exact binomial for n <= 1000, normal approximation above. Defined for
    n >= 1: n = 1 gives (x, x, x); for n <= 5 at 95% the interval is
    [min, max] with lower coverage than asked (see ``_ci_ranks``).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = np.sort(np.asarray(samples, dtype=float).ravel())
    n = x.size
    if n == 0:
        raise ValueError("median_ci needs at least one sample")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples contain NaN or inf")
    lo_rank, hi_rank = _ci_ranks(n, confidence)
    return float(np.median(x)), float(x[lo_rank - 1]), float(x[hi_rank - 1])


def summarize(samples: Sequence[float]) -> dict:
    """n, median, ci_lo, ci_hi (95%), mean, std (n-1), min, max, cv = std/mean."""
    x = np.asarray(samples, dtype=float).ravel()
    med, lo, hi = median_ci(x)
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    return {
        "n": int(x.size),
        "median": med,
        "ci_lo": lo,
        "ci_hi": hi,
        "mean": mean,
        "std": std,
        "min": float(x.min()),
        "max": float(x.max()),
        "cv": std / mean if mean != 0 else float("nan"),
    }


def geomean(values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Weighted geometric mean; weights are normalised to sum 1.

    Zero or negative values raise (a speedup of 0 is a bug, not a datum), as do
    negative weights or weights summing to 0.
    """
    v = np.asarray(values, dtype=float).ravel()
    if v.size == 0:
        raise ValueError("geomean of nothing")
    if not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError(f"geomean needs finite positive values, got {v.tolist()}")
    if weights is None:
        w = np.full(v.size, 1.0 / v.size)
    else:
        w = np.asarray(weights, dtype=float).ravel()
        if w.size != v.size:
            raise ValueError(f"{v.size} values but {w.size} weights")
        if np.any(w < 0) or not np.all(np.isfinite(w)) or w.sum() <= 0:
            raise ValueError(f"weights must be finite, >= 0 and not all 0: {w.tolist()}")
        w = w / w.sum()
    return float(np.exp(np.sum(w * np.log(v))))


def faster_beyond_noise(challenger: Sequence[float], incumbent: Sequence[float],
                        min_rel_gain: float = 0.01) -> bool:
    """True only when the challenger's times are lower beyond noise.

    Both must hold: (1) median(challenger) <= median(incumbent) * (1 - min_rel_gain);
    (2) the 95% CIs of the two medians do not overlap (challenger's upper bound
    below the incumbent's lower bound). Non-overlap of two 95% intervals is
    stricter than a 5% test, deliberately: a noisy "win" costs more than a
    missed one. With 5 or fewer samples a side the CIs are [min, max], so the
    two sets of times must not overlap at all.
    """
    c_med, _, c_hi = median_ci(challenger)
    i_med, i_lo, _ = median_ci(incumbent)
    return c_med <= i_med * (1.0 - min_rel_gain) and c_hi < i_lo


def relative_spread(a_median: float, b_median: float) -> float:
    """|a - b| / min(a, b): how far apart two medians are, relative to the smaller."""
    if a_median <= 0 or b_median <= 0:
        raise ValueError(f"medians must be positive, got {a_median}, {b_median}")
    return abs(a_median - b_median) / min(a_median, b_median)
