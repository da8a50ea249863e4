"""The distributions and Kendall's tau that speclogs.analysis computes with scipy.special, held to scipy.stats (the
report path does not import scipy.stats: its import costs more than a report's computation)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as scipy_stats

from speclogs.analysis import stats


@pytest.mark.parametrize("df", [0.7, 2.0, 3.3, 29.5, 1e4])
def test_t_interval_and_power_grid_use_scipy_stats_t_and_chi2(df: float) -> None:
    """stats and power call scipy.special's stdtr / stdtrit / gammaincinv (what scipy.stats is built on): the
    interval's half width and p-value are scipy.stats.t's, the power grid's variances scipy.stats.chi2's."""
    from speclogs.analysis import power

    part = stats.Part(values=np.array([0.0, 1.0]), within_var=0.0, within_df=0.0)
    variance, _ = part.variance()
    result = stats.t_interval([part, stats.Part(np.array([0.0]), variance * df / (df + 1), df)], 0.95)
    assert result.high - result.point == pytest.approx(float(scipy_stats.t.ppf(0.975, result.df)) * result.se, rel=1e-12)
    assert result.p_value == pytest.approx(2 * float(scipy_stats.t.sf(abs(result.point) / result.se, result.df)), rel=1e-12)
    grid = (np.arange(power.GRID_POINTS) + 0.5) / power.GRID_POINTS
    for launches in (2, 3, 10, 1000):
        expected = scipy_stats.chi2.ppf(grid, launches - 1) / (launches - 1)
        assert np.allclose(power._variance_grid(launches), expected, rtol=1e-12)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def test_kendall_tau_is_scipy_stats_asymptotic_kendalltau_against_the_order() -> None:
    rng = np.random.default_rng(7)
    checked = {"untied": 0, "ties": 0, "nan": 0}
    for trial in range(3000):
        n = int(rng.integers(3, 80))  # scipy's asymptotic variance divides by zero at n = 2
        y = rng.normal(size=n) + rng.uniform(-0.3, 0.3) * np.arange(n) / n
        if trial % 3 == 1:
            y = np.round(y, 1)  # ties
        if trial % 97 == 0:
            y = np.full(n, 3.0)  # constant: nan
        if trial % 89 == 0:
            y[n // 2] = math.nan
        if trial % 13 == 0:
            y = np.sort(y) if trial % 2 else np.sort(y)[::-1].copy()  # all or no discordant pairs
        tau, p_value = stats.kendall_tau(y)
        expected = scipy_stats.kendalltau(np.arange(n), y, method="asymptotic")
        assert _same(tau, float(expected.statistic)), (trial, y.tolist())
        assert _same(p_value, float(expected.pvalue)), (trial, y.tolist())
        ties = len(np.unique(y[~np.isnan(y)])) < np.count_nonzero(~np.isnan(y))
        checked["nan" if math.isnan(p_value) else "ties" if ties else "untied"] += 1
    assert min(checked.values()) > 20, checked


def test_the_report_path_does_not_import_scipy_stats() -> None:
    code = (
        "import sys, numpy as np\n"
        "from speclogs.analysis import power, stats\n"
        "rng = np.random.default_rng(1)\n"
        "stats.trend_test(rng.normal(size=500) + np.arange(500) / 100)\n"
        "stats.warmup_length(np.r_[np.full(30, 50.0), rng.normal(100, 1, 300)])\n"
        "power.launches_needed(0.05)\n"
        "power.min_detectable_ratio(0.05, 3, 3)\n"
        "assert 'scipy.stats' not in sys.modules, 'scipy.stats was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
