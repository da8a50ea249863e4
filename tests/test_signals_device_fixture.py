"""Issue 16's device run (plans/h200-signals.toml, scripts/h200_signals_device.sh): what its outputs must show once
they are in fixtures/h200-signals/, and — always, without a GPU — the same plan run against the stand-in server, so
the plan, the launcher, the ingest and the report are known to fit together before the device time is spent."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from conftest import ROOT, query, scalar
from speclogs.analysis import compare_runs
from speclogs.analysis.signals import REQUEST_TOLERANCE
from speclogs.launcher import LaunchOptions, launch_plan, parse_plan
from speclogs.report import render_json, render_markdown
from speclogs.store import connect, ingest_paths
from speclogs.store.check import check_content

PLAN = ROOT / "plans" / "h200-signals.toml"
DEVICE = ROOT / "fixtures" / "h200-signals"
STANDIN = Path(__file__).resolve().parent / "standin_server.py"
ARMS = ["eagle3_prof_[0-9]*", "eagle3_noisy_[0-9]*"]


def signals_of(out: Path, db: Path):
    """Ingest a launch directory of the plan; (comparison, content check)."""
    ingest_paths([out], db)
    con = connect(db, read_only=True)
    try:
        return compare_runs(con, ARMS), check_content(con)
    finally:
        con.close()


def assert_signals(comparison, check, db: Path, *, launches: int, measured_requests: int) -> None:
    """What the run must show, whatever the figures: every line kept; per launch one window scraped before and after;
    counters and per-request records counting the same requests; the device timer's categories; the request log lines
    read, text and JSON."""
    assert check.ok, [loss.to_dict() for loss in check.losses[:3]]
    assert scalar(db, "SELECT count(*) FROM line_accounting WHERE NOT balanced") == 0
    assert scalar(db, "SELECT count(*) FROM line_accounting WHERE kind IN ('prometheus', 'request_export') AND unparsed > 0") == 0
    assert query(db, "SELECT DISTINCT outcome FROM runs WHERE cell IS NOT NULL") == [("ok",)]
    evidence = comparison.signals
    assert len(evidence.windows) == launches
    for window in evidence.windows:
        assert window.window == "single_stream" and window.start is not None
        assert window.requests == measured_requests
        assert window.accept_len_requests == pytest.approx(window.accept_len_counters, rel=REQUEST_TOLERANCE)
        assert window.accept_len_decode_lines is not None and window.decode_rows > 0
    categories = {(p.run_name, p.category) for p in evidence.device_phases}
    for run in {w.run_name for w in evidence.windows}:
        assert {(run, c) for c in ("target_verify", "eagle_draft", "eagle_draft_extend")} <= categories
    kinds = dict(query(db, "SELECT r.cell, list(DISTINCT q.source_kind ORDER BY q.source_kind) "
                           "FROM requests q JOIN runs r USING (run_id) GROUP BY 1"))
    assert kinds == {"eagle3_prof": ["log_requests_text", "request_export"], "eagle3_noisy": ["log_requests_json", "request_export"]}
    assert {r.arm for r in evidence.request_acceptance} == set(ARMS)


@pytest.mark.skipif(not (DEVICE / "eagle3_prof" / "1" / "run.json").exists(),
                    reason="fixtures/h200-signals (the device run of plans/h200-signals.toml) is not there yet")
def test_the_device_run(tmp_path):
    db = tmp_path / "speclogs.duckdb"
    comparison, check = signals_of(DEVICE, db)
    launches = scalar(db, "SELECT count(*) FROM runs WHERE cell IS NOT NULL")
    assert_signals(comparison, check, db, launches=launches, measured_requests=10)
    evidence = comparison.signals
    clean = [w for w in evidence.windows if w.arm == ARMS[0]]
    noisy = [w for w in evidence.windows if w.arm == ARMS[1]]
    # the clean pair accepts exactly one draft token per verify step: 2.00 by construction
    assert all(w.accept_len_counters == 2.0 for w in clean)
    # the noisy draft: fewer, and per request differently
    assert all(1.0 < w.accept_len_counters < 2.0 for w in noisy)
    noisy_requests = next(r for r in evidence.request_acceptance if r.arm == ARMS[1])
    assert noisy_requests.maximum > noisy_requests.minimum
    # every format renders it (the windows' bounds are timestamps: ISO 8601 text in the JSON)
    document = json.loads(render_json(comparison))
    windows = document["signals"]["windows"]
    assert len(windows) == launches and all(datetime.fromisoformat(w["start"]) for w in windows)
    assert "Phase split from SGLang's device timer" in render_markdown(comparison)


def test_the_plan_against_the_stand_in_server(tmp_path):
    """plans/h200-signals.toml as written, but the stand-in for SGLang (no profiler: it needs torch and SGLang), model
    paths in tmp: every signal the device run is meant to give reaches the report."""
    text = PLAN.read_text()
    for model in ("/tmp/t3n", "/tmp/d3n", "/tmp/t3", "/tmp/d3"):
        (tmp_path / model.rsplit("/", 1)[1]).mkdir()
    text = re.sub(r'"/tmp/(t3n|d3n|t3|d3)"', lambda m: f'"{tmp_path / m.group(1)}"', text)
    text = text.replace('name = "h200-signals"', f'name = "h200-signals"\ncommand = ["{{python}}", "{STANDIN}"]')
    text = text.replace("profile = true", "profile = false").replace("scrape_every_s = 5", "scrape_every_s = 0.1")
    text = re.sub(r"port = 30000", f"port = {_free_port()}", text)
    text = text.replace("requests = 11", "requests = 4").replace("max_new_tokens = 500", "max_new_tokens = 20")
    plan_path = tmp_path / "plan.toml"
    plan_path.write_text(text)
    plan = parse_plan(text, plan_path)
    out = tmp_path / "runs"
    summary = launch_plan(plan, LaunchOptions(out_dir=out))
    assert [r.outcome for r in summary.results] == ["ok"] * 4
    db = tmp_path / "speclogs.duckdb"
    comparison, check = signals_of(out, db)
    assert_signals(comparison, check, db, launches=4, measured_requests=3)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
