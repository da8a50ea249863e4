"""Power of the report's comparison (Welch t over per-launch log throughput), averaged over the sample variances'
χ² distributions (docs/report.md, "Power"): the Welch interval's width is itself random at 2–4 launches."""

from __future__ import annotations

import bisect
import math
from functools import lru_cache

import numpy as np

POWER = 0.8
MAX_LAUNCHES = 1000
GRID_POINTS = 64  # per sample variance


def _variance_grid(launches: int) -> np.ndarray:
    """Equal-probability points of s²/σ² ~ χ²_{L−1}/(L−1)."""
    from scipy.special import gammaincinv  # χ²'s quantile, as scipy.stats.chi2.ppf computes it

    df = launches - 1
    return 2.0 * gammaincinv(df / 2.0, (np.arange(GRID_POINTS) + 0.5) / GRID_POINTS) / df


@lru_cache(maxsize=256)
def _half_widths(la: int, lb: int, confidence: float) -> np.ndarray:
    """The interval's half-width over σ at each grid point of the two sample variances."""
    from scipy.special import stdtrit

    va = _variance_grid(la)[:, None] / la
    vb = _variance_grid(lb)[None, :] / lb
    df = (va + vb) ** 2 / (va**2 / (la - 1) + vb**2 / (lb - 1))
    return (stdtrit(df, 0.5 + confidence / 2.0) * np.sqrt(va + vb)).ravel()


def power(delta: float, sd: float, la: int, lb: int, confidence: float = 0.95, min_effect: float = 0.0) -> float:
    """Probability that a comparison of la vs lb launches names a winner when the true log ratio is `delta`."""
    from scipy.special import ndtr

    if la < 2 or lb < 2 or not sd > 0:
        return float("nan")
    half = sd * _half_widths(la, lb, confidence)
    se = sd * math.sqrt(1.0 / la + 1.0 / lb)
    threshold = math.log1p(min_effect)
    hits = ndtr((delta - threshold - half) / se) + ndtr((-delta - threshold - half) / se)
    return float(hits.mean())


def launches_needed(sd: float, effect: float = 0.05, confidence: float = 0.95, min_effect: float = 0.0,
                    target: float = POWER) -> int | None:
    """Smallest L (launches per arm) detecting a true ratio 1 + effect with the target power; None above MAX_LAUNCHES."""
    delta = math.log1p(effect)
    if power(delta, sd, MAX_LAUNCHES, MAX_LAUNCHES, confidence, min_effect) < target:
        return None
    launches = range(2, MAX_LAUNCHES + 1)  # power is increasing in L: bisect
    return launches[bisect.bisect_left(launches, True, key=lambda n: power(delta, sd, n, n, confidence, min_effect) >= target)]


def min_detectable_ratio(sd: float, la: int, lb: int, confidence: float = 0.95, min_effect: float = 0.0,
                         target: float = POWER) -> float:
    """Smallest true ratio > 1 that la vs lb launches detect with the target power (NaN with < 2 launches an arm)."""
    from scipy.optimize import brentq

    if la < 2 or lb < 2 or not sd > 0:
        return float("nan")
    se = sd * math.sqrt(1.0 / la + 1.0 / lb)
    high = math.log1p(min_effect) + 200 * se
    if power(high, sd, la, lb, confidence, min_effect) < target:
        return float("inf")
    delta = brentq(lambda d: power(d, sd, la, lb, confidence, min_effect) - target, 0.0, high, xtol=1e-6)
    return math.exp(delta)
