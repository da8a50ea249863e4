"""`compare_runs`, the analysis' entry: DuckDB → frames (load) → pure computation (`compare_tables`) → `Comparison`."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from speclogs.analysis import attribution, factorial, power, stats, steady as steady_rule
from speclogs.analysis.load import RunTables, load_run_tables, parse_json_text, resolve_arms
from speclogs.analysis.nccl import nccl_evidence
from speclogs.analysis.positions import draft_positions_for
from speclogs.analysis.results import Arm, Comparison, Estimate, Rank, RatioComparison
from speclogs.analysis.signals import signal_evidence_for
from speclogs.analysis.startup import startup_for
from speclogs.analysis.steady import client_rows, mark_steady, server_columns, steady_launches
from speclogs.analysis.whatif import whatif_for
from speclogs.errors import AnalysisError

TIMELINE_POINTS_PER_RUN = 1500

METHODS = {
    "replication": "The launch (one server start: a launcher directory or one log file) is the unit of replication; "
    "requests inside a launch are not independent.",
    "estimate": "Arm throughput = geometric mean over launches of (Σ tokens / Σ seconds) per launch.",
    "interval": "Variance components, each counted once: the variance of an arm's mean log throughput is "
    "(launch-to-launch + within-launch) / L, estimated by the spread of the per-launch values, never below the "
    "within-launch noise that the requests (or decode-row blocks) of each launch show (delete-one jackknife; two-way "
    "launch × position residuals when every launch replays the same prompts). Interval: Student t with "
    "Welch–Satterthwaite degrees of freedom over launches (deterministic: no resampling). With one launch in an arm: "
    "no interval and no verdict (its within-launch spread is shown as such).",
    "test": "Welch's t test on per-launch log throughput: the p-value comes from the same t statistic as the interval "
    "(p < 1 − confidence exactly when the interval excludes 1).",
    "verdict": "Three answers: a winner (≥ 2 launches per arm and an interval entirely beyond ±min_effect; default 0: "
    "beyond 1), 'equivalent' (the interval inside ±min_effect, or ±5 % without one), else 'inconclusive', with the "
    "smallest effect these launches detect (80 % power) and the launches per arm that would detect ±5 % (or "
    "±min_effect).",
    "client": "Client source: bench_requests without warm-up requests; per launch Σ completion_tokens / Σ latency_s.",
    "server": "Server source: steady-state decode_batches (rule in speclogs.analysis.steady); per launch "
    "Σ tokens per step / Σ seconds per step, from SGLang's gen throughput.",
    "attribution": "tok/s = accept_len × batch / step time, so log(T_B/T_A) = log accept ratio + log batch ratio − log "
    "step-time ratio exactly; profiling rows (spec_cycles) split the step time into draft/verify/extend/other with "
    "logarithmic-mean (LMDI) weights that add up.",
    "effects": "2^k factorial: main effect = mean over the other factors' levels of the log ratio high/low; interaction = "
    "difference of simple effects (for 2 factors: effect of A at B=high over effect of A at B=low); cell = geometric mean "
    "over its launches; Welch–Satterthwaite t over the cells' launches.",
}


Units = dict[str, dict[str, tuple[np.ndarray, int]]]  # source → run_id → (units, rows used), runs that have them


# the statistics of column sums (stats.summarize_group); a zero sum gives inf/NaN, which stays
def _client_stat(s: np.ndarray) -> np.ndarray:
    return np.log(s[:, [0]] / s[:, [1]])


def _server_stat(s: np.ndarray) -> np.ndarray:
    return np.column_stack(
        [np.log(s[:, 0] / s[:, 1]), np.log(s[:, 0] / s[:, 2]), np.log(s[:, 2] / s[:, 3]), np.log(s[:, 1] / s[:, 3])]
    )


def _cycle_stat(s: np.ndarray) -> np.ndarray:
    """draft, verify, extend, other, cycle (mean ms), accept len, gap (NaN where the profiler did not measure it)."""
    means = s[:, :5] / s[:, [7]]
    accept = (s[:, 5] + s[:, 6]) / s[:, 6]
    gap = np.where(s[:, 9] > 0, s[:, 8] / s[:, 9], np.nan)
    return np.column_stack([means, accept, gap])


STATS = {"client": _client_stat, "server": _server_stat, "cycles": _cycle_stat}


def _prepare_runs(tables: RunTables) -> tuple[Units, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    warmup = steady_rule.warmup_requests(client_rows(tables.bench))
    decode = mark_steady(tables.decode, tables.prefill, tables.launches,
                         graphs=steady_rule.graph_settings(tables.server_args), warmup_requests=warmup)
    clients = client_rows(tables.bench, steady_rule.detected_warmup_requests(decode))
    cycles_marked = steady_rule.mark_cycles(tables.spec_cycles, tables.prefill, tables.launches, decode)
    units: Units = {"client": {}, "server": {}, "cycles": {}}
    for run_id, rows in steady_launches(decode, ["running_req", "accept_len", "gen_throughput_tok_s", "segment"]):
        blocks, n = stats.block_sums(server_columns(rows), rows["segment"].to_numpy()), rows.height
        if run_id in units["server"]:  # a run of several launches (log files)
            blocks, n = np.concatenate([units["server"][run_id][0], blocks]), n + units["server"][run_id][1]
        units["server"][run_id] = (blocks, n)
    for (run_id,), requests in clients.filter(pl.col("excluded_reason").is_null()).partition_by("run_id", as_dict=True).items():
        units["client"][run_id] = (requests.select("tokens", "seconds").to_numpy().astype(float), requests.height)
    profiled = cycles_marked.filter(pl.col("steady") & pl.col("cycle_ms").is_not_null() & (pl.col("cycle_ms") > 0))
    for (run_id,), cycles in profiled.partition_by("run_id", as_dict=True).items():
        columns = cycles.select(
            pl.col("draft_ms").fill_null(0.0), pl.col("verify_ms").fill_null(0.0), pl.col("extend_ms").fill_null(0.0),
            pl.col("other_ms").fill_null(0.0), pl.col("cycle_ms"), pl.col("accepted_tokens").fill_null(0).cast(pl.Float64),
            pl.col("batch_size").fill_null(1).cast(pl.Float64).clip(lower_bound=1.0), pl.lit(1.0),
            pl.col("gap_ms").fill_null(0.0), pl.col("gap_ms").is_not_null().cast(pl.Float64).alias("has_gap"),
        ).to_numpy().astype(float)
        units["cycles"][run_id] = (stats.block_sums(columns), cycles.height)
    return units, decode, clients, cycles_marked


def _estimate(source: str, group: stats.GroupSummary, confidence: float, n_rows: int) -> Estimate:
    # one launch: its requests say nothing about the next launch, so no interval is claimed
    result = stats.t_interval([stats.part(group, 0)], confidence)
    low, high = (result.low, result.high) if group.n_launches >= 2 else (math.nan, math.nan)
    return Estimate(
        source=source, value_tok_s=float(math.exp(group.point[0])), ci_low_tok_s=float(math.exp(low)),
        ci_high_tok_s=float(math.exp(high)), n_launches=group.n_launches, n_units=group.n_units, n_rows=n_rows,
        per_launch_tok_s=tuple(float(math.exp(v)) for v in group.per_launch[:, 0]),
        within_cv=float(math.sqrt(group.within_cov[0, 0])),
    )


def parse_factor_options(options: Sequence[str]) -> dict[str, str]:
    """--factor `name=selector` strings → {name: selector}."""
    parsed: dict[str, str] = {}
    for option in options:
        name, sep, selector = option.partition("=")
        if not sep or not name.strip() or not selector.strip():
            raise AnalysisError(
                f"--factor {option!r} is not name=selector", hint="e.g. --factor nccl='*_nccl*' --factor spec='eagle3*'"
            )
        parsed[name.strip()] = selector.strip()
    return parsed


def parse_percent(text: str, option: str) -> float:
    """'2%' or '2 %' → 0.02, a bare number as a fraction ('0.02' → 0.02)."""
    try:
        value = float(text.strip().rstrip("%")) / (100.0 if text.strip().endswith("%") else 1.0)
    except ValueError:
        raise AnalysisError(f"{option} {text!r} is not a percentage", hint=f"e.g. {option} 2%") from None
    if not 0.0 <= value < 1.0:
        raise AnalysisError(f"{option} {text!r} is outside [0 %, 100 %)", hint=f"e.g. {option} 2%")
    return value


def parse_reference(text: str) -> tuple[float, float]:
    """--reference-acceptance: '2.0' → (2.0, 0.0); '2.0±0.05', '2.0+-0.05' or '2.0±2%' → (2.0, 0.05) / (2.0, 0.04)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*(?:(?:±|\+-|\+/-)\s*([0-9.]+)\s*(%?))?\s*", text)
    try:
        value = float(match[1])
        width = float(match[2] or 0) * (value / 100.0 if match[3] else 1.0)
    except (TypeError, ValueError):
        raise AnalysisError(f"--reference-acceptance {text!r} is not an accept length",
                            hint="e.g. --reference-acceptance 2.0 or 2.0±0.05 (the reference's own interval)") from None
    if value < 1.0 or width >= value:
        raise AnalysisError(f"--reference-acceptance {text!r}: an accept length is at least 1", hint="e.g. 2.0±0.05")
    return value, width


