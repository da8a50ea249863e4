"""Result types of `compare_runs`: frozen dataclasses, warnings as data; fields as in docs/report.md (JSON).
Ratios are B/A with A the reference arm."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

UNSET = "unset"  # how every report writes a setting a run does not have (env variable, server argument, NCCL setting)


@dataclass(frozen=True)
class Finding:
    """A warning ('the numbers below may mislead') or an 'info' note (how they were made), shown above every report."""

    code: str  # stable identifier (e.g. `confounder_env`, `single_launch`)
    message: str
    severity: str = "warning"
    arms: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Estimate:
    """A throughput level of one arm from one source: geometric mean over launches, with its t interval."""

    source: str  # 'client' (bench_requests) | 'server' (steady-state decode_batches)
    value_tok_s: float
    ci_low_tok_s: float
    ci_high_tok_s: float
    n_launches: int
    n_units: int  # requests (client) or blocks of decode rows (server)
    n_rows: int
    per_launch_tok_s: tuple[float, ...]
    within_cv: float = 0.0


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: the runs (launches) a name or glob selected."""

    name: str
    run_names: tuple[str, ...]
    run_ids: tuple[str, ...]
    speculative_algorithm: str | None
    sglang_versions: tuple[str, ...]
    factor_levels: dict[str, str]  # factor -> level ('mixed' when its runs disagree)
    client: Estimate | None
    server: Estimate | None
    accept_len: float | None  # token-weighted over steady-state decode rows (1.0 for non-speculative runs)
    cycle_ms: float | None  # one decode step (a draft+verify cycle, or a plain decode step)
    batch_size: float | None


@dataclass(frozen=True)
class RatioComparison:
    """One row of `comparisons[]`: arm B against the reference arm A on one metric."""

    metric: str
    source: str
    unit: str
    arm_a: str
    arm_b: str
    a: float
    b: float
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float | None
    test: str  # which test gave p_value, and on what
    n_a: int  # launches
    n_b: int
    n_units_a: int
    n_units_b: int
    verdict: str  # stats.verdict_for
    interval_covers: str
    df: float = float("nan")
    launch_cv: float = float("nan")
    within_cv: float = float("nan")
    min_detectable_ratio: float = float("nan")
    launches_needed: int | None = None
    target_effect: float = 0.05
    within_low: float = float("nan")  # one launch per arm: the interval its requests alone give
    within_high: float = float("nan")


@dataclass(frozen=True)
class Rank:
    """One place of the ranking (fastest first): an arm's throughput and its ratio to the fastest arm."""

    arm: str
    source: str
    value_tok_s: float
    n_launches: int
    vs_best: RatioComparison | None  # None for the fastest itself


@dataclass(frozen=True)
class Term:
    """An additive term of a log-ratio decomposition, with its t interval (natural-log units)."""

    name: str
    log_ratio: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class PhaseStat:
    """One phase of the speculative cycle for one arm, from spec_cycles profiling rows."""

    arm: str
    phase: str  # draft | verify | extend | other | cycle, and gap | wall (= cycle + gap) when gap_ms was measured
    mean_ms: float
    ci_low_ms: float
    ci_high_ms: float
    share: float  # of the GPU-busy cycle ("wall" is above 1 by the idle gap)
    n_rows: int


@dataclass(frozen=True)
class Counterfactual:
    text: str
    value_tok_s: float
    ci_low_tok_s: float
    ci_high_tok_s: float


@dataclass(frozen=True)
class Attribution:
    """Why B's server throughput differs from A's: log(T_B/T_A) = log(accept ratio) + log(batch ratio) − log(cycle
    ratio); `terms` add up to `total`, `phase_terms` (LMDI weights, when both arms were profiled) to the cycle term."""

    arm_a: str
    arm_b: str
    total: Term
    terms: tuple[Term, ...]
    accept_len_a: float
    accept_len_b: float
    cycle_ms_a: float
    cycle_ms_b: float
    phase_terms: tuple[Term, ...]
    counterfactuals: tuple[Counterfactual, ...]


@dataclass(frozen=True)
class Effect:
    """A factorial effect on log throughput, as a ratio with its interval."""

    name: str
    kind: str  # 'main' | 'interaction' | 'simple' (the other factors held at a level)
    source: str
    ratio: float
    ci_low: float
    ci_high: float
    low: str
    high: str
    verdict: str
    n_launches: int


@dataclass(frozen=True)
class Comparison:
    """Everything `speclogs report` shows. Built by `compare_runs`; rendered by speclogs.report."""

    arms: tuple[Arm, ...]
    reference: str
    confidence: float
    min_effect: float
    warnings: tuple[Finding, ...]
    comparisons: tuple[RatioComparison, ...]
    attributions: tuple[Attribution, ...]
    effects: tuple[Effect, ...]
    factors: dict[str, tuple[str, str]]  # factor -> (low level, high level)
    # run_name, arm, t_s, gen_throughput_tok_s, accept_len, accept_rate, steady, excluded_reason (thinned for charts)
    timeline: pl.DataFrame
    accept_hist: pl.DataFrame  # arm, source, accept_len, count
    phases: tuple[PhaseStat, ...]
    warmup_spans: pl.DataFrame  # run_name, arm, t_start_s, t_end_s: from launch start to the first steady decode row
    methods: dict[str, str]
    nccl: Any = None  # speclogs.analysis.nccl.NcclEvidence
    signals: Any = None  # speclogs.analysis.signals.SignalEvidence
    ranking: tuple[Rank, ...] = ()  # fastest first (empty with one arm)
    startup: Any = None  # speclogs.analysis.startup.StartupBreakdown
    whatif: Any = None  # speclogs.analysis.whatif.WhatIf
    draft_positions: pl.DataFrame | None = None  # speclogs.analysis.positions
