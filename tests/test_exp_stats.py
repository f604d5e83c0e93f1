"""aka.exp.stats against known answers on synthetic data (fixed seeds, a few seconds in all)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from aka.exp import stats

REPS = 200
# 0.95 +- 3 binomial SDs over 200 replications: [0.904, 0.996]
BAND = 3 * math.sqrt(0.95 * 0.05 / REPS)


@pytest.mark.parametrize("stat", ["median", "geomean"])
def test_bootstrap_ci_covers_at_the_nominal_rate(stat):
    rng = np.random.default_rng(20261201)
    mu, sigma, n = -0.7, 0.8, 24  # lognormal: median and geometric mean are both e^mu
    truth = math.exp(mu)
    covered = 0
    for r in range(REPS):
        x = rng.lognormal(mu, sigma, size=n)
        e = stats.bootstrap_ci(x, stat, n_boot=1000, seed=r)
        assert e.lo <= e.value <= e.hi
        covered += e.lo <= truth <= e.hi
    assert abs(covered / REPS - 0.95) <= BAND, covered


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 2"):
        stats.bootstrap_ci([1.0], "median")
    with pytest.raises(ValueError, match="positive"):
        stats.bootstrap_ci([1.0, 0.0, 2.0], "geomean")
    with pytest.raises(ValueError, match="unknown statistic"):
        stats.bootstrap_ci([1.0, 2.0], "mode")


def test_exact_permutation_p_value_matches_hand_count():
    # d = log(a/b) = [1, 2, 3]: of 8 sign patterns |sum| >= 6 only for (+++) and (---): p = 2/8.
    a = np.exp([1.0, 2.0, 3.0])
    r = stats.paired_permutation_test(a, np.ones(3))
    assert r["p"] == pytest.approx(0.25) and r["method"].startswith("exact")
    assert r["ratio"] == pytest.approx(math.exp(2.0)) and r["wins"] == 3
    # Identical arms: every pattern ties the observed 0, p = 1.
    assert stats.paired_permutation_test(np.ones(5), np.ones(5))["p"] == 1.0


def _grid(rng, effect: float, ops: int = 8, seeds: int = 3):
    """Outcomes of two arms on ops x seeds cells: an op effect shared by both arms (the pairing
    removes it) plus noise, arm b scaled by exp(effect)."""
    op = rng.normal(0, 1.0, size=(ops, 1))
    a = np.exp(op + rng.normal(0, 0.15, size=(ops, seeds))).ravel()
    b = np.exp(op + effect + rng.normal(0, 0.15, size=(ops, seeds))).ravel()
    return a, b


def test_a_planted_effect_is_found_and_no_effect_is_not():
    rng = np.random.default_rng(7)
    a, b = _grid(rng, effect=0.25)
    r = stats.paired_permutation_test(b, a, seed=1)
    se = 0.15 * math.sqrt(2) / math.sqrt(a.size)  # SD of one paired log-difference over sqrt(n)
    assert r["p"] < 0.001 and abs(r["mean_log_ratio"] - 0.25) < 3 * se
    a0, b0 = _grid(rng, effect=0.0)
    r0 = stats.paired_permutation_test(b0, a0, seed=1)
    assert r0["p"] > 0.05 and abs(r0["mean_log_ratio"]) < 3 * se


def test_false_positive_rate_is_alpha_and_power_at_the_mde_is_80_percent():
    rng = np.random.default_rng(11)
    n, sd = 24, 0.2
    mde = stats.min_detectable_effect(n, sd)["mde_log"]
    assert mde == pytest.approx((1.959964 + 0.841621) * sd / math.sqrt(n), rel=1e-5)
    reject_null = reject_mde = 0
    for r in range(REPS):
        d0 = rng.normal(0, sd, n)
        d1 = rng.normal(mde, sd, n)
        reject_null += stats.paired_permutation_test(np.exp(d0), np.ones(n), n_perm=2000, seed=r)["p"] <= 0.05
        reject_mde += stats.paired_permutation_test(np.exp(d1), np.ones(n), n_perm=2000, seed=r)["p"] <= 0.05
    # 0.05 +- 3 SDs and 0.80 +- 3 SDs of a binomial over 200 (the normal MDE is slightly optimistic at n=24)
    assert reject_null / REPS <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / REPS)
    assert abs(reject_mde / REPS - 0.80) <= 3 * math.sqrt(0.8 * 0.2 / REPS), reject_mde


def test_holm_matches_the_textbook_example_and_is_monotone():
    # p = (0.01, 0.04, 0.03, 0.005): sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 -> 0.02, 0.03, 0.06, 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.9, 0.8]) == [1.0, 1.0] and stats.holm([]) == []


def test_holm_keeps_family_wise_error_under_five_percent():
    rng = np.random.default_rng(3)
    any_reject = sum(min(stats.holm(rng.uniform(size=6))) <= 0.05 for _ in range(2000))
    assert any_reject / 2000 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 2000)


def test_variance_decomposition_recovers_planted_shares():
    # Balanced: 4 categories x 3 methods x 50 replicates; category SD 0.3, method SD 0.1, noise 1.0.
    rng = np.random.default_rng(5)
    cat_eff = np.array([-0.45, -0.15, 0.15, 0.45])   # population variance 0.1125
    meth_eff = np.array([-0.2, 0.0, 0.2])            # population variance 0.0267
    rows = [(c, m, cat_eff[c] + meth_eff[m] + rng.normal(0, 1.0)) for c in range(4) for m in range(3)
            for _ in range(50)]
    cats, meths, y = zip(*rows)
    v = stats.variance_decomposition(np.array(y), [f"c{c}" for c in cats], [f"m{m}" for m in meths])
    total = 0.1125 + 0.0267 + 1.0
    assert v["share"]["category"] == pytest.approx(0.1125 / total, abs=0.035)
    assert v["share"]["method"] == pytest.approx(0.0267 / total, abs=0.02)
    assert v["share"]["interaction"] < 0.03
    assert sum(v["ss"].values()) == pytest.approx(v["total_ss"])


def test_variance_decomposition_of_an_exact_additive_grid_has_no_residual():
    cats = ["a", "a", "b", "b", "b"]        # unbalanced on purpose
    meths = ["x", "y", "x", "y", "y"]
    y = np.array([1.0, 1.5, 3.0, 3.5, 3.5])  # category adds 2, method adds 0.5, nothing else
    v = stats.variance_decomposition(y, cats, meths)
    assert v["ss"]["residual"] == pytest.approx(0.0, abs=1e-12)
    assert v["ss"]["interaction"] == pytest.approx(0.0, abs=1e-12)
    assert v["share"]["category"] + v["share"]["method"] == pytest.approx(1.0)


def test_norm_ppf_and_mde_edges():
    assert stats.norm_ppf(0.975) == pytest.approx(1.959964, abs=1e-6)
    assert stats.norm_ppf(0.5) == pytest.approx(0.0, abs=1e-9)
    m = stats.min_detectable_effect(12, 0.3, comparisons=3)
    assert m["mde_ratio"] > stats.min_detectable_effect(12, 0.3)["mde_ratio"] > 1.0
    with pytest.raises(ValueError):
        stats.min_detectable_effect(1, 0.3)


def test_replicated_seeds_are_tested_with_the_operator_as_the_unit():
    # 4 operators x 3 seeds whose seeds repeat the same outcome to 0.1%: over 12 cells a 10% effect
    # in 3 of the 4 operators looks significant; with operators as the unit it cannot be (p >= 1/8)
    from aka.exp import analysis as an
    rng = np.random.default_rng(3)
    effect = {"op0": 1.0, "op1": 0.9, "op2": 0.9, "op3": 0.9}
    fin = {}
    for o, e in effect.items():
        base = rng.uniform(0.5, 0.9)
        for s in range(3):
            jitter = 1 + 1e-3 * rng.standard_normal()
            fin[("a", o, s)] = base * jitter
            fin[("b", o, s)] = base * e * (1 + 1e-3 * rng.standard_normal())
    cells = an.paired(fin, ["a", "b"])[0]
    assert cells["n"] == 12 and cells["p"] < 0.05
    by_op = an.paired_by_operator(fin, ["a", "b"])
    t = by_op["tests"][0]
    assert t["n"] == 4 and t["min_p"] == 0.125 and t["p"] >= 0.125
    assert t["ratio"] == pytest.approx(math.exp(np.mean(np.log([1.0, 0.9, 0.9, 0.9]))), rel=2e-3)
    assert set(t["per_operator"]) == set(effect) and t["per_operator"]["op0"] == pytest.approx(1.0, rel=3e-3)
    assert by_op["seed_sd"] < 0.01 < cells["sd_log_diff"]


def test_operator_level_test_finds_an_effect_present_in_every_operator():
    from aka.exp import analysis as an
    rng = np.random.default_rng(5)
    fin = {}
    for i in range(8):
        base = rng.uniform(0.3, 0.9)
        for s in range(2):
            fin[("a", f"op{i}", s)] = base * (1 + 0.01 * rng.standard_normal())
            fin[("b", f"op{i}", s)] = base * 1.25 * (1 + 0.01 * rng.standard_normal())
    t = an.paired_by_operator(fin, ["a", "b"])["tests"][0]
    assert t["n"] == 8 and t["wins"] == 8 and t["p"] == pytest.approx(2 / 256) and t["ratio"] == pytest.approx(1.25, rel=0.02)


def test_report_warns_when_runs_were_timed_on_different_devices():
    from aka.exp.report import _mixed_devices
    assert _mixed_devices({"gpus": ["NVIDIA H200"], "devices": ["cuda"]}) == []
    assert _mixed_devices({"gpus": [], "devices": ["cpu"]}) == []
    two = " ".join(_mixed_devices({"gpus": ["NVIDIA H100 80GB HBM3", "NVIDIA H200"], "devices": ["cuda"]}))
    assert "timed on 2 devices (NVIDIA H100 80GB HBM3, NVIDIA H200)" in two and "not comparable" in two
    assert "NVIDIA H200, cpu" in " ".join(_mixed_devices({"gpus": ["NVIDIA H200"], "devices": ["cuda", "cpu"]}))
