"""What stock SGLang's own signals say next to the log lines (docs/report.md, "SGLang's own signals"): exact accept
length from counter deltas, the device timer's phase split, per-request acceptance. `signal_evidence_for(con,
arm_runs)` loads the rows; `signal_evidence(tables, arm_runs)` is pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from speclogs.analysis.load import IN_RUNS, parse_json_text, select
from speclogs.analysis.results import Comparison, Finding
from speclogs.runrecord import RunRecord

GENERATION_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
FORWARD_SECONDS = "sglang:forward_execution_seconds_total"
CATEGORY_PHASE = {"target_verify": "verify", "eagle_draft": "draft", "frozen_kv_draft": "draft",
                  "eagle_draft_extend": "extend", "decode": "decode", "extend": "prefill", "split_prefill": "prefill",
                  "idle": "idle"}
CYCLE_PHASES = ("verify", "draft", "extend", "decode")
ACCEPT_TOLERANCE = 0.02       # relative: decode lines print 2 decimals and cover whole 40-step intervals
REQUEST_TOLERANCE = 0.005     # relative: the counters and the requests count the same finished requests
PHASE_TOLERANCE = 0.10
HISTOGRAM_BIN = 0.1
OUTLIER_FLOOR = 0.1           # accept length: fences at least this far from the quartiles
OUTLIERS_SHOWN = 10
SOURCE_PREFERENCE = ("request_export", "log_requests_json", "log_requests_text")


@dataclass(frozen=True)
class SignalTables:
    runs: pl.DataFrame        # run_id, run_name, run_json
    metrics: pl.DataFrame     # run_id, source_file, ts, window_name, phase, name, labels, value
    decode: pl.DataFrame      # run_id, source_file, line_no, ts, tp_rank, running_req, accept_len, gen_throughput_tok_s, fwd_occupancy_pct
    idle: pl.DataFrame        # run_id, source_file, line_no: prefill lines that found 0 running requests
    # run_id, source_kind, rid, health_check, completion_tokens, spec_accept_length, spec_verify_ct, finished_unix_s, ts
    requests: pl.DataFrame
    spec_cycles: pl.DataFrame  # run_id, ts, tp_rank, draft_ms, verify_ms, extend_ms, cycle_ms


@dataclass(frozen=True)
class WindowAccept:
    arm: str
    run_name: str
    window: str                          # run.json window name, or 'scrapes' when the run has no window record
    start: datetime | None
    end: datetime | None
    generation_tokens: float             # Δ sglang:generation_tokens_total
    verify_calls: float                  # Δ sglang:spec_verify_calls_total
    accept_len_counters: float | None    # Δ tokens / Δ verify calls (None without verify calls)
    accept_len_decode_lines: float | None  # verify-weighted mean of the window's Decode-line accept len
    decode_rows: int
    accept_len_requests: float | None    # verify-weighted mean of the requests that finished in the window
    requests: int
    agrees: bool | None                  # counters vs decode lines within ACCEPT_TOLERANCE (None: nothing to compare)


@dataclass(frozen=True)
class ArmAccept:
    arm: str
    accept_len_counters: float | None    # pooled over the arm's windows: Σ Δ tokens / Σ Δ verify calls
    accept_len_decode_lines: float | None
    windows: int


@dataclass(frozen=True)
class DevicePhase:
    arm: str
    run_name: str
    window: str
    category: str                        # SGLang's ForwardMode label (target_verify, eagle_draft, …)
    phase: str                           # verify | draft | extend | decode (the cycle) | prefill | idle | the category
    seconds: float                       # Δ forward_execution_seconds_total
    share: float | None                  # of the window's cycle GPU time (None outside the cycle)
    ms_per_cycle: float | None           # seconds / decode cycles (Δ verify calls / mean batch size)


@dataclass(frozen=True)
class PhaseCheck:
    arm: str
    run_name: str
    window: str
    phase: str                           # verify | draft | extend | cycle (GPU-busy time of the whole cycle)
    device_timer_ms: float | None        # ms per decode cycle, as the other sources
    profiler_ms: float | None            # spec_cycles mean over the window's profiled cycles
    decode_lines_ms: float | None        # cycle only: wall ms per cycle × fwd occupancy
    max_difference: float | None         # largest |source − device timer| / device timer
    within_tolerance: bool | None        # max_difference ≤ PHASE_TOLERANCE (None: one source only)


@dataclass(frozen=True)
class RequestOutlier:
    run_name: str
    rid: str | None
    spec_accept_length: float
    spec_verify_ct: int
    completion_tokens: int | None
    side: str                            # 'low' | 'high'


@dataclass(frozen=True)
class RequestAcceptance:
    arm: str
    sources: tuple[str, ...]             # requests.source_kind values used
    n_requests: int
    verify_weighted_mean: float          # Σ accept len × verify steps / Σ verify steps (= Σ tokens / Σ verify steps)
    mean: float                          # unweighted: each request counts once
    minimum: float
    p10: float
    median: float
    p90: float
    maximum: float
    low_fence: float
    high_fence: float
    histogram: tuple[tuple[float, int], ...]   # (bin start, requests) in bins of HISTOGRAM_BIN
    outliers: tuple[RequestOutlier, ...]       # the OUTLIERS_SHOWN farthest from the median
    n_outliers: int


@dataclass(frozen=True)
class SignalEvidence:
    windows: tuple[WindowAccept, ...]
    arms: tuple[ArmAccept, ...]
    device_phases: tuple[DevicePhase, ...]
    phase_checks: tuple[PhaseCheck, ...]
    request_acceptance: tuple[RequestAcceptance, ...]
    findings: tuple[Finding, ...]

    @property
    def empty(self) -> bool:
        return not (self.windows or self.device_phases or self.request_acceptance)


def signal_evidence_for(con: Any, arm_runs: Mapping[str, list[str]]) -> SignalEvidence:
    """Load the selected runs' metrics, decode lines, requests and profiled cycles, then `signal_evidence`."""
    run_ids = [run_id for ids in arm_runs.values() for run_id in ids]
    # the smg sidecar exports the same series as sglang_… (a Prometheus name without the colon); a snapshot with the
    # sglang: names keeps those, so a scrape that has both counts once
    names = ", ".join(f"'{n}', '{n.replace(':', '_', 1)}'" for n in (GENERATION_TOKENS, VERIFY_CALLS, FORWARD_SECONDS))
    metrics = select(con, f"""SELECT run_id, source_file, ts, window_name, phase, regexp_replace(name, '^sglang_', 'sglang:') AS name,
        CAST(labels AS VARCHAR) AS labels, value FROM metrics AS m WHERE {IN_RUNS} AND name IN ({names})
        AND (name LIKE 'sglang:%' OR NOT EXISTS (SELECT 1 FROM metrics AS c WHERE c.source_file = m.source_file
                                                  AND c.name LIKE 'sglang:%'))""", [run_ids])
    scraped = [sorted(set(metrics["run_id"].to_list()))]   # the log rows are compared with windows only: runs with scrapes
    return signal_evidence(SignalTables(
        runs=select(con, f"SELECT run_id, run_name, CAST(run_json AS VARCHAR) AS run_json FROM runs WHERE {IN_RUNS}", [run_ids]),
        metrics=metrics,
        decode=select(con, f"""SELECT run_id, source_file, line_no, ts, tp_rank, running_req, accept_len, gen_throughput_tok_s,
            fwd_occupancy_pct FROM decode_batches WHERE {IN_RUNS}""", scraped),
        idle=select(con, f"SELECT run_id, source_file, line_no FROM prefill_batches WHERE {IN_RUNS} AND running_req = 0", scraped),
        requests=select(con, f"""SELECT run_id, source_kind, rid, health_check, completion_tokens, spec_accept_length,
            spec_verify_ct, finished_unix_s, ts FROM requests WHERE {IN_RUNS}""", [run_ids]),
        spec_cycles=select(con, f"SELECT run_id, ts, tp_rank, draft_ms, verify_ms, extend_ms, cycle_ms FROM spec_cycles "
                                f"WHERE {IN_RUNS}", scraped),
    ), arm_runs)


