"""Two-stage (cluster) bootstrap over launches then units, rank tests, trend tests. Pure numpy/scipy.

The launch is the unit of replication: requests (or decode rows) inside one server launch share its warm-up,
its memory layout, its NCCL communicator, so they are not independent draws. The group statistic is the mean
over launches of a per-launch statistic on the log scale (a geometric mean of per-launch throughputs).
One bootstrap resample: draw launches with replacement; inside each drawn launch, draw its units (requests,
or blocks of consecutive decode rows) with replacement; sum the units' columns; apply the statistic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from speclogs.analysis.results import Term

# Within a launch, at most this many resampling units: longer series are cut into consecutive blocks
# (which also respects their autocorrelation better than single rows do).
MAX_UNITS_PER_LAUNCH = 128

StatFn = Callable[[np.ndarray], np.ndarray]  # (n, k) column sums -> (n, m) log-scale statistics


@dataclass(frozen=True)
class GroupDraws:
    """Point estimate (m,) and bootstrap draws (B, m) of a group statistic, plus per-launch point values (L, m)."""

    point: np.ndarray
    draws: np.ndarray
    per_launch: np.ndarray
    n_launches: int
    n_units: int


def block_sums(values: np.ndarray, segment_ids: np.ndarray | None = None, max_units: int = MAX_UNITS_PER_LAUNCH) -> np.ndarray:
    """Sum rows (n, k) into resampling units: by segment (e.g. one request) when given, then into at most max_units
    consecutive blocks. Returns (u, k)."""
    if len(values) == 0:
        return values.reshape(0, values.shape[1] if values.ndim == 2 else 0)
    if segment_ids is not None:
        change = np.r_[True, segment_ids[1:] != segment_ids[:-1]]
        starts = np.flatnonzero(change)
        values = np.add.reduceat(values, starts, axis=0)
    n = len(values)
    if n <= max_units:
        return values
    starts = np.linspace(0, n, max_units, endpoint=False).astype(np.int64)
    return np.add.reduceat(values, starts, axis=0)


def resample_group(
    launches: Sequence[np.ndarray], stat: StatFn, n_resamples: int, rng: np.random.Generator
) -> GroupDraws:
    """Two-stage bootstrap of mean-over-launches of stat(sum of units). Each element of `launches` is (u, k)."""
    per_launch_point = np.stack([stat(u.sum(axis=0, keepdims=True))[0] for u in launches])
    inner = []
    for units in launches:
        n = len(units)
        picks = rng.integers(0, n, size=(n_resamples, n), dtype=np.int32)
        picks += n * np.arange(n_resamples, dtype=np.int32)[:, None]
        counts = np.bincount(picks.ravel(), minlength=n_resamples * n)
        inner.append(stat(counts.reshape(n_resamples, n) @ units))
    draws_by_launch = np.stack(inner)  # (L, B, m)
    n_launches = len(launches)
    if n_launches == 1:
        draws = draws_by_launch[0]
    else:
        pick = rng.integers(0, n_launches, size=(n_resamples, n_launches))
        # a launch drawn twice in one resample gets two different inner resamples
        inner_index = (np.arange(n_resamples)[:, None] + 7919 * np.arange(n_launches)[None, :]) % n_resamples
        draws = draws_by_launch[pick, inner_index].mean(axis=1)
    return GroupDraws(
        point=per_launch_point.mean(axis=0),
        draws=draws,
        per_launch=per_launch_point,
        n_launches=n_launches,
        n_units=int(sum(len(u) for u in launches)),
    )


def percentile_interval(draws: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over axis 0 of bootstrap draws (ignoring non-finite draws)."""
    alpha = (1.0 - confidence) / 2.0
    finite = np.where(np.isfinite(draws), draws, np.nan)
    return np.nanquantile(finite, alpha, axis=0), np.nanquantile(finite, 1.0 - alpha, axis=0)