def compare_runs(
    con: Any,
    arms: Sequence[str],
    factors: Mapping[str, str] | None = None,
    confidence: float = 0.95,
    *,
    min_effect: float = 0.0,
    hidden_size: int | None = None,
    ignore_env: Sequence[str] = (),
    allow_mixed: bool = False,
    reference_acceptance: tuple[float, float] | None = None,
    trained_layers: list[int] | None = None,
) -> Comparison:
    """Compare arms (run selectors, `LABEL=SELECTOR`; the first is the reference) read from `con`. factors: {name:
    glob over run names} (else runs.factors); hidden_size: the target model's, for the NCCL evidence."""
    if not 0.5 <= confidence < 1.0:
        raise AnalysisError(f"confidence {confidence} is outside [0.5, 1)", hint="e.g. --confidence 0.95")
    if not 0.0 <= min_effect < 1.0:
        raise AnalysisError(f"min effect {min_effect:.1%} is outside [0 %, 100 %)", hint="e.g. --min-effect 2%")
    arm_runs = resolve_arms(con, list(arms), allow_mixed=allow_mixed)
    all_ids = [run_id for ids in arm_runs.values() for run_id in ids]
    tables = load_run_tables(con, all_ids)
    nccl = nccl_evidence(con, all_ids, hidden_size=hidden_size)
    signals = signal_evidence_for(con, arm_runs)
    comparison = compare_tables(tables, arm_runs, factors, confidence, min_effect=min_effect, nccl=nccl, ignore_env=ignore_env,
                                reference_acceptance=reference_acceptance, trained_layers=trained_layers,
                                signals=signals if signals.windows or signals.device_phases or signals.request_acceptance else None)
    startup = startup_for(con, arm_runs)
    try:  # the what-if needs profiled cycles
        predicted = whatif_for(con, all_ids, confidence, tables=tables, evidence=comparison.signals)
    except AnalysisError:
        predicted = None
    warnings = comparison.warnings + (startup.findings if startup else ())
    return replace(comparison, startup=startup, whatif=predicted, warnings=warnings,
                   draft_positions=draft_positions_for(con, arm_runs))


