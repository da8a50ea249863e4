"""Per-launch values, variance components and Student t intervals over launches (docs/report.md, "Statistics"): the
launch is the unit of replication, since requests inside one launch share its warm-up, memory layout and NCCL setup."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# at most this many units a launch: consecutive blocks also respect autocorrelation better than single rows
MAX_UNITS_PER_LAUNCH = 128

StatFn = Callable[[np.ndarray], np.ndarray]  # (n, k) column sums -> (n, m) statistics


@dataclass(frozen=True)
class GroupSummary:
    """A group statistic's per-launch values (L, m) and the within-launch covariance (m, m) of one launch's value."""

    per_launch: np.ndarray
    within_cov: np.ndarray
    within_df: float
    n_units: int
    aligned: bool  # within-launch noise from two-way residuals (launches with the same number of units)

    @property
    def n_launches(self) -> int:
        return int(self.per_launch.shape[0])

    @property
    def point(self) -> np.ndarray:
        return self.per_launch.mean(axis=0)


def block_sums(values: np.ndarray, segment_ids: np.ndarray | None = None, max_units: int = MAX_UNITS_PER_LAUNCH) -> np.ndarray:
    """Rows (n, k) summed by segment (e.g. one request) when given, then into at most max_units consecutive blocks."""
    if len(values) == 0:
        return values.reshape(0, values.shape[1] if values.ndim == 2 else 0)
    if segment_ids is not None:
        values = np.add.reduceat(values, np.flatnonzero(np.r_[True, segment_ids[1:] != segment_ids[:-1]]), axis=0)
    if len(values) <= max_units:
        return values
    return np.add.reduceat(values, np.linspace(0, len(values), max_units, endpoint=False).astype(np.int64), axis=0)


def summarize_group(launches: Sequence[np.ndarray], stat: StatFn) -> GroupSummary:
    """Per-launch values and within-launch noise of stat(sum of units), from each launch's (u, k) units."""
    with np.errstate(divide="ignore", invalid="ignore"):  # a stat of a zero sum is inf/NaN, not an error
        per_launch = np.stack([stat(u.sum(axis=0, keepdims=True))[0] for u in launches])
        usable = [len(u) * theta[None, :] - (len(u) - 1) * stat(u.sum(axis=0, keepdims=True) - u)  # jackknife pseudo-values
                  for u, theta in zip(launches, per_launch) if len(u) >= 2]
    m = per_launch.shape[1]
    aligned = len(usable) == len(launches) >= 2 and len({len(p) for p in usable}) == 1
    with np.errstate(invalid="ignore"):
        if aligned:
            stacked = np.stack(usable)  # (L, n, m)
            n_launch, n = stacked.shape[:2]
            residual = (stacked - stacked.mean(axis=1, keepdims=True) - stacked.mean(axis=0, keepdims=True)
                        + stacked.mean(axis=(0, 1), keepdims=True))
            df = float((n_launch - 1) * (n - 1))
            unit_cov = np.einsum("ljm,ljk->mk", residual, residual) / df
            within = unit_cov / n
        elif usable:
            centred = [p - p.mean(axis=0, keepdims=True) for p in usable]
            df = float(sum(len(p) - 1 for p in usable))
            unit_cov = sum(np.einsum("jm,jk->mk", c, c) for c in centred) / df
            within = unit_cov * float(np.mean([1.0 / len(p) for p in usable]))
        else:
            df, within = 0.0, np.zeros((m, m))
    return GroupSummary(per_launch=per_launch, within_cov=np.nan_to_num(within, nan=0.0, posinf=0.0, neginf=0.0),
                        within_df=df, n_units=int(sum(len(u) for u in launches)), aligned=aligned)


@dataclass(frozen=True)
class Part:
    """One group's term in a sum of groups: its per-launch values and the within-launch variance of one."""

    values: np.ndarray
    within_var: float
    within_df: float

    @property
    def n_launches(self) -> int:
        return len(self.values)

    def variance(self, floor: bool = True) -> tuple[float, float]:
        """(variance of the mean over launches, degrees of freedom); floor=False: the launches' spread alone."""
        if self.n_launches >= 2:
            spread = float(np.var(self.values, ddof=1))
            if floor and self.within_var > spread and self.within_df > self.n_launches - 1:  # the noise floor decides
                return self.within_var / self.n_launches, self.within_df
            return spread / self.n_launches, float(self.n_launches - 1)
        return self.within_var, self.within_df


