"""The launcher's SGLang signals against the stand-in server (real processes and HTTP, no mocks): `[metrics]` in a
plan adds --enable-metrics, the device timer env and the request export; /metrics is scraped before, during and after
each benchmark window; run.json records the windows; `speclogs ingest` of the launch fills metrics and requests."""

from __future__ import annotations

import re

import pytest

from conftest import query, scalar
from speclogs.errors import PlanError
from speclogs.store import ingest_paths
from test_launcher import parse_plan, run, run_json, write_plan

SPEC_CELL = ('[[cells]]\nname = "spec"\nargs = ["--speculative-algorithm", "EAGLE3", "--log-requests", '
             '"--print-env", "SGLANG_ENABLE_METRICS_DEVICE_TIMER"]')
METRICS = "[metrics]\nenable = true\ndevice_timer = true\nrequest_export = true\nscrape_every_s = 0.15\n"


def test_windows_scrapes_device_timer_and_export_end_in_the_database(tmp_path):
    plan = write_plan(tmp_path, SPEC_CELL, extra=METRICS, server_args='"--ready-after", "0.3", "--generate-delay", "0.12"',
                      bench="requests = 4\nwarmup_requests = 1\nmax_new_tokens = 8")
    out = tmp_path / "out"
    summary, _ = run(plan, out)
    assert [r.outcome for r in summary.results] == ["ok"]
    launch = out / "spec" / "1"
    record = run_json(out, "spec")

    # the plan's [metrics] reached the server: flag, env, export directory = the launch directory
    assert "--enable-metrics" in record["argv"]
    assert record["argv"][record["argv"].index("--export-metrics-to-file-dir") + 1] == str(launch)
    assert record["env"]["SGLANG_ENABLE_METRICS_DEVICE_TIMER"] == "1"
    assert "env SGLANG_ENABLE_METRICS_DEVICE_TIMER=1" in (launch / "server.log").read_text()
    assert record["metrics"] == {"scrape": True, "scrape_every_s": 0.15, "device_timer": True, "request_export": True}

    # one window: after the warm-up request to the last one; scraped before, during (3 requests × 0.12 s), after
    [window] = record["windows"]
    assert window["name"] == "single_stream" and window["start"] < window["end"]
    phases = [s["phase"] for s in window["scrapes"]]
    assert phases[0] == "before" and phases[-1] == "after" and "during" in phases
    assert all(s["status"] == 200 and (launch / s["file"]).is_file() for s in window["scrapes"])
    assert record["files"]["metrics"] == [s["file"] for s in window["scrapes"]]
    assert re.fullmatch(r"sglang-request-metrics-\d{8}_\d{2}\.log", record["files"]["request_export"][0])
    stamps = record["timestamps"]
    assert stamps["bench_start"] < window["start"] < window["end"] <= stamps["bench_end"]

    db = tmp_path / "speclogs.duckdb"
    ingest_paths([out], db)
    # the scrapes are rows with their window and phase from run.json; counters cover the 3 measured requests only
    delta = query(db, """SELECT name, max(value) FILTER (phase = 'after') - max(value) FILTER (phase = 'before')
        FROM metrics WHERE window_name = 'single_stream' AND name IN ('sglang:generation_tokens_total', 'sglang:spec_verify_calls_total')
        GROUP BY 1 ORDER BY 1""")
    assert delta == [("sglang:generation_tokens_total", 24.0), ("sglang:spec_verify_calls_total", 12.0)]
    assert scalar(db, "SELECT count(*) FROM metrics WHERE ts IS NULL") == 0
    assert scalar(db, """SELECT count(DISTINCT labels->>'category') FROM metrics
        WHERE family = 'sglang:forward_execution_seconds_total'""") == 4
    # every request twice: SGLang's export file and the --log-requests lines, joined by rid
    assert query(db, "SELECT source_kind, count(*) FROM requests GROUP BY 1 ORDER BY 1") == [
        ("log_requests_text", 4), ("request_export", 4)]
    assert scalar(db, """SELECT count(*) FROM requests a JOIN requests b USING (rid)
        WHERE a.source_kind = 'request_export' AND b.source_kind = 'log_requests_text'""") == 4
    assert scalar(db, "SELECT count(*) FROM line_accounting WHERE NOT balanced OR unparsed > 0") == 0


def test_no_scrapes_without_enable_metrics_but_the_window_is_recorded(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "plain"', bench="requests = 2\nmax_new_tokens = 4")
    out = tmp_path / "out"
    summary, _ = run(plan, out)
    assert [r.outcome for r in summary.results] == ["ok"]
    record = run_json(out, "plain")
    assert record["metrics"]["scrape"] is False and "--enable-metrics" not in record["argv"]
    [window] = record["windows"]
    assert window["scrapes"] == [] and window["start"] < window["end"]
    assert "SGLANG_ENABLE_METRICS_DEVICE_TIMER" not in record["env"]
    assert not list((out / "plain" / "1").glob("*.prom"))


def test_a_failed_scrape_is_recorded_and_the_launch_goes_on(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "broken"\nargs = ["--metrics-status", "500"]', extra="[metrics]\nenable = true\n",
                      bench="requests = 2\nmax_new_tokens = 4")
    out = tmp_path / "out"
    summary, messages = run(plan, out)
    assert [r.outcome for r in summary.results] == ["ok"]
    [window] = run_json(out, "broken")["windows"]
    assert [(s["phase"], s["status"], s["file"]) for s in window["scrapes"]] == [("before", 500, None), ("after", 500, None)]
    assert any("GET /metrics answered HTTP 500" in m for m in messages)


def test_metrics_plan_keys_are_checked(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "a"', extra="[metrics]\nscrape_every = 5\n")
    with pytest.raises(PlanError, match=r"plan.toml:\d+: unknown key 'scrape_every' in \[metrics\]"):
        parse_plan(plan.read_text(), plan)