def compare_tables(
    tables: RunTables,
    arm_runs: Mapping[str, list[str]],
    factors: Mapping[str, str] | None = None,
    confidence: float = 0.95,
    *,
    min_effect: float = 0.0,
    nccl: Any = None,
    signals: Any = None,
    ignore_env: Sequence[str] = (),
    reference_acceptance: tuple[float, float] | None = None,
    trained_layers: list[int] | None = None,
) -> Comparison:
    """`compare_runs`' computation, pure: RunTables and {arm: run_ids} (reference first) in; `nccl`, `signals`: their
    evidence (speclogs.analysis.nccl, .signals), whose findings join the warnings."""
    from speclogs.analysis import lint

    arm_runs = dict(arm_runs)
    units, decode, clients, cycles = _prepare_runs(tables)
    names = dict(zip(tables.runs["run_id"].to_list(), tables.runs["run_name"].to_list()))

    for arm, ids in arm_runs.items():
        if not any(r in units["server"] or r in units["client"] for r in ids):
            excluded = decode.filter(pl.col("run_id").is_in(ids))
            detail = (
                "no decode rows" if excluded.is_empty()
                else f"{excluded.height} decode rows, none in steady state ({_reason_counts(excluded)})"
            )
            raise AnalysisError(
                f"arm {arm!r} (runs {', '.join(names[r] for r in ids)}): nothing to measure — {detail} and no usable "
                "client requests (bench_requests)",
                hint="ingest the run's bench file, or check the log has 'Decode batch' lines after /health 200",
            )

    levels, factor_findings = factorial.factor_levels(tables, arm_runs, dict(factors or {}))
    reference = next(iter(arm_runs))
    summaries: dict[tuple[str, str], tuple[stats.GroupSummary, int] | None] = {}

    def summary_for(ids: Sequence[str], source: str) -> tuple[stats.GroupSummary, int] | None:
        # keyed by the set of runs, so an arm and an identical factorial cell share one summary
        key = (source, ",".join(sorted(ids)))
        if key not in summaries:
            got = [units[source][r] for r in ids if r in units[source]]
            summaries[key] = (stats.summarize_group([u for u, _ in got], STATS[source]), sum(n for _, n in got)) if got else None
        return summaries[key]

    arm_objects = []
    for arm, ids in arm_runs.items():
        client, server = summary_for(ids, "client"), summary_for(ids, "server")
        run_rows = tables.runs.filter(pl.col("run_id").is_in(ids))
        arm_objects.append(Arm(
            name=arm, run_names=tuple(names[r] for r in ids), run_ids=tuple(ids),
            speculative_algorithm=",".join(sorted({a for a in run_rows["speculative_algorithm"].to_list() if a})) or None,
            sglang_versions=tuple(sorted({v for v in run_rows["sglang_version"].to_list() if v})),
            factor_levels=factorial.arm_levels(levels, ids),
            client=_estimate("client", client[0], confidence, client[1]) if client else None,
            server=_estimate("server", server[0], confidence, server[1]) if server else None,
            accept_len=float(math.exp(server[0].point[1])) if server else None,
            cycle_ms=float(1000 * math.exp(server[0].point[3])) if server else None,
            batch_size=float(math.exp(server[0].point[2])) if server else None,
        ))

    designs = _adaptive_designs(tables)
    comparisons, attributions = [], []
    for arm_b, ids_b in list(arm_runs.items())[1:]:
        sequential = sequential_confidence(designs, arm_runs[reference], ids_b, confidence)
        a, b = ({source: summary_for(ids, source) for source in STATS} for ids in (arm_runs[reference], ids_b))
        comparisons += [_ratio(reference, arm_b, source, a[source][0], b[source][0], confidence, min_effect, sequential)
                        for source in ("client", "server") if a[source] and b[source]]
        if a["server"] and b["server"]:
            cycles_a, cycles_b = (c[0] if (c := side["cycles"]) else None for side in (a, b))
            attributions.append(attribution.attribution(reference, arm_b, a["server"][0], b["server"][0], cycles_a, cycles_b,
                                                        confidence))

    ranking = _ranking(arm_objects, arm_runs, summary_for, confidence, min_effect, designs)

    phases = [row for arm, ids in arm_runs.items() if (cyc := summary_for(ids, "cycles"))
              for row in attribution.phase_stats(arm, cyc[0], cyc[1], confidence)]
    cycle_findings = attribution.cycle_accounting(phases, arm_objects)

    effects, factor_span, effect_findings = factorial.effects(levels, arm_runs, reference, summary_for, confidence,
                                                              bool(factors), min_effect)

    arm_of = {r: arm for arm, ids in arm_runs.items() for r in ids}
    timeline = _timeline(decode, tables, arm_of, names)
    warmup_spans = (timeline.group_by("run_name", "arm")  # from the launch's start to its first steady decode row
                    .agg(pl.lit(0.0).alias("t_start_s"), pl.col("t_s").filter(pl.col("steady")).min().alias("t_end_s"))
                    .filter(pl.col("t_end_s").is_not_null()).sort("run_name"))
    accept_hist = _accept_hist(decode, clients, cycles, arm_of)
    findings = lint.lint_comparison(
        tables=tables, decode=decode, clients=clients, cycles=cycles, arm_runs=arm_runs, arms=arm_objects,
        comparisons=comparisons, levels=levels, run_data_rows={r: units["server"].get(r, (None, 0))[1] for r in names},
        ignore_env=ignore_env, confidence=confidence, min_effect=min_effect, reference_acceptance=reference_acceptance,
        trained_layers=trained_layers,
        accept_intervals={arm: (math.exp(r.low), math.exp(r.high)) for arm, ids in arm_runs.items()
                          if (s := summary_for(ids, "server")) and (r := stats.t_interval([stats.part(s[0], 1)], confidence))},
    )
    if nccl is not None:  # the evidence's findings name runs; in a comparison they concern those runs' arms too
        arms_of: dict[str, list[str]] = {}
        for run_id, arm in arm_of.items():
            arms_of.setdefault(names[run_id], []).append(arm)
        nccl = replace(nccl, findings=tuple(
            replace(f, arms=tuple(dict.fromkeys(a for run in f.runs for a in arms_of.get(run, ())))) for f in nccl.findings))
    warnings = [*factor_findings, *effect_findings, *findings, *cycle_findings, *(nccl.findings if nccl else ()),
                *(signals.findings if signals else ())]
    return Comparison(
        arms=tuple(arm_objects), reference=reference, confidence=confidence, min_effect=min_effect,
        warnings=tuple(sorted(warnings, key=lambda f: f.severity != "warning")), comparisons=tuple(comparisons),
        attributions=tuple(attributions), effects=tuple(effects), factors=factor_span, timeline=timeline,
        accept_hist=accept_hist, phases=tuple(phases), warmup_spans=warmup_spans, methods=dict(METHODS), nccl=nccl,
        ranking=ranking, signals=signals,
    )