def with_signals(comparison: Comparison, evidence: SignalEvidence) -> Comparison:
    """`comparison` carrying the signals, their findings among its warnings (warnings before notes, as compare sorts)."""
    if evidence.empty:
        return comparison
    warnings = sorted(comparison.warnings + evidence.findings, key=lambda f: 0 if f.severity == "warning" else 1)
    return replace(comparison, signals=evidence, warnings=tuple(warnings))


def signal_evidence(tables: SignalTables, arm_runs: Mapping[str, list[str]]) -> SignalEvidence:
    names = dict(zip(tables.runs["run_id"].to_list(), tables.runs["run_name"].to_list()))
    # run.json's benchmark windows, per run
    recorded = {r: RunRecord.from_document(parse_json_text(t)).windows for r, t in tables.runs.select("run_id", "run_json").iter_rows()}
    decode, profiled = _decode_rows(tables.decode, tables.idle), _lowest_rank(tables.spec_cycles)
    windows: list[WindowAccept] = []
    phases: list[DevicePhase] = []
    checks: list[PhaseCheck] = []
    findings: list[Finding] = []
    for arm, run_ids in arm_runs.items():
        for run_id in run_ids:
            mine = pl.col("run_id") == run_id
            for window in _windows(tables.metrics.filter(mine), recorded.get(run_id, []), findings, names.get(run_id, run_id), arm):
                rows = _in_window(decode.filter(mine), window)
                accept = _window_accept(arm, names.get(run_id, run_id), window, rows,
                                        _requests_in(tables.requests.filter(mine), window))
                run_phases = _device_phases(arm, accept, window, _mean_batch(rows))
                windows.append(accept)
                phases += run_phases
                checks += _phase_checks(arm, accept, run_phases, _in_window(profiled.filter(mine), window), rows)
    findings += _accept_findings(windows) + _phase_findings(phases, checks)
    arms = tuple(_arm_accept(arm, [w for w in windows if w.arm == arm]) for arm in arm_runs if any(w.arm == arm for w in windows))
    acceptance = [found for arm, run_ids in arm_runs.items() if (found := _request_acceptance(
        arm, tables.requests.filter(pl.col("run_id").is_in(run_ids)), recorded, names)) is not None]
    findings += [Finding("request_acceptance_outliers", f"{r.arm}: {r.n_outliers} of {r.n_requests} requests have an accept "
                         f"length outside [{r.low_fence:.2f}, {r.high_fence:.2f}] (Tukey fences around the median "
                         f"{r.median:.2f}); the report lists the farthest", "info", (r.arm,)) for r in acceptance if r.n_outliers]
    return SignalEvidence(tuple(windows), arms, tuple(phases), tuple(checks), tuple(acceptance), tuple(findings))


