"""Statistics for ablations, numpy only: bootstrap CIs, a paired sign-flip permutation test,
Holm's step-down correction, a sums-of-squares variance decomposition, and the minimum
detectable effect of a paired design.

Outcomes are compared on the log scale: a kernel objective (sol_fraction, a speedup) is a ratio,
so arms differ by factors, and a mean of logs is the log of a geometric mean. Summaries report
both the median (robust to the few outliers that drive published means) and the geometric mean.

Why a sign-flip permutation test for paired arms: the pairs are (operator, seed) cells run under
both arms; under the null of no arm effect each paired log-difference is as likely positive as
negative (the two arms are exchangeable within a cell), and flipping signs enumerates exactly that
null. It needs no normality (per-op differences are heavy-tailed), it is exact when every
flip is enumerated (n <= 16: 65,536 patterns), it keeps ties and zero differences (Wilcoxon
drops zeros and needs a tie correction), and its statistic is the mean log-ratio, the effect
we report, rather than a rank sum.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np

EXACT_MAX_N = 16          # 2**16 sign patterns enumerated; above that, Monte Carlo flips
DEFAULT_BOOT = 4000
DEFAULT_PERM = 20000


@dataclass
class Estimate:
    value: float
    lo: float
    hi: float
    n: int
    level: float = 0.95

    def to_json(self) -> dict:
        return asdict(self)


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def geomean(x) -> float:
    x = np.asarray(x, dtype=float)
    if x.size == 0 or np.any(x <= 0):
        raise ValueError("geomean needs positive values")
    return float(np.exp(np.mean(np.log(x))))


def bootstrap_ci(x, stat: str = "median", *, n_boot: int = DEFAULT_BOOT, level: float = 0.95,
                 seed=0) -> Estimate:
    """Percentile bootstrap CI of `stat` (median | mean | geomean) of the 1-D sample x.
    Percentile rather than BCa: the coverage simulation in tests/test_exp_stats.py shows it within
    the binomial band of 0.95 at n = 24 for the median and the geometric mean of lognormal data,
    and it needs no jackknife, which the median's ties make unstable."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"bootstrap needs a 1-D sample of at least 2 values, got shape {x.shape}")
    if stat == "geomean":
        if np.any(x <= 0):
            raise ValueError("geomean needs positive values")
        work, back = np.log(x), np.exp
        fn = np.mean
    elif stat in ("median", "mean"):
        work, back, fn = x, (lambda v: v), (np.median if stat == "median" else np.mean)
    else:
        raise ValueError(f"unknown statistic {stat!r} (median, mean, geomean)")
    rng = _rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    boots = fn(work[idx], axis=1)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(boots, [a, 1.0 - a])
    return Estimate(float(back(fn(work))), float(back(lo)), float(back(hi)), int(x.size), level)


def paired_permutation_test(a, b, *, n_perm: int = DEFAULT_PERM, seed=0) -> dict:
    """Two-sided test of mean(log a - log b) = 0 for paired positive outcomes a[i], b[i].
    Returns the effect as a ratio (exp of the mean log-difference), the p-value, and how it was
    computed. With Monte Carlo flips p = (1 + #{|T*| >= |T|}) / (1 + n_perm), never 0."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired samples must be 1-D and the same length, got {a.shape} and {b.shape}")
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("paired outcomes must be positive (log scale)")
    d = np.log(a) - np.log(b)
    n = d.size
    t_obs = abs(d.mean())
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))  # sums of the same terms in another order
    if n <= EXACT_MAX_N:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        t = np.abs(signs @ d) / n
        p, method = float(np.mean(t >= t_obs - tol)), f"exact ({2 ** n} sign patterns)"
    else:
        rng = _rng(seed)
        signs = rng.choice((-1.0, 1.0), size=(n_perm, n))
        t = np.abs(signs @ d) / n
        p, method = float((1 + np.sum(t >= t_obs - tol)) / (1 + n_perm)), f"Monte Carlo ({n_perm} flips)"
    return {"n": int(n), "mean_log_ratio": float(d.mean()), "ratio": float(math.exp(d.mean())),
            "wins": int(np.sum(d > 0)), "losses": int(np.sum(d < 0)), "ties": int(np.sum(d == 0)),
            "p": p, "method": method}


def holm(pvalues) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1): reject H_i at level
    alpha iff adjusted p_i <= alpha; controls the family-wise error rate under any dependence."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    adj = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, (m - rank) * p[i])
        adj[i] = min(1.0, running)
    return [float(v) for v in adj]


def _design(levels: list, values) -> np.ndarray:
    """Treatment-coded indicator columns (first level dropped) of a categorical factor."""
    values = list(values)
    return np.array([[1.0 if v == lv else 0.0 for lv in levels[1:]] for v in values]).reshape(len(values), -1)


def _rss(X: np.ndarray, y: np.ndarray) -> float:
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    r = y - X @ coef
    return float(r @ r)


def variance_decomposition(y, category, method) -> dict:
    """Shares of the total sum of squares of y (use log-objective) explained by category, then
    method, then their interaction, and the residual: sequential (type I) sums of squares from
    nested least-squares fits, so an unbalanced grid is handled; on a balanced grid the order of
    the two main effects does not matter. KernelBench-X reports category 9.4% vs method 3.3%."""
    y = np.asarray(y, dtype=float)
    cats, meths = sorted(set(category), key=str), sorted(set(method), key=str)
    n = y.size
    if n != len(category) or n != len(method):
        raise ValueError("y, category and method must be the same length")
    one = np.ones((n, 1))
    C, M = _design(cats, category), _design(meths, method)
    CM = np.array([[ci * mj for ci in c_row for mj in m_row] for c_row, m_row in zip(C, M)]).reshape(n, -1)
    total = float(np.sum((y - y.mean()) ** 2))
    r0 = total
    r1 = _rss(np.hstack([one, C]), y)
    r2 = _rss(np.hstack([one, C, M]), y)
    r3 = _rss(np.hstack([one, C, M, CM]), y)
    ss = {"category": r0 - r1, "method": r1 - r2, "interaction": r2 - r3, "residual": r3}
    share = {k: (v / total if total > 0 else 0.0) for k, v in ss.items()}
    return {"n": int(n), "levels": {"category": len(cats), "method": len(meths)}, "total_ss": total,
            "ss": ss, "share": share}


def norm_ppf(q: float) -> float:
    """Standard normal quantile by bisection on erf (|error| < 1e-10); numpy has no erfinv."""
    if not 0.0 < q < 1.0:
        raise ValueError("quantile must be in (0, 1)")
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def min_detectable_effect(n_pairs: int, sd_diff: float, *, alpha: float = 0.05, power: float = 0.8,
                          comparisons: int = 1) -> dict:
    """The smallest mean log-difference a two-sided paired test of n_pairs differences with SD
    sd_diff detects with the given power at alpha / comparisons (Bonferroni: what Holm needs of
    its smallest p-value, so a conservative figure for the family). Normal approximation:
    (z_{1-a/2} + z_{power}) * sd / sqrt(n); at n = 12 a t-based figure would be ~8% larger."""
    if n_pairs < 2 or sd_diff < 0:
        raise ValueError("need at least 2 pairs and a non-negative SD")
    a = alpha / max(1, comparisons)
    delta = (norm_ppf(1 - a / 2) + norm_ppf(power)) * sd_diff / math.sqrt(n_pairs)
    return {"n_pairs": int(n_pairs), "sd_log_diff": float(sd_diff), "alpha": alpha, "power": power,
            "comparisons": int(comparisons), "mde_log": float(delta), "mde_ratio": float(math.exp(delta))}
