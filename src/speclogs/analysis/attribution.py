"""Attribution of a throughput ratio between two arms (server source): acceptance × batch ÷ step time, the step time
split over the speculative cycle's phases (spec_cycles) with logarithmic-mean (LMDI) weights, and counterfactuals."""

from __future__ import annotations

import math

import numpy as np

from speclogs.analysis import stats
from speclogs.analysis.results import Attribution, Counterfactual, PhaseStat, Term

PHASES = ("draft", "verify", "extend", "other", "cycle")


def attribution(
    arm_a: str, arm_b: str, a: stats.GroupDraws, b: stats.GroupDraws,
    cyc_a: stats.GroupDraws | None, cyc_b: stats.GroupDraws | None, confidence: float,
) -> Attribution:
    """B against A from their server-source draws (columns: log T, log accept, log batch, log step seconds) and,
    when both have profiling rows, their spec_cycles draws (phase means in ms)."""
    d_point = b.point - a.point
    total = stats.term("throughput", d_point[0], stats.diff_parts(a, b, 0), confidence)
    terms = (
        stats.term("acceptance", d_point[1], stats.diff_parts(a, b, 1), confidence),
        stats.term("batch size", d_point[2], stats.diff_parts(a, b, 2), confidence),
        stats.term("step time", -d_point[3], stats.diff_parts(a, b, 3, -1.0), confidence),
    )

    def cf(text: str, point: float, b_draws: np.ndarray, a_draws: np.ndarray) -> Counterfactual:
        low, high = stats.interval(float(point), [(b_draws, b.n_launches), (a_draws, a.n_launches)], confidence)
        return Counterfactual(text, float(math.exp(point)), float(math.exp(low)), float(math.exp(high)))

    acc_a, acc_b = math.exp(a.point[1]), math.exp(b.point[1])
    counterfactuals = []
    if abs(acc_a - acc_b) > 1e-9:
        counterfactuals.append(cf(f"{arm_b} with {arm_a}'s acceptance (accept len {acc_a:.2f}) would run at",
                                  b.point[0] - b.point[1] + a.point[1], b.draws[:, 0] - b.draws[:, 1], a.draws[:, 1]))
    counterfactuals.append(cf(f"{arm_b} with {arm_a}'s step time would run at",
                              b.point[0] + b.point[3] - a.point[3], b.draws[:, 0] + b.draws[:, 3], -a.draws[:, 3]))
    if acc_b > 1.0 + 1e-9:
        counterfactuals.append(cf(f"{arm_b} would need accept len (at its own step time and batch) to match {arm_a}:",
                                  b.point[1] - d_point[0], b.draws[:, 1] - b.draws[:, 0], a.draws[:, 0]))
    phase_terms: tuple[Term, ...] = ()
    if cyc_a is not None and cyc_b is not None:
        phase_terms = tuple(
            stats.term(phase, *_lmdi(cyc_a, cyc_b, i), confidence)
            for i, phase in enumerate(PHASES[:4])
        )
    return Attribution(
        arm_a=arm_a, arm_b=arm_b, total=total, terms=terms, accept_len_a=acc_a, accept_len_b=acc_b,
        cycle_ms_a=1000 * math.exp(a.point[3]), cycle_ms_b=1000 * math.exp(b.point[3]),
        phase_terms=phase_terms, counterfactuals=tuple(counterfactuals),
    )


def _log_mean(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        lm = (x - y) / (np.log(x) - np.log(y))
    return np.where(np.isclose(x, y), x, lm)


def _lmdi(a: stats.GroupDraws, b: stats.GroupDraws, i: int) -> tuple[float, stats.Parts]:
    """Contribution of phase i to −log(cycle_B / cycle_A) (i.e. to the log throughput ratio): −Δphase / L(cycle_B,
    cycle_A) with L the logarithmic mean; the interval holds L at its point value (a linearisation)."""
    weight = float(_log_mean(np.array(b.point[4]), np.array(a.point[4])))
    point = -(b.point[i] - a.point[i]) / weight
    return float(point), [(-b.draws[:, i] / weight, b.n_launches), (a.draws[:, i] / weight, a.n_launches)]


def phase_stats(arm: str, draws: stats.GroupDraws, n_rows: int, confidence: float) -> list[PhaseStat]:
    """Mean ms of each phase of one arm's profiled cycles, its interval and its share of the cycle."""
    cycle = draws.point[4]
    bounds = [stats.interval(float(draws.point[i]), [(draws.draws[:, i], draws.n_launches)], confidence)
              for i in range(len(PHASES))]
    return [
        PhaseStat(arm=arm, phase=phase, mean_ms=float(draws.point[i]), ci_low_ms=bounds[i][0], ci_high_ms=bounds[i][1],
                  share=float(draws.point[i] / cycle) if cycle else float("nan"), n_rows=n_rows)
        for i, phase in enumerate(PHASES)
    ]