@dataclass(frozen=True)
class _Window:
    name: str
    start: datetime | None
    end: datetime | None
    start_unix: float | None
    end_unix: float | None
    before: dict[str, float]              # counter series key → value at the first scrape
    after: dict[str, float]               # … at the last scrape


def _windows(metrics: pl.DataFrame, recorded: list[dict], findings: list[Finding], run_name: str, arm: str) -> list[_Window]:
    """The run's windows with a first and a last scrape: run.json's windows, else one window over the run's scrapes
    (the `before` and `after` files, else the earliest and the latest)."""
    if metrics.is_empty():
        return []
    by_name = {w["name"]: w for w in recorded if w.get("name")}
    out = []
    for (window_name,), rows in sorted(metrics.partition_by("window_name", as_dict=True).items(), key=lambda kv: str(kv[0][0])):
        scrapes = rows.group_by("source_file").agg(pl.col("ts").first(), pl.col("phase").first()).with_columns(
            pl.col("phase").replace_strict({"before": 0, "during": 1, "after": 2}, default=1).fill_null(1).alias("order"))
        # by time, else (a scrape without one) by phase
        by = ["ts", "order"] if scrapes["ts"].is_not_null().all() else ["order", "ts"]
        ranked = scrapes.sort(by, nulls_last=True).to_dicts()
        if len(ranked) < 2 or ranked[0]["phase"] == ranked[-1]["phase"] == "during":
            continue
        first, last = ranked[0]["source_file"], ranked[-1]["source_file"]
        record = by_name.get(window_name, {})
        window = _Window(
            name=window_name or "scrapes",
            start=_iso(record.get("start")) or ranked[0]["ts"], end=_iso(record.get("end")) or ranked[-1]["ts"],
            start_unix=_float(record.get("start_unix")), end_unix=_float(record.get("end_unix")),
            before=_series(rows.filter(pl.col("source_file") == first)),
            after=_series(rows.filter(pl.col("source_file") == last)),
        )
        resets = [key for key, value in window.after.items() if value < window.before.get(key, 0.0)]
        if resets:
            findings.append(Finding("counter_reset", f"{run_name} window {window.name}: counters went down between its "
                                    f"scrapes ({', '.join(sorted(resets))}): did the server restart? The window is left out",
                                    "warning", (arm,)))
            continue
        out.append(window)
    return out


