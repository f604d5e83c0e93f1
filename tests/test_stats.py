import math

import numpy as np
import pytest

from aka.evaluate.stats import faster_beyond_noise, geomean, median_ci, relative_spread, summarize


@pytest.mark.parametrize("n", [9, 25, 1500])  # exact path for small n, normal approximation above 1000
def test_median_ci_covers_true_median_of_lognormal(n):
    rng = np.random.default_rng(1234 + n)
    true_median = math.exp(0.3)  # lognormal(mu, sigma) has median e^mu
    covered = 0
    for _ in range(400):
        x = rng.lognormal(mean=0.3, sigma=0.6, size=n)
        _, lo, hi = median_ci(x)
        covered += lo <= true_median <= hi
    assert covered / 400 >= 0.93


def test_median_ci_order_statistics_exact():
    x = np.arange(20, dtype=float)[::-1] * 1.5 + 3.0  # unsorted on purpose
    med, lo, hi = median_ci(x)
    s = np.sort(x)
    # n = 20 at 95%: ranks 6 and 15 (coverage 95.9%; ranks 7/14 give 88.5%)
    assert (lo, hi) == (s[5], s[14])
    assert med == pytest.approx(np.median(x))


def test_median_ci_tiny_samples_are_degenerate():
    assert median_ci([4.2]) == (4.2, 4.2, 4.2)
    assert median_ci([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    with pytest.raises(ValueError):
        median_ci([])
    with pytest.raises(ValueError):
        median_ci([1.0, float("nan")])


def test_median_ci_narrows_with_lower_confidence():
    x = np.random.default_rng(7).normal(10.0, 1.0, size=101)
    _, lo95, hi95 = median_ci(x, 0.95)
    _, lo50, hi50 = median_ci(x, 0.50)
    assert lo95 <= lo50 <= hi50 <= hi95 and (hi50 - lo50) < (hi95 - lo95)


def test_summarize_fields():
    x = [1.0, 2.0, 4.0, 7.0, 11.0]
    s = summarize(x)
    assert s["n"] == 5 and s["median"] == 4.0
    assert s["mean"] == pytest.approx(5.0)
    assert s["std"] == pytest.approx(np.std(x, ddof=1))
    assert s["cv"] == pytest.approx(np.std(x, ddof=1) / 5.0)
    assert (s["min"], s["max"], s["ci_lo"], s["ci_hi"]) == (1.0, 11.0, 1.0, 11.0)
    assert summarize([3.0])["std"] == 0.0


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([2.0, 8.0], weights=[3, 1]) == pytest.approx(2.0 ** 1.5)
    assert geomean([2.0, 8.0], weights=[6, 2]) == pytest.approx(2.0 ** 1.5)
    assert geomean([5.0, 7.0], weights=[0, 1]) == pytest.approx(7.0)
    for bad in ([1.0, 0.0], [2.0, -1.0], []):
        with pytest.raises(ValueError):
            geomean(bad)
    with pytest.raises(ValueError):
        geomean([1.0, 2.0], weights=[1.0])
    with pytest.raises(ValueError):
        geomean([1.0, 2.0], weights=[0.0, 0.0])


def test_faster_beyond_noise_detects_clear_win():
    rng = np.random.default_rng(3)
    incumbent = 100.0 * rng.lognormal(0.0, 0.01, size=40)
    challenger = 90.0 * rng.lognormal(0.0, 0.01, size=40)
    assert faster_beyond_noise(challenger.tolist(), incumbent.tolist())
    assert not faster_beyond_noise(incumbent.tolist(), challenger.tolist())


def test_faster_beyond_noise_rejects_noise_and_tiny_gains():
    rng = np.random.default_rng(4)
    same_a = 50.0 * rng.lognormal(0.0, 0.05, size=30)
    same_b = 50.0 * rng.lognormal(0.0, 0.05, size=30)
    assert not faster_beyond_noise(same_a.tolist(), same_b.tolist())
    # 0.5% faster with almost no noise: separated, but below the 1% minimum gain
    inc = 100.0 + rng.normal(0.0, 0.001, size=30)
    cha = 99.5 + rng.normal(0.0, 0.001, size=30)
    assert not faster_beyond_noise(cha.tolist(), inc.tolist())
    assert faster_beyond_noise(cha.tolist(), inc.tolist(), min_rel_gain=0.004)
    # 10% faster median but a noisy challenger whose CI reaches the incumbent's
    noisy = 90.0 * rng.lognormal(0.0, 0.4, size=12)
    assert not faster_beyond_noise(noisy.tolist(), (100.0 + rng.normal(0, 0.1, 12)).tolist())


def test_relative_spread():
    assert relative_spread(1.0, 1.1) == pytest.approx(0.1)
    assert relative_spread(1.1, 1.0) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        relative_spread(0.0, 1.0)