def _ranking(arms: Sequence[Arm], arm_runs: Mapping[str, list[str]], summary_for, confidence: float,
             min_effect: float, designs: Mapping[str, dict]) -> tuple[Rank, ...]:
    """Every arm, fastest first, each against the fastest with the comparison's own interval and verdict; on the
    client source when every arm has one (what users measure), else the server's."""
    source = "client" if all(a.client for a in arms) else "server" if all(a.server for a in arms) else None
    if len(arms) < 2 or source is None:
        return ()
    ordered = sorted(arms, key=lambda a: -getattr(a, source).value_tok_s)
    best = ordered[0]
    best_summary = summary_for(arm_runs[best.name], source)[0]
    ranks = []
    for arm in ordered:
        estimate = getattr(arm, source)
        vs_best = None if arm is best else _ratio(
            best.name, arm.name, source, best_summary, summary_for(arm_runs[arm.name], source)[0], confidence, min_effect,
            sequential_confidence(designs, arm_runs[best.name], arm_runs[arm.name], confidence))
        ranks.append(Rank(arm.name, source, estimate.value_tok_s, estimate.n_launches, vs_best))
    return tuple(ranks)


def _adaptive_designs(tables: RunTables) -> dict[str, dict]:
    """run_id → the adaptive design its run.json records (speclogs launch --until), for runs that have one."""
    designs = {run_id: parse_json_text(text).get("adaptive")
               for run_id, text in zip(tables.runs["run_id"].to_list(), tables.runs["run_json"].to_list())}
    return {run_id: d for run_id, d in designs.items()
            if isinstance(d, dict) and isinstance(d.get("nominal_level"), (int, float))}