def _series(rows: pl.DataFrame) -> dict[str, float]:
    """Counter series of one scrape: generation tokens and verify calls summed over their label sets; forward seconds
    per category, from the lowest tp_rank that reports it (each rank times its own GPU)."""
    is_timer = pl.col("name") == FORWARD_SECONDS
    out = dict(rows.filter(~is_timer).group_by("name", maintain_order=True).agg(pl.col("value").sum()).iter_rows())
    timer = rows.filter(is_timer).select(
        pl.format("{}:{}", "name", pl.col("labels").str.json_path_match("$.category").fill_null("?")).alias("key"),
        pl.col("labels").str.json_path_match("$.tp_rank").cast(pl.Int64, strict=False).fill_null(0).alias("rank"), "value")
    out.update(timer.sort("rank", maintain_order=True).group_by("key", maintain_order=True).agg(pl.col("value").first()).iter_rows())
    return out


def _iso(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def _ts_inside(window: _Window) -> pl.Expr:
    """ts in the window; log timestamps have 1 s resolution, so the window's first second counts."""
    return pl.col("ts").is_between(window.start.replace(microsecond=0), window.end)


def _in_window(rows: pl.DataFrame, window: _Window) -> pl.DataFrame:
    if window.start is None or window.end is None or rows.is_empty():
        return rows
    return rows.filter(_ts_inside(window))


def _requests_in(requests: pl.DataFrame, window: _Window) -> pl.DataFrame:
    """A window's requests: by the time they finished, else (no finish time) by their log line's ts."""
    rows = _one_source(requests)
    if window.start_unix is not None and window.end_unix is not None:
        timed = pl.col("finished_unix_s").is_not_null()
        by_ts = ~timed & _ts_inside(window) if window.start is not None and window.end is not None else pl.lit(False)
        return rows.filter(timed & pl.col("finished_unix_s").is_between(window.start_unix, window.end_unix) | by_ts)
    return _in_window(rows, window) if rows["ts"].is_not_null().all() else rows


def _one_source(requests: pl.DataFrame) -> pl.DataFrame:
    """Speculative, finished, non-health-check requests, each once: its row from the preferred source."""
    rank = {kind: i for i, kind in enumerate(SOURCE_PREFERENCE)}
    rows = requests.filter((pl.col("spec_verify_ct") > 0) & pl.col("spec_accept_length").is_not_null()
                           & ~pl.col("health_check").fill_null(False))
    if rows.is_empty():
        return rows
    preferred = pl.col("source_kind").replace_strict(rank, default=len(rank))
    named = rows.filter(pl.col("rid").is_not_null()).filter(preferred == preferred.min().over("run_id", "rid")).unique(
        ["run_id", "rid"], keep="first", maintain_order=True)
    return pl.concat([named, rows.filter(pl.col("rid").is_null())])   # a record without an id is its own request


def _decode_rows(decode: pl.DataFrame, idle: pl.DataFrame) -> pl.DataFrame:
    """Decode lines of the lowest TP rank, with `after_idle`: the first line of a file or after a prefill that found 0
    running requests (its interval includes the idle time, so its throughput is not a cycle's)."""
    rows = _lowest_rank(decode)
    if rows.is_empty():
        return rows.with_columns(pl.lit(False).alias("after_idle"))
    marks = pl.concat([rows.select("run_id", "source_file", "line_no", pl.lit(False).alias("_idle")),
                       idle.select("run_id", "source_file", "line_no", pl.lit(True).alias("_idle"))])
    marks = marks.sort("run_id", "source_file", "line_no").with_columns(
        pl.col("_idle").shift(1, fill_value=True).over("run_id", "source_file").alias("after_idle")).filter(~pl.col("_idle"))
    return rows.join(marks.select("run_id", "source_file", "line_no", "after_idle"), on=["run_id", "source_file", "line_no"])


def _lowest_rank(rows: pl.DataFrame) -> pl.DataFrame:
    if rows.is_empty():
        return rows
    return rows.filter(pl.col("tp_rank").fill_null(-1) == pl.col("tp_rank").fill_null(-1).min().over("run_id"))


def _mean_batch(rows: pl.DataFrame) -> float | None:
    mean = rows["running_req"].mean() if not rows.is_empty() else None
    return float(mean) if mean is not None and mean > 0 else None


def _window_accept(arm: str, run_name: str, window: _Window, rows: pl.DataFrame, requests: pl.DataFrame) -> WindowAccept:
    tokens, verify = (window.after.get(key, 0.0) - window.before.get(key, 0.0) for key in (GENERATION_TOKENS, VERIFY_CALLS))
    counters = tokens / verify if verify > 0 else None
    spec_rows = rows.filter(pl.col("accept_len").is_not_null()) if not rows.is_empty() else rows
    weight = spec_rows["running_req"].fill_null(1).cast(pl.Float64).clip(lower_bound=1.0) if spec_rows.height else None
    lines = float((spec_rows["accept_len"] * weight).sum() / weight.sum()) if spec_rows.height else None
    from_requests = (float((requests["spec_accept_length"] * requests["spec_verify_ct"]).sum() / requests["spec_verify_ct"].sum())
                     if requests.height else None)
    agrees = None if counters is None or lines is None else abs(lines - counters) <= ACCEPT_TOLERANCE * counters
    return WindowAccept(arm, run_name, window.name, window.start, window.end, tokens, verify, counters, lines,
                        spec_rows.height, from_requests, requests.height, agrees)


def _arm_accept(arm: str, windows: list[WindowAccept]) -> ArmAccept:
    tokens = sum(w.generation_tokens for w in windows if w.verify_calls > 0)
    verify = sum(w.verify_calls for w in windows)
    lined = [w for w in windows if w.accept_len_decode_lines is not None]
    rows = sum(w.decode_rows for w in lined)
    lines = sum(w.accept_len_decode_lines * w.decode_rows for w in lined) / rows if rows else None
    return ArmAccept(arm, tokens / verify if verify > 0 else None, lines, len(windows))


def _accept_findings(windows: list[WindowAccept]) -> list[Finding]:
    found = []
    for w in windows:
        where = f"{w.run_name} window {w.window}"
        if w.agrees is False:
            found.append(Finding("accept_len_sources_disagree", (
                f"{where}: the counters give accept len {w.accept_len_counters:.3f} exactly (Δ {w.generation_tokens:.0f} "
                f"tokens / Δ {w.verify_calls:.0f} verify calls), the {w.decode_rows} Decode lines {w.accept_len_decode_lines:.3f} "
                f"({(w.accept_len_decode_lines / w.accept_len_counters - 1):+.1%}). Decode lines cover whole intervals of "
                "decode steps and count a request while it runs; the counters count it when it finishes: a window with few "
                "lines or requests cut by its edges differs. Trust the counters"), "warning", (w.arm,)))
        if w.accept_len_counters is not None and w.accept_len_requests is not None and \
                abs(w.accept_len_requests - w.accept_len_counters) > REQUEST_TOLERANCE * w.accept_len_counters:
            found.append(Finding("accept_len_requests_differ", (
                f"{where}: the {w.requests} requests' verify-weighted accept len {w.accept_len_requests:.3f} differs from the "
                f"counters' {w.accept_len_counters:.3f}: some finished requests of the window are missing from the request "
                "records (an export file cut short, --log-requests off for part of the run) or fall outside its time bounds"),
                "info", (w.arm,)))
        if w.window == "scrapes" and w.start is None:
            found.append(Finding("signals_window_unknown", (
                f"{where}: the scrapes carry no time (no launcher run.json): the counter delta is exact, but the decode lines "
                "and requests compared with it are all of the run's"), "info", (w.arm,)))
    return found


def _device_phases(arm: str, accept: WindowAccept, window: _Window, batch: float | None) -> list[DevicePhase]:
    prefix = f"{FORWARD_SECONDS}:"
    seconds = {key[len(prefix):]: window.after[key] - window.before.get(key, 0.0)
               for key in window.after if key.startswith(prefix)}
    if not seconds:
        return []
    steps = accept.verify_calls if accept.verify_calls > 0 else accept.generation_tokens
    cycles = steps / (batch or 1.0)
    cycle_total = sum(v for c, v in seconds.items() if CATEGORY_PHASE.get(c, c) in CYCLE_PHASES)
    out = []
    for category, value in sorted(seconds.items(), key=lambda kv: -kv[1]):
        phase = CATEGORY_PHASE.get(category, category)
        in_cycle = phase in CYCLE_PHASES
        out.append(DevicePhase(arm, accept.run_name, accept.window, category, phase, value,
                               value / cycle_total if in_cycle and cycle_total > 0 else None,
                               1000.0 * value / cycles if in_cycle and cycles > 0 else None))
    return out


def _phase_checks(arm: str, accept: WindowAccept, phases: list[DevicePhase], cycles: pl.DataFrame,
                  rows: pl.DataFrame) -> list[PhaseCheck]:
    device: dict[str, float] = {}
    for p in phases:
        if p.ms_per_cycle is not None:
            device[p.phase] = device.get(p.phase, 0.0) + p.ms_per_cycle
    if device:
        device["cycle"] = sum(device.values())
    means = cycles.select("verify_ms", "draft_ms", "extend_ms", "cycle_ms").mean().row(0) if cycles.height else (None,) * 4
    out = []
    for phase, prof in zip(("verify", "draft", "extend", "cycle"), means):
        ref = device.get(phase)
        if ref is None and prof is None:
            continue
        lines = _decode_busy_ms(rows) if phase == "cycle" else None
        others = [v for v in (prof, lines) if v is not None]
        difference = max(abs(v - ref) / ref for v in others) if ref and others else None
        out.append(PhaseCheck(arm, accept.run_name, accept.window, phase, ref, prof, lines, difference,
                              None if difference is None else difference <= PHASE_TOLERANCE))
    return out


def _decode_busy_ms(rows: pl.DataFrame) -> float | None:
    """GPU-busy ms per decode cycle from the decode lines: tokens per step / gen throughput × fwd occupancy, over the
    lines that are not the first after idle."""
    if rows.is_empty():
        return None
    tokens = pl.col("running_req").fill_null(1).cast(pl.Float64) * pl.col("accept_len").fill_null(1.0)
    busy_ms = 1000.0 * tokens / pl.col("gen_throughput_tok_s") * pl.col("fwd_occupancy_pct") / 100.0
    return rows.filter(~pl.col("after_idle") & pl.col("fwd_occupancy_pct").is_not_null()
                       & (pl.col("gen_throughput_tok_s") > 0)).select(busy_ms.mean()).item()


def _phase_findings(phases: list[DevicePhase], checks: list[PhaseCheck]) -> list[Finding]:
    found = []
    for check in checks:
        if check.within_tolerance is False:
            values = ", ".join(f"{name} {value:.3f} ms" for name, value in (
                ("device timer", check.device_timer_ms), ("profiler", check.profiler_ms), ("decode lines", check.decode_lines_ms))
                if value is not None)
            found.append(Finding("phase_sources_disagree", (
                f"{check.run_name} window {check.window}, {check.phase} per cycle: {values} — {check.max_difference:.0%} apart "
                f"(more than {PHASE_TOLERANCE:.0%}). The profiler times whole worker methods (verify includes sampling and "
                "acceptance; its cycle includes host gaps inside the cycle), the device timer only model forwards"),
                "warning", (check.arm,)))
    if any(p.category == "decode" for p in phases) and any(p.phase in ("verify", "draft") for p in phases):
        runs = sorted({p.run_name for p in phases if p.category == "decode"})
        found.append(Finding("device_timer_graph_labels", (
            f"{', '.join(runs)}: the device timer has a `decode` category in a speculative run: with CUDA graphs off SGLang "
            "labels the draft model's forwards decode / extend, so draft time is counted there"), "info",
            tuple(sorted({p.arm for p in phases if p.category == "decode"}))))
    return found


def _request_acceptance(arm: str, requests: pl.DataFrame, recorded: dict[str, list[dict]], names: dict[str, str]
                        ) -> RequestAcceptance | None:
    """The arm's requests (one source each), within the runs' benchmark windows when run.json records them."""
    rows = _one_source(requests)
    kept = []
    for (run_id,), part in rows.partition_by("run_id", as_dict=True).items() if rows.height else ():
        bounds = [(w.get("start_unix"), w.get("end_unix")) for w in recorded.get(run_id, [])
                  if _float(w.get("start_unix")) is not None and _float(w.get("end_unix")) is not None]
        if bounds and part["finished_unix_s"].is_not_null().all():
            inside = pl.lit(False)
            for start, end in bounds:
                inside = inside | pl.col("finished_unix_s").is_between(start, end)
            part = part.filter(inside)
        kept.append(part)
    rows = pl.concat(kept) if kept else rows
    if rows.is_empty():
        return None
    accept = rows["spec_accept_length"].to_numpy().astype(float)
    verify = rows["spec_verify_ct"].to_numpy().astype(float)
    q1, median, q3 = np.percentile(accept, [25, 50, 75])
    spread = max(1.5 * (q3 - q1), OUTLIER_FLOOR)
    low, high = float(q1 - spread), float(q3 + spread)
    outside = rows.with_columns(pl.col("run_id").replace_strict(names, default=None).alias("run_name")).filter(
        (pl.col("spec_accept_length") < low) | (pl.col("spec_accept_length") > high)).with_columns(
        (pl.col("spec_accept_length") - median).abs().alias("_distance")).sort("_distance", descending=True)
    outliers = tuple(RequestOutlier(r["run_name"], r["rid"], float(r["spec_accept_length"]), int(r["spec_verify_ct"]),
                                    r["completion_tokens"], "low" if r["spec_accept_length"] < low else "high")
                     for r in outside.head(OUTLIERS_SHOWN).iter_rows(named=True))
    bins = np.floor(accept / HISTOGRAM_BIN + 1e-9) * HISTOGRAM_BIN
    values, counts = np.unique(np.round(bins, 6), return_counts=True)
    return RequestAcceptance(
        arm=arm, sources=tuple(sorted(set(rows["source_kind"].to_list()))), n_requests=rows.height,
        verify_weighted_mean=float((accept * verify).sum() / verify.sum()), mean=float(accept.mean()),
        minimum=float(accept.min()), p10=float(np.percentile(accept, 10)), median=float(median),
        p90=float(np.percentile(accept, 90)), maximum=float(accept.max()), low_fence=low, high_fence=high,
        histogram=tuple((float(v), int(c)) for v, c in zip(values, counts)), outliers=outliers, n_outliers=outside.height,
    )