def part(group: GroupSummary, coefficients: int | Sequence[float] | np.ndarray, scale: float = 1.0) -> Part:
    """scale × (a column, or a linear combination of columns) of a group, as a Part."""
    one_column = isinstance(coefficients, (int, np.integer))
    c = scale * (np.eye(group.per_launch.shape[1])[coefficients] if one_column else np.asarray(coefficients, dtype=float))
    used = c != 0
    values = group.per_launch[:, used] @ c[used]
    within = float(c[used] @ group.within_cov[np.ix_(used, used)] @ c[used])
    return Part(values=values, within_var=max(within, 0.0), within_df=group.within_df)


Parts = list[Part]


def pooled_components(groups: Sequence[GroupSummary], column: int) -> tuple[float, float]:
    """(launch-to-launch, within-launch) variance of one launch's value in a column, pooled over the groups (weights
    L − 1); launch-to-launch = the per-launch values' spread minus the within part, at least 0."""
    multi = [g for g in groups if g.n_launches >= 2]
    if not multi:
        return 0.0, float(np.mean([g.within_cov[column, column] for g in groups])) if groups else 0.0
    weights = [g.n_launches - 1 for g in multi]
    spread = float(np.average([np.var(g.per_launch[:, column], ddof=1) for g in multi], weights=weights))
    within = float(np.average([g.within_cov[column, column] for g in multi], weights=weights))
    return max(spread - within, 0.0), within


@dataclass(frozen=True)
class TInterval:
    """A sum of groups' means with its Student t interval and two-sided test of 0."""

    point: float
    se: float
    df: float
    low: float
    high: float
    p_value: float
    launches_covered: bool  # every group had ≥ 2 launches (else: within-launch noise only)


def t_interval(parts: Parts, confidence: float, floor: bool = True) -> TInterval:
    """Σ part means ± t(Welch–Satterthwaite df) × SE. floor=False: plain Welch, an adaptive run's stopping rule."""
    from scipy.special import stdtr, stdtrit  # Student t's cdf and quantile, as scipy.stats.t computes them

    point = float(sum(float(np.mean(p.values)) for p in parts))
    variances = [p.variance(floor) for p in parts]
    se2 = float(sum(v for v, _ in variances))
    covered = all(p.n_launches >= 2 for p in parts)
    if not math.isfinite(point) or not math.isfinite(se2):
        nan = float("nan")
        return TInterval(point, nan, nan, nan, nan, nan, covered)
    if se2 <= 0:
        return TInterval(point, 0.0, float("inf"), point, point, 0.0 if point != 0 else 1.0, covered)
    denominator = sum(v**2 / df for v, df in variances if v > 0 and df > 0)
    df = se2**2 / denominator if denominator > 0 else float("inf")
    se = math.sqrt(se2)
    half = float(stdtrit(df, 0.5 + confidence / 2.0)) * se
    p_value = 2.0 * float(stdtr(df, -abs(point) / se))
    return TInterval(point, se, df, point - half, point + half, p_value, covered)


def diff_parts(a: GroupSummary, b: GroupSummary, column: int, sign: float = 1.0) -> Parts:
    return [part(b, column, sign), part(a, column, -sign)]


# With no --min-effect, "equivalent" means inside ±5 %: the smallest change a speculative-decoding setting is usually
# tuned for; it is also the effect the launches-needed figure of an inconclusive verdict plans for.
DEFAULT_EFFECT = 0.05


def equivalence_margin(min_effect: float) -> float:
    return min_effect if min_effect > 0 else DEFAULT_EFFECT


def verdict_for(result: TInterval, *, enough: bool, min_effect: float = 0.0) -> str:
    """A winner ('faster' / 'slower') only with ≥ 2 launches per group and the interval beyond ±log(1 + min_effect);
    'equivalent' inside ±log(1 + equivalence_margin); else 'inconclusive' ('insufficient data': nothing to compare)."""
    if not enough or not math.isfinite(result.point):
        return "insufficient data"
    if not result.launches_covered or not (math.isfinite(result.low) and math.isfinite(result.high)):
        return "inconclusive"
    threshold = math.log1p(min_effect)
    if result.low > threshold:
        return "faster"
    if result.high < -threshold:
        return "slower"
    margin = math.log1p(equivalence_margin(min_effect))
    if -margin <= result.low and result.high <= margin:
        return "equivalent"
    return "inconclusive"


# Distributions come from scipy.special, the functions scipy.stats is built on: importing scipy.stats would cost a
# report more than its computation (tests/test_stats_functions.py holds them to scipy.stats' results).