def sequential_confidence(designs: Mapping[str, dict], ids_a: Sequence[str], ids_b: Sequence[str],
                          confidence: float) -> float | None:
    """1 − the per-look nominal level of the adaptive design every launch of both arms comes from (at this confidence),
    else None: a fixed-sample interval at a data-chosen stop names false winners more often than its level, the
    design's repeated confidence interval keeps it (speclogs.launcher.adaptive)."""
    keys = {(tuple(d.get("cells") or ()), d["nominal_level"], d.get("confidence")) if d else None
            for d in (designs.get(r) for r in (*ids_a, *ids_b))}
    if len(keys) != 1 or None in keys:
        return None
    _, nominal, design_confidence = keys.pop()
    same = design_confidence is not None and abs(float(design_confidence) - confidence) <= 1e-9 and 0 < nominal < 1
    return 1.0 - float(nominal) if same else None


def _reason_counts(rows: pl.DataFrame) -> str:
    counts = rows.group_by("excluded_reason").len().sort("len", descending=True)
    return ", ".join(f"{r or 'steady'}: {n}" for r, n in counts.iter_rows())


def _ratio(arm_a: str, arm_b: str, source: str, a: stats.GroupSummary, b: stats.GroupSummary, confidence: float,
           min_effect: float, sequential: float | None = None) -> RatioComparison:
    """B against A. `sequential`: the adaptive design's per-look confidence; its repeated confidence interval (Welch on
    per-launch values, no within-launch floor: the run's own rule) gives the interval, p-value and verdict."""
    result = stats.t_interval(stats.diff_parts(a, b, 0), sequential or confidence, floor=sequential is None)
    single = not result.launches_covered  # one launch per arm: no interval, p-value or launch count is claimed
    between, within = stats.pooled_components([a, b], 0)
    spread = math.sqrt(between + within)
    target = stats.equivalence_margin(min_effect)
    nan = float("nan")
    low, high = math.exp(result.low), math.exp(result.high)
    if single:
        test = (f"one launch per arm ({a.n_launches} vs {b.n_launches}): no interval — the launch-to-launch noise is "
                "unknown (need ≥ 2 launches per arm)")
    else:
        test = (f"Welch's t on per-launch log {source} throughput ({a.n_launches} vs {b.n_launches} launches, "
                f"df {result.df:.1f}); the p-value and the interval come from the same t statistic")
    if sequential and not single:
        test += (f"; adaptive run: the launcher's repeated confidence interval (each look at {sequential:.2%}, "
                 f"{confidence:.0%} over all looks), the p-value compared with {1 - sequential:.2%}")
    return RatioComparison(
        metric="throughput", source=source, unit="tok/s", arm_a=arm_a, arm_b=arm_b, a=float(math.exp(a.point[0])),
        b=float(math.exp(b.point[0])), ratio=float(math.exp(result.point)), ci_low=nan if single else low,
        ci_high=nan if single else high, p_value=None if single else result.p_value, test=test, n_a=a.n_launches,
        n_b=b.n_launches, n_units_a=a.n_units, n_units_b=b.n_units,
        verdict=stats.verdict_for(result, enough=a.n_units >= 2 and b.n_units >= 2, min_effect=min_effect),
        interval_covers="none (one launch per arm)" if single else
        "launches and requests, at every look of the adaptive run" if sequential else "launches and requests",
        df=result.df, launch_cv=nan if single else math.sqrt(between), within_cv=math.sqrt(within),
        min_detectable_ratio=nan if single else power.min_detectable_ratio(spread, a.n_launches, b.n_launches,
                                                                           confidence, min_effect),
        launches_needed=power.launches_needed(spread, target, confidence) if spread > 0 and not single else None,
        target_effect=target, within_low=low if single else nan, within_high=high if single else nan,
    )


