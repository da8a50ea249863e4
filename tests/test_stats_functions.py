"""The distributions and Kendall's tau that speclogs.analysis computes with scipy.special, held to scipy.stats.

scipy.stats takes 0.5 s to import (a tenth of a report on two 10M-line runs); stats.py uses the scipy.special
functions scipy.stats itself is built on, and its own Kendall tau. These tests import scipy.stats to compare.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as scipy_stats

from speclogs.analysis import stats

DFS = [0.7, 1.0, 1.5, 2.0, 3.3, 7.0, 29.5, 100.0, 1e4, 1e7, math.inf]


@pytest.mark.parametrize("df", DFS)
def test_t_quantile_and_cdf_are_scipy_stats_t(df: float) -> None:
    for q in (1e-6, 0.025, 0.3, 0.5, 0.9, 0.95, 0.975, 0.995, 0.9995):
        assert stats.t_quantile(q, df) == float(scipy_stats.t.ppf(q, df))
    for x in (-40.0, -3.1, -1.0, -1e-9, 0.0, 0.5, 2.2, 12.0, math.inf, -math.inf):
        assert stats.t_cdf(x, df) == float(scipy_stats.t.cdf(x, df))
        assert stats.t_cdf(-x, df) == float(scipy_stats.t.sf(x, df))


def test_t_quantile_of_an_array_of_df_and_chi2_quantile_are_scipy_stats() -> None:
    df = np.array(DFS[:-1])
    assert np.array_equal(stats.t_quantile(0.975, df), scipy_stats.t.ppf(0.975, df))
    grid = (np.arange(64) + 0.5) / 64
    for df in (1, 2, 3, 9, 49, 999):
        assert np.array_equal(stats.chi2_quantile(grid, df), scipy_stats.chi2.ppf(grid, df))


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
