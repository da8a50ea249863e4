"""What stock SGLang's own signals say next to the log lines (docs/report.md, "SGLang's own signals"): exact accept
length from counter deltas, the device timer's phase split, per-request acceptance."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from speclogs.analysis.load import IN_RUNS, parse_json_text, select
from speclogs.analysis.results import Finding
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
HISTOGRAM_BIN = 0.1
SOURCE_PREFERENCE = ("request_export", "log_requests_json", "log_requests_text")


@dataclass(frozen=True)
class SignalTables:
    runs: pl.DataFrame        # run_id, run_name, run_json
    metrics: pl.DataFrame     # run_id, source_file, ts, window_name, phase, name, labels, value
    decode: pl.DataFrame      # run_id, ts, tp_rank, running_req, accept_len
    # run_id, source_kind, rid, health_check, completion_tokens, spec_accept_length, spec_verify_ct, finished_unix_s, ts
    requests: pl.DataFrame


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
    histogram: tuple[tuple[float, int], ...]   # (bin start, requests) in bins of HISTOGRAM_BIN


@dataclass(frozen=True)
class SignalEvidence:
    windows: tuple[WindowAccept, ...]
    arms: tuple[ArmAccept, ...]
    device_phases: tuple[DevicePhase, ...]
    request_acceptance: tuple[RequestAcceptance, ...]
    findings: tuple[Finding, ...]


def signal_evidence_for(con: Any, arm_runs: Mapping[str, list[str]]) -> SignalEvidence:
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
        decode=select(con, f"SELECT run_id, ts, tp_rank, running_req, accept_len FROM decode_batches WHERE {IN_RUNS}", scraped),
        requests=select(con, f"""SELECT run_id, source_kind, rid, health_check, completion_tokens, spec_accept_length,
            spec_verify_ct, finished_unix_s, ts FROM requests WHERE {IN_RUNS}""", [run_ids]),
    ), arm_runs)


def signal_evidence(tables: SignalTables, arm_runs: Mapping[str, list[str]]) -> SignalEvidence:
    names = dict(zip(tables.runs["run_id"].to_list(), tables.runs["run_name"].to_list()))
    # run.json's benchmark windows, per run
    recorded = {r: RunRecord.from_document(parse_json_text(t)).windows for r, t in tables.runs.select("run_id", "run_json").iter_rows()}
    rank = pl.col("tp_rank").fill_null(-1)
    decode = tables.decode.filter(rank == rank.min().over("run_id"))  # the lowest TP rank, as the steady-state rule
    windows: list[WindowAccept] = []
    phases: list[DevicePhase] = []
    findings: list[Finding] = []
    for arm, run_ids in arm_runs.items():
        for run_id in run_ids:
            mine = pl.col("run_id") == run_id
            for window in _windows(tables.metrics.filter(mine), recorded.get(run_id, []), findings, names.get(run_id, run_id), arm):
                rows = _in_window(decode.filter(mine), window)
                accept = _window_accept(arm, names.get(run_id, run_id), window, rows,
                                        _requests_in(tables.requests.filter(mine), window))
                windows.append(accept)
                phases += _device_phases(arm, accept, window, rows["running_req"].mean())
    findings += _accept_findings(windows) + _graph_label_findings(phases)
    arms = tuple(_arm_accept(arm, [w for w in windows if w.arm == arm]) for arm in arm_runs if any(w.arm == arm for w in windows))
    acceptance = [found for arm, run_ids in arm_runs.items() if (found := _request_acceptance(
        arm, tables.requests.filter(pl.col("run_id").is_in(run_ids)), recorded)) is not None]
    return SignalEvidence(tuple(windows), arms, tuple(phases), tuple(acceptance), tuple(findings))


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
    if window.start is None or window.end is None:
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
    preferred = pl.col("source_kind").replace_strict(rank, default=len(rank))
    named = rows.filter(pl.col("rid").is_not_null()).filter(preferred == preferred.min().over("run_id", "rid")).unique(
        ["run_id", "rid"], keep="first", maintain_order=True)
    return pl.concat([named, rows.filter(pl.col("rid").is_null())])   # a record without an id is its own request


def _window_accept(arm: str, run_name: str, window: _Window, rows: pl.DataFrame, requests: pl.DataFrame) -> WindowAccept:
    tokens, verify = (window.after.get(key, 0.0) - window.before.get(key, 0.0) for key in (GENERATION_TOKENS, VERIFY_CALLS))
    counters = tokens / verify if verify > 0 else None
    spec_rows = rows.filter(pl.col("accept_len").is_not_null())
    weight = spec_rows["running_req"].fill_null(1).cast(pl.Float64).clip(lower_bound=1.0)
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


def _graph_label_findings(phases: list[DevicePhase]) -> list[Finding]:
    if not (any(p.category == "decode" for p in phases) and any(p.phase in ("verify", "draft") for p in phases)):
        return []
    runs = sorted({p.run_name for p in phases if p.category == "decode"})
    return [Finding("device_timer_graph_labels", (
        f"{', '.join(runs)}: the device timer has a `decode` category in a speculative run: with CUDA graphs off SGLang "
        "labels the draft model's forwards decode / extend, so draft time is counted there"), "info",
        tuple(sorted({p.arm for p in phases if p.category == "decode"})))]


def _request_acceptance(arm: str, requests: pl.DataFrame, recorded: dict[str, list[dict]]) -> RequestAcceptance | None:
    """The arm's requests (one source each), within the runs' benchmark windows when run.json records them."""
    rows = _one_source(requests)
    kept = []
    for (run_id,), part in rows.partition_by("run_id", as_dict=True).items() if rows.height else ():
        bounds = [(w.get("start_unix"), w.get("end_unix")) for w in recorded.get(run_id, [])
                  if _float(w.get("start_unix")) is not None and _float(w.get("end_unix")) is not None]
        if bounds and part["finished_unix_s"].is_not_null().all():
            part = part.filter(pl.any_horizontal(pl.col("finished_unix_s").is_between(start, end) for start, end in bounds))
        kept.append(part)
    rows = pl.concat(kept) if kept else rows
    if rows.is_empty():
        return None
    accept = rows["spec_accept_length"].to_numpy().astype(float)
    verify = rows["spec_verify_ct"].to_numpy().astype(float)
    p10, median, p90 = np.percentile(accept, [10, 50, 90])
    bins = np.floor(accept / HISTOGRAM_BIN + 1e-9) * HISTOGRAM_BIN
    values, counts = np.unique(np.round(bins, 6), return_counts=True)
    return RequestAcceptance(
        arm=arm, sources=tuple(sorted(set(rows["source_kind"].to_list()))), n_requests=rows.height,
        verify_weighted_mean=float((accept * verify).sum() / verify.sum()), mean=float(accept.mean()),
        minimum=float(accept.min()), p10=float(p10), median=float(median), p90=float(p90), maximum=float(accept.max()),
        histogram=tuple((float(v), int(c)) for v, c in zip(values, counts)),
    )