def _timeline(decode: pl.DataFrame, tables: RunTables, arm_of: Mapping[str, str], names) -> pl.DataFrame:
    keep = timeline_rows(_codes(decode["run_id"]), decode["steady"].to_numpy(), TIMELINE_POINTS_PER_RUN)
    start = tables.launches.group_by("run_id").agg(pl.col("start_ts").min().alias("_start"))
    rows = (decode.filter(pl.Series(keep)).with_columns(pl.col("run_id").cast(pl.Utf8), pl.col("excluded_reason").cast(pl.Utf8))
            .join(start, on="run_id", how="left"))
    start_ts = pl.coalesce("_start", pl.col("ts").min().over("run_id"))  # no launch record: the run's first row
    return rows.with_columns(
        ((pl.col("ts") - start_ts).dt.total_milliseconds() / 1000.0).alias("t_s"),
        pl.col("run_id").replace_strict(names, default=None, return_dtype=pl.Utf8).alias("run_name"),
        pl.col("run_id").replace_strict(arm_of, default=None, return_dtype=pl.Utf8).alias("arm"),
    ).select("run_name", "arm", "t_s", "gen_throughput_tok_s", "accept_len", "accept_rate", "steady", "excluded_reason")


def timeline_rows(run: np.ndarray, steady: np.ndarray, points: int) -> np.ndarray:
    """Mask of the rows a run's timeline keeps, at most `points` per run (every row of a run with no more): its
    excluded rows evenly spaced, at most half of `points`, then its steady rows evenly spaced from the first one.
    `run`: a run code per row; rows keep their order."""
    keep = np.zeros(len(run), dtype=bool)
    starts = np.flatnonzero(np.r_[True, run[1:] != run[:-1]]) if len(run) else np.zeros(0, dtype=np.int64)
    blocks: dict[int, list[tuple[int, int]]] = {}  # a run's rows: its blocks of consecutive rows, in order
    for code, start, stop in zip(run[starts].tolist(), starts.tolist(), np.r_[starts[1:], len(run)].tolist()):
        blocks.setdefault(code, []).append((start, stop))
    for ranges in blocks.values():
        first = np.array([start for start, _ in ranges], dtype=np.int64)
        offset = np.r_[0, np.cumsum([stop - start for start, stop in ranges])]  # the run's rows, numbered 0 … n − 1
        if offset[-1] <= points:
            for start, stop in ranges:
                keep[start:stop] = True
            continue
        # the excluded rows by number (few, as a rule); the j-th steady row is row j + (excluded rows before it)
        all_excluded = np.concatenate([np.flatnonzero(~steady[start:stop]) + offset[i]
                                       for i, (start, stop) in enumerate(ranges)])
        n_steady = int(offset[-1]) - len(all_excluded)
        excluded = all_excluded[::-(-len(all_excluded) // (points // 2))] if len(all_excluded) > points // 2 else all_excluded
        room = points - len(excluded)
        j = np.arange(0, n_steady, -(-n_steady // room) if n_steady > room else 1)
        kept = j + np.searchsorted(all_excluded - np.arange(len(all_excluded)), j, side="right")
        for numbers in (excluded, kept):  # back to rows of the frame
            block = np.searchsorted(offset, numbers, side="right") - 1
            keep[first[block] + numbers - offset[block]] = True
    return keep


def _codes(run_id: pl.Series) -> np.ndarray:
    """An integer per row naming its run (an Enum's codes; the strings' first-seen order otherwise)."""
    if isinstance(run_id.dtype, pl.Enum):
        return run_id.to_physical().to_numpy()
    return run_id.cast(pl.Categorical).to_physical().to_numpy()


def _accept_hist(decode: pl.DataFrame, clients: pl.DataFrame, cycles: pl.DataFrame, arm_of: Mapping[str, str]
                 ) -> pl.DataFrame:
    accepted = 1.0 + pl.col("accepted_tokens").cast(pl.Float64) / pl.col("batch_size").fill_null(1).clip(lower_bound=1)
    sources = [  # (frame, source, the rows that count, accept length)
        (decode, "server decode rows", pl.col("steady") & pl.col("accept_len").is_not_null(), pl.col("accept_len")),
        (clients, "client requests", pl.col("excluded_reason").is_null() & pl.col("spec_accept_length").is_not_null(),
         pl.col("spec_accept_length")),
        (cycles, "profiled cycles", pl.col("steady") & pl.col("accepted_tokens").is_not_null(), accepted),
    ]
    counts = pl.concat([  # counted per run first: decode rows are millions
        frame.lazy().filter(keep).group_by(pl.col("run_id").cast(pl.Utf8), value.cast(pl.Float64).round(2).alias("accept_len"))
        .len("count").with_columns(pl.lit(source).alias("source")).collect() for frame, source, keep, value in sources])
    return (counts.with_columns(pl.col("run_id").replace_strict(arm_of, default=None, return_dtype=pl.Utf8).alias("arm"))
            .group_by("arm", "source", "accept_len").agg(pl.col("count").sum()).sort("arm", "source", "accept_len"))
