"""speclogs.analysis.signals: exact accept length from counter deltas next to the log lines, the device timer's phase
split, per-request acceptance — on the real H200 files, on the launcher's
output, and (pure function) on frames built to make each rule visible."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import duckdb
import polars as pl
import pytest

from conftest import ROOT
from speclogs.analysis import compare_runs
from speclogs.analysis.signals import SignalTables, signal_evidence
from speclogs.report import render_json, render_markdown
from speclogs.store import ingest_paths

METRICS_FIXTURE = ROOT / "fixtures" / "h200-sglang-0.5.14-metrics"
T0 = datetime(2026, 12, 1, 9, 0, 0)


# --- building the tables the loader reads -------------------------------------------------------------------------


def metrics(run_id: str, scrapes: list[tuple[str, datetime | None, str | None, dict[str, float]]]) -> pl.DataFrame:
    """scrapes: (phase, ts, window, {series: value}); series 'tokens', 'verify', or a device-timer category."""
    rows = []
    for index, (phase, ts, window, values) in enumerate(scrapes):
        for series, value in values.items():
            name = {"tokens": "sglang:generation_tokens_total", "verify": "sglang:spec_verify_calls_total"}.get(
                series, "sglang:forward_execution_seconds_total")
            labels = {"engine_type": "unified"} | ({} if series in ("tokens", "verify") else {"category": series, "tp_rank": "0"})
            rows.append({"run_id": run_id, "source_file": f"/x/{run_id}/{index}.prom", "ts": ts, "window_name": window,
                         "phase": phase, "name": name, "labels": json.dumps(labels), "value": float(value)})
    return pl.DataFrame(rows, schema={"run_id": pl.Utf8, "source_file": pl.Utf8, "ts": pl.Datetime("us"),
                                      "window_name": pl.Utf8, "phase": pl.Utf8, "name": pl.Utf8, "labels": pl.Utf8,
                                      "value": pl.Float64})


def decode(run_id: str, rows: list[tuple[datetime, float, float, float | None]], running: int = 1) -> pl.DataFrame:
    """rows: (ts, accept_len, gen_throughput_tok_s, fwd_occupancy_pct); line_no 10, 11, …"""
    return pl.DataFrame(
        [{"run_id": run_id, "source_file": f"/x/{run_id}/server.log", "line_no": 10 + i, "ts": ts, "tp_rank": None,
          "running_req": running, "accept_len": a, "gen_throughput_tok_s": g, "fwd_occupancy_pct": o}
         for i, (ts, a, g, o) in enumerate(rows)],
        schema={"run_id": pl.Utf8, "source_file": pl.Utf8, "line_no": pl.Int64, "ts": pl.Datetime("us"), "tp_rank": pl.Int64,
                "running_req": pl.Int64, "accept_len": pl.Float64, "gen_throughput_tok_s": pl.Float64,
                "fwd_occupancy_pct": pl.Float64})


def requests(run_id: str, rows: list[tuple[str, int, int, float | None]], kind: str = "request_export") -> pl.DataFrame:
    """rows: (rid, completion tokens, verify steps, finished unix s)"""
    return pl.DataFrame(
        [{"run_id": run_id, "source_kind": kind, "rid": rid, "health_check": False, "completion_tokens": tokens,
          "spec_accept_length": tokens / verify, "spec_verify_ct": verify, "finished_unix_s": finished, "ts": None}
         for rid, tokens, verify, finished in rows],
        schema={"run_id": pl.Utf8, "source_kind": pl.Utf8, "rid": pl.Utf8, "health_check": pl.Boolean,
                "completion_tokens": pl.Int64, "spec_accept_length": pl.Float64, "spec_verify_ct": pl.Int64,
                "finished_unix_s": pl.Float64, "ts": pl.Datetime("us")})


def tables(runs: dict[str, dict | None], *, metric_rows, decode_rows=(), request_rows=()) -> SignalTables:
    def stack(frames, empty):
        frames = [f for f in frames if f.height]
        return pl.concat(frames) if frames else empty.clear()

    return SignalTables(
        runs=pl.DataFrame({"run_id": list(runs), "run_name": [f"{r}_1" for r in runs],
                           "run_json": [json.dumps(v) if v is not None else None for v in runs.values()]},
                          schema={"run_id": pl.Utf8, "run_name": pl.Utf8, "run_json": pl.Utf8}),
        metrics=stack(metric_rows, metrics("x", [("before", None, None, {"tokens": 0})])),
        decode=stack(decode_rows, decode("x", [(T0, 1.0, 1.0, None)])),
        requests=stack(request_rows, requests("x", [("r", 1, 1, None)])),
    )


def window_record(start: datetime, end: datetime) -> dict:
    epoch = datetime(1970, 1, 1)
    return {"windows": [{"name": "single_stream", "start": start.isoformat(), "end": end.isoformat(),
                         "start_unix": (start - epoch).total_seconds(), "end_unix": (end - epoch).total_seconds(), "scrapes": []}]}


def unix(ts: datetime) -> float:
    return (ts - datetime(1970, 1, 1)).total_seconds()


# --- pure rules -----------------------------------------------------------------------------------------------------


def test_counters_equal_the_verify_weighted_request_mean_not_the_plain_mean():
    # a long request accepting 2 tokens per step and a short one accepting 1: the counters weigh them by verify steps
    start, end = T0, T0 + timedelta(seconds=30)
    found = signal_evidence(tables(
        {"a": window_record(start, end)},
        metric_rows=[metrics("a", [("before", start, "single_stream", {"tokens": 8, "verify": 4}),
                                   ("after", end, "single_stream", {"tokens": 8 + 110, "verify": 4 + 60})])],
        decode_rows=[decode("a", [(T0 + timedelta(seconds=s), 1.83, 400.0, None) for s in (5, 10, 15)])],
        request_rows=[requests("a", [("long", 100, 50, unix(T0) + 10), ("short", 10, 10, unix(T0) + 20),
                                     ("before_the_window", 8, 4, unix(T0) - 5)])],
    ), {"arm": ["a"]})
    [window] = found.windows
    assert window.accept_len_counters == pytest.approx(110 / 60)
    assert window.accept_len_requests == pytest.approx(110 / 60)      # exactly what the counters measure
    assert window.requests == 2                                        # the warm-up request finished before the window
    assert window.agrees is True                                       # 1.83 printed vs 1.8333: within 2 %
    [arm] = found.request_acceptance
    assert arm.verify_weighted_mean == pytest.approx(110 / 60) and arm.mean == pytest.approx(1.5)   # the short one's bias
    assert not [f for f in found.findings if f.severity == "warning"]


def test_decode_lines_that_disagree_with_the_counters_are_a_warning():
    found = signal_evidence(tables(
        {"a": None},
        metric_rows=[metrics("a", [("before", None, None, {"tokens": 0, "verify": 0}),
                                   ("after", None, None, {"tokens": 175, "verify": 100})])],
        decode_rows=[decode("a", [(T0, 2.0, 400.0, None), (T0, 2.0, 400.0, None)])],
    ), {"arm": ["a"]})
    [window] = found.windows
    assert (window.accept_len_counters, window.accept_len_decode_lines, window.agrees) == (1.75, 2.0, False)
    [warning] = [f for f in found.findings if f.code == "accept_len_sources_disagree"]
    assert "1.750 exactly" in warning.message and "+14.3%" in warning.message


def test_device_timer_phases():
    start, end = T0, T0 + timedelta(seconds=10)
    timer = {"target_verify": 0.0, "eagle_draft": 0.0, "eagle_draft_extend": 0.0, "extend": 0.0}
    after = {"target_verify": 1.3, "eagle_draft": 0.45, "eagle_draft_extend": 0.15, "extend": 0.2}   # seconds over 1000 cycles
    found = signal_evidence(tables(
        {"a": window_record(start, end), "b": window_record(start, end)},
        metric_rows=[metrics(r, [("before", start, "single_stream", {"tokens": 0, "verify": 0, **timer}),
                                 ("after", end, "single_stream", {"tokens": 2000, "verify": 1000, **after})]) for r in "ab"],
        decode_rows=[decode(r, [(T0 + timedelta(seconds=s), 2.0, 430.0, 40.86) for s in (2, 3, 4)]) for r in "ab"],
    ), {"A": ["a"], "B": ["b"]})
    verify = {p.run_name: p for p in found.device_phases if p.phase == "verify"}
    assert verify["a_1"].ms_per_cycle == pytest.approx(1.3) and verify["a_1"].share == pytest.approx(1.3 / 1.9)
    assert [p.share for p in found.device_phases if p.category == "extend"] == [None, None]    # prefill: outside the cycle


def test_a_counter_reset_drops_the_window():
    ok = [(f"r{i}", 200, 100, None) for i in range(20)]
    found = signal_evidence(tables(
        {"a": None},
        metric_rows=[metrics("a", [("before", None, None, {"tokens": 500, "verify": 250}),
                                   ("after", None, None, {"tokens": 100, "verify": 50})])],   # went down: a restart
        request_rows=[requests("a", ok + [("garbled", 200, 190, None)])],
    ), {"arm": ["a"]})
    assert found.windows == ()
    assert [f.code for f in found.findings if f.severity == "warning"] == ["counter_reset"]
    [arm] = found.request_acceptance
    assert arm.n_requests == 21 and arm.minimum == pytest.approx(200 / 190)
    assert dict(arm.histogram) == {1.0: 1, 2.0: 20}


def test_one_row_per_request_prefers_the_export_file():
    both = [requests("a", [("r1", 200, 100, None)], "log_requests_text"), requests("a", [("r1", 200, 80, None)])]
    found = signal_evidence(tables({"a": None}, metric_rows=[], request_rows=both), {"arm": ["a"]})
    [arm] = found.request_acceptance
    assert arm.n_requests == 1 and arm.sources == ("request_export",) and arm.verify_weighted_mean == 2.5


# --- real files -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def metrics_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("signals") / "speclogs.duckdb"
    ingest_paths([METRICS_FIXTURE], db, run_name="h200_metrics")
    return db


def test_the_real_h200_run_in_the_report(metrics_db):
    con = duckdb.connect(str(metrics_db), read_only=True)
    try:
        comparison = compare_runs(con, ["h200_metrics"])
    finally:
        con.close()
    evidence = comparison.signals
    [window] = evidence.windows
    # SGLang 0.5.14, synthetic pair with accept len 2.00 by construction: Δ 1000 tokens / Δ 500 verify calls
    assert (window.generation_tokens, window.verify_calls, window.accept_len_counters) == (1000.0, 500.0, 2.0)
    assert window.accept_len_decode_lines == 2.0 and window.agrees is True
    timer = {p.category: p for p in evidence.device_phases}
    assert timer["target_verify"].ms_per_cycle == pytest.approx(1.326, abs=0.001)
    assert timer["eagle_draft"].ms_per_cycle == pytest.approx(0.432, abs=0.001)
    assert timer["eagle_draft_extend"].ms_per_cycle == pytest.approx(0.140, abs=0.001)
    [per_request] = evidence.request_acceptance
    assert per_request.verify_weighted_mean == 2.0
    document = json.loads(render_json(comparison))
    assert document["signals"]["windows"][0]["accept_len_counters"] == 2.0
    markdown = render_markdown(comparison)
    assert "accept len 2.000 exactly from SGLang's counters" in markdown
    assert "| h200_metrics | h200_metrics | scrapes | target_verify | verify | 0.6632 | 69.9% | 1.326 |" in markdown


def test_a_launcher_run_compares_counters_requests_and_lines_inside_its_window(tmp_path):
    from test_launcher import run, write_plan

    # 7 new tokens in 4 verify steps: accept len 1.75 by the counters and the requests; the stand-in's decode line says 2.00
    cell = '[[cells]]\nname = "spec"\nargs = ["--speculative-algorithm", "EAGLE3"]'
    plan = write_plan(tmp_path, cell, extra="[metrics]\nenable = true\nrequest_export = true\n",
                      bench="requests = 4\nwarmup_requests = 1\nmax_new_tokens = 7")
    out = tmp_path / "out"
    run(plan, out)
    db = tmp_path / "speclogs.duckdb"
    ingest_paths([out], db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        comparison = compare_runs(con, ["spec_1"])
    finally:
        con.close()
    [window] = comparison.signals.windows
    assert window.window == "single_stream" and window.start is not None
    assert (window.generation_tokens, window.verify_calls) == (21.0, 12.0)
    assert window.accept_len_counters == 1.75 and window.accept_len_requests == 1.75 and window.requests == 3
    assert window.agrees is False
    assert "accept_len_sources_disagree" in {w.code for w in comparison.warnings}


def test_per_request_chart_has_one_panel_per_arm_and_the_weighted_mean(metrics_db):
    from speclogs.report.charts import all_charts, request_accept_chart

    con = duckdb.connect(str(metrics_db), read_only=True)
    try:
        comparison = compare_runs(con, ["h200_metrics"])
    finally:
        con.close()
    spec = request_accept_chart(comparison).to_dict()
    values = spec["data"]["values"]
    assert [v["requests"] for v in values if v["layer"] == "bin"] == [6]
    assert [v["mean"] for v in values if v["layer"] == "mean"] == [2.0]
    assert "requests" in dict(all_charts(comparison))