def kendall_tau(y: np.ndarray) -> tuple[float, float]:
    """scipy.stats.kendalltau(arange(n), y, method="asymptotic"): (tau-b, p); O(n²), trend tests pass ≤ 50 values."""
    from scipy.special import ndtr

    y = np.asarray(y, dtype=float)
    n = len(y)
    if n < 2 or np.isnan(y).any():
        return math.nan, math.nan
    score = int(np.triu(np.sign(y[None, :] - y[:, None]), k=1).sum())  # concordant − discordant pairs
    _, counts = np.unique(y, return_counts=True)
    counts = counts[counts > 1].astype(np.int64)
    ties, pairs = int((counts * (counts - 1) // 2).sum()), n * (n - 1) // 2
    if ties == pairs:
        return math.nan, math.nan
    tau = min(1.0, max(-1.0, score / math.sqrt(pairs) / math.sqrt(pairs - ties)))
    variance = (n * (n - 1.0) * (2 * n + 5) - float((counts * (counts - 1.0) * (2 * counts + 5)).sum())) / 18
    return tau, float(2 * ndtr(-abs(score / math.sqrt(variance))))


@dataclass(frozen=True)
class Trend:
    tau: float
    p_value: float
    relative_change: float  # (mean of last third − mean of first third) / overall mean
    n: int


TREND_BLOCKS = 50


def trend_test(values: np.ndarray) -> Trend | None:
    """Kendall's tau against the order (a monotone drift test) over at most TREND_BLOCKS block means: neighbouring
    decode rows are autocorrelated, and a rank test on raw rows would call a wobble a trend."""
    n = len(values)
    if n < 10:
        return None
    series = values
    if n > TREND_BLOCKS:
        starts = np.linspace(0, n, TREND_BLOCKS, endpoint=False).astype(np.int64)
        series = np.add.reduceat(values, starts) / np.diff(np.r_[starts, n])
    tau, p_value = kendall_tau(series)
    third = max(n // 3, 1)
    mean = float(np.mean(values))
    change = (float(np.mean(values[-third:])) - float(np.mean(values[:third]))) / mean if mean else 0.0
    return Trend(tau=tau, p_value=p_value, relative_change=change, n=n)


def request_trend(values: np.ndarray, requests: np.ndarray) -> Trend | None:
    """trend_test over request means when there are ≥ 10 requests (a request's rows share its prompt, so prompts that
    differ would read as a trend over rows), else over the rows."""
    requests = np.asarray(requests)
    if len(values) and len(requests) == len(values):
        starts = np.flatnonzero(np.r_[True, requests[1:] != requests[:-1]])
        if len(starts) >= 10:
            means = np.add.reduceat(np.asarray(values, dtype=float), starts) / np.diff(np.r_[starts, len(values)])
            return trend_test(means)
    return trend_test(values)


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control over a set of tests)."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    ranked = np.maximum.accumulate(np.minimum(1.0, (len(p) - np.arange(len(p))) * p[order]))
    adjusted = np.empty_like(p)
    adjusted[order] = ranked
    return adjusted


WARMUP_BATCH = 5  # consecutive values per batch mean in the significance check (neighbouring decode rows correlate)


def warmup_length(series: np.ndarray, *, min_change: float = 0.03, alpha: float = 0.01) -> int:
    """Leading warm-up values of a throughput series (0: none): the least-squares change point in the mean (Hinkley
    1970) in the first half, kept when the prefix is slower by > min_change and a one-sided t on batch means (so
    autocorrelation counts) gives p < alpha / (cuts searched): Bonferroni, since the cut was chosen to maximise it."""
    from scipy.special import stdtr

    x = np.asarray(series, dtype=float)
    n = len(x)
    if n < 4 * WARMUP_BATCH:
        return 0
    total, squares = np.cumsum(x), np.cumsum(x**2)
    k = np.arange(WARMUP_BATCH, n // 2 + 1)
    left = squares[k - 1] - total[k - 1] ** 2 / k
    right = (squares[-1] - squares[k - 1]) - (total[-1] - total[k - 1]) ** 2 / (n - k)
    cut = int(k[np.argmin(left + right)])
    head, rest = x[:cut], x[cut:]
    if head.mean() >= rest.mean() * (1.0 - min_change):
        return 0
    batches = rest[: len(rest) // WARMUP_BATCH * WARMUP_BATCH].reshape(-1, WARMUP_BATCH).mean(axis=1)
    spread = float(np.std(batches, ddof=1)) * math.sqrt(WARMUP_BATCH)  # per-value SD, autocorrelation included
    if spread == 0:
        return cut
    statistic = (head.mean() - rest.mean()) / (spread * math.sqrt(1.0 / cut + 1.0 / len(rest)))
    return cut if float(stdtr(len(batches) - 1, statistic)) < alpha / len(k) else 0