def interval(point: float, parts: Sequence[tuple[np.ndarray, int]], confidence: float) -> tuple[float, float]:
    """Interval for a sum of independent groups' contributions (e.g. log T_B − log T_A).

    parts: per group, (bootstrap draws (B,) of its signed contribution, number of launches in it).
    When every group has ≥ 2 launches: point ± t × SE, with each group's bootstrap variance inflated by L/(L−1)
    and Welch–Satterthwaite degrees of freedom over launches (Σ L−1). A plain percentile interval over few
    launches is too narrow: with 3 launches per arm and 3 % launch-to-launch noise it covered the truth 80 % of
    the time at nominal 95 % (tests/test_analysis_stats.py measures this). With a single launch in any group,
    the percentile interval of the summed draws (request noise only — the report says so).
    """
    from scipy.stats import t as student_t

    total = np.sum([draws for draws, _ in parts], axis=0)
    if any(n < 2 for _, n in parts):
        low, high = percentile_interval(total, confidence)
        return float(low), float(high)
    variances = [float(np.nanvar(draws)) * n / (n - 1) for draws, n in parts]
    se2 = sum(variances)
    if se2 <= 0 or not np.isfinite(se2):
        return float(point), float(point)
    df = se2**2 / sum(v**2 / (n - 1) for v, (_, n) in zip(variances, parts) if v > 0)
    q = float(student_t.ppf(0.5 + confidence / 2.0, df))
    half = q * float(np.sqrt(se2))
    return float(point - half), float(point + half)


def rank_test(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Mann-Whitney U p-value (scipy picks exact or asymptotic); None with fewer than 2 values a side."""
    from scipy.stats import mannwhitneyu

    if len(a) < 2 or len(b) < 2:
        return None
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


@dataclass(frozen=True)
class Trend:
    tau: float
    p_value: float
    relative_change: float  # (mean of last third − mean of first third) / overall mean
    n: int


TREND_BLOCKS = 50


def trend_test(values: np.ndarray) -> Trend | None:
    """Kendall's tau of values against their order (a monotone drift test), with the size of the drift.

    Long series are first averaged into TREND_BLOCKS consecutive blocks: neighbouring decode rows are
    autocorrelated, and a rank test on raw rows would call a wobble a trend (and be slow on 100k rows).
    """
    from scipy.stats import kendalltau

    n = len(values)
    if n < 10:
        return None
    series = values
    if n > TREND_BLOCKS:
        starts = np.linspace(0, n, TREND_BLOCKS, endpoint=False).astype(np.int64)
        series = np.add.reduceat(values, starts) / np.diff(np.r_[starts, n])
    result = kendalltau(np.arange(len(series)), series)
    third = max(n // 3, 1)
    mean = float(np.mean(values))
    change = (float(np.mean(values[-third:])) - float(np.mean(values[:third]))) / mean if mean else 0.0
    return Trend(tau=float(result.statistic), p_value=float(result.pvalue), relative_change=change, n=n)


def verdict_for(ci_low: float, ci_high: float, *, enough: bool) -> str:
    """The words for a ratio interval: a winner only when the interval excludes 1."""
    if not enough or not (np.isfinite(ci_low) and np.isfinite(ci_high)):
        return "insufficient data"
    if ci_low > 1.0:
        return "faster"
    if ci_high < 1.0:
        return "slower"
    return "no detectable difference"


Parts = list[tuple[np.ndarray, int]]


def term(name: str, point: float, parts: Parts, confidence: float) -> Term:
    low, high = interval(float(point), parts, confidence)
    return Term(name=name, log_ratio=float(point), ci_low=float(low), ci_high=float(high))


def diff_parts(a: GroupDraws, b: GroupDraws, column: int, sign: float = 1.0) -> Parts:
    """Parts of sign × (b[column] − a[column]) for interval."""
    return [(sign * b.draws[:, column], b.n_launches), (-sign * a.draws[:, column], a.n_launches)]
