"""Attribution of a throughput ratio between two arms (server source): acceptance × batch ÷ step time, the step time
split over the speculative cycle's phases (spec_cycles) with logarithmic-mean (LMDI) weights, and counterfactuals."""

from __future__ import annotations

import math

import numpy as np

from speclogs.analysis import stats
from speclogs.analysis.results import Arm, Attribution, Counterfactual, Finding, PhaseStat, Term

PHASES = ("draft", "verify", "extend", "other", "cycle")
GAP_COLUMN = 6  # of the cycle statistic (compare._cycle_stat): mean GPU idle gap before a cycle, NaN when not measured
# profiled time per cycle further than this from the step time implied by accept len / throughput is a warning
CYCLE_ACCOUNTING_TOLERANCE = 0.10


def attribution(
    arm_a: str, arm_b: str, a: stats.GroupSummary, b: stats.GroupSummary,
    cyc_a: stats.GroupSummary | None, cyc_b: stats.GroupSummary | None, confidence: float,
) -> Attribution:
    """B against A from server summaries (log T, log accept, log batch, log step seconds) and, when both were profiled,
    cycle summaries (phase means in ms)."""
    total = _term("throughput", stats.diff_parts(a, b, 0), confidence)
    terms = (
        _term("acceptance", stats.diff_parts(a, b, 1), confidence),
        _term("batch size", stats.diff_parts(a, b, 2), confidence),
        _term("step time", stats.diff_parts(a, b, 3, -1.0), confidence),
    )

    def cf(text: str, b_coefficients: list[float], a_coefficients: list[float]) -> Counterfactual:
        result = stats.t_interval([stats.part(b, b_coefficients), stats.part(a, a_coefficients)], confidence)
        return Counterfactual(text, float(math.exp(result.point)), float(math.exp(result.low)), float(math.exp(result.high)))

    acc_a, acc_b = math.exp(a.point[1]), math.exp(b.point[1])
    counterfactuals = []
    if abs(acc_a - acc_b) > 1e-9:
        counterfactuals.append(cf(f"{arm_b} with {arm_a}'s acceptance (accept len {acc_a:.2f}) would run at",
                                  [1, -1, 0, 0], [0, 1, 0, 0]))
    counterfactuals.append(cf(f"{arm_b} with {arm_a}'s step time would run at", [1, 0, 0, 1], [0, 0, 0, -1]))
    if acc_b > 1.0 + 1e-9:
        counterfactuals.append(cf(f"{arm_b} would need accept len (at its own step time and batch) to match {arm_a}:",
                                  [-1, 1, 0, 0], [1, 0, 0, 0]))
    phase_terms = () if cyc_a is None or cyc_b is None else tuple(
        _term(phase, _lmdi(cyc_a, cyc_b, i), confidence) for i, phase in enumerate(PHASES[:4]))
    return Attribution(
        arm_a=arm_a, arm_b=arm_b, total=total, terms=terms, accept_len_a=acc_a, accept_len_b=acc_b,
        cycle_ms_a=1000 * math.exp(a.point[3]), cycle_ms_b=1000 * math.exp(b.point[3]),
        phase_terms=phase_terms, counterfactuals=tuple(counterfactuals),
    )


def _term(name: str, parts: stats.Parts, confidence: float) -> Term:
    result = stats.t_interval(parts, confidence)
    return Term(name=name, log_ratio=result.point, ci_low=result.low, ci_high=result.high)


def _log_mean(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        lm = (x - y) / (np.log(x) - np.log(y))
    return np.where(np.isclose(x, y), x, lm)


def _lmdi(a: stats.GroupSummary, b: stats.GroupSummary, i: int) -> stats.Parts:
    """Contribution of phase i to −log(cycle_B / cycle_A) (i.e. to the log throughput ratio): −Δphase / L(cycle_B,
    cycle_A) with L the logarithmic mean; the interval holds L at its point value (a linearisation)."""
    weight = float(_log_mean(np.array(b.point[4]), np.array(a.point[4])))
    return [stats.part(b, i, -1.0 / weight), stats.part(a, i, 1.0 / weight)]


def phase_stats(arm: str, group: stats.GroupSummary, n_rows: int, confidence: float) -> list[PhaseStat]:
    """Mean ms of each phase of one arm's profiled cycles with its interval and share of the GPU-busy cycle; where
    measured, 'gap' (GPU idle before a cycle: the host preparing it) and 'wall' = cycle + gap, what throughput sees."""
    cycle = group.point[4]
    m = group.per_launch.shape[1]
    columns = [(phase, np.eye(m)[i]) for i, phase in enumerate(PHASES)]
    if np.isfinite(group.point[GAP_COLUMN]):
        columns += [("gap", np.eye(m)[GAP_COLUMN]), ("wall", np.eye(m)[4] + np.eye(m)[GAP_COLUMN])]
    rows = []
    for phase, coefficients in columns:
        result = stats.t_interval([stats.part(group, coefficients)], confidence)
        rows.append(PhaseStat(arm=arm, phase=phase, mean_ms=result.point, ci_low_ms=result.low, ci_high_ms=result.high,
                              share=float(result.point / cycle) if cycle else float("nan"), n_rows=n_rows))
    return rows


def cycle_accounting(phases: list[PhaseStat], arms: list[Arm]) -> list[Finding]:
    """Do the profiled phases account for the time per cycle that accept len / throughput imply (the server step)?"""
    findings = []
    step_ms = {a.name: a.cycle_ms for a in arms}
    by_arm: dict[str, dict[str, PhaseStat]] = {}
    for p in phases:
        by_arm.setdefault(p.arm, {})[p.phase] = p
    for arm, rows in by_arm.items():
        if not (implied := step_ms.get(arm) or 0.0) > 0:
            continue
        parts = "draft + verify + extend + other"
        if "wall" in rows:
            measured = rows["wall"].mean_ms
            what = f"{parts} {rows['cycle'].mean_ms:.2f} ms + GPU idle gap {rows['gap'].mean_ms:.2f} ms = {measured:.2f} ms"
        else:
            measured = rows["cycle"].mean_ms
            what = f"{parts} = {measured:.2f} ms (no gap_ms on these spec_cycle lines, so GPU idle time between cycles is not counted)"
        off = measured / implied - 1.0
        message = f"{arm}: {what} per cycle vs {implied:.2f} ms implied by accept len / throughput ({off:+.1%})"
        if abs(off) <= CYCLE_ACCOUNTING_TOLERANCE:
            findings.append(Finding("cycle_accounting", f"{message}: within {CYCLE_ACCOUNTING_TOLERANCE:.0%}",
                                    severity="info", arms=(arm,)))
        else:
            findings.append(Finding(
                "cycle_accounting_gap",
                f"{message}: the phases do not account for the cycle — the GPU waits for the host between cycles "
                "(scheduling, sampling, Python); profile with a speclogs whose spec_cycle lines carry gap_ms",
                severity="warning", arms=(arm,)))
    return findings
