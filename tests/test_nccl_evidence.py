"""NCCL evidence on the real H200 logs: settings from the log vs the recorded env, transports, channels, what NCCL
served (SGLang's custom all-reduce bypass), settings diff."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from nccl_fixture_frames import frames_from_logs
from speclogs.analysis.nccl import compute_nccl_evidence

MATRIX = Path(__file__).resolve().parents[1] / "fixtures/h200x2-sglang-0.5.14/matrix"
PROBES = Path(__file__).resolve().parents[1] / "fixtures/h200x2-sglang-0.5.14/probes"
# the NCCL settings the tuned fixture runs (eagle3_nccl, baseline_nccl) were launched with
SEEDS_TUNED_ENV = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
                   "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}
ALL_FOUR = [MATRIX / f"{name}.log" for name in ("baseline_default", "baseline_nccl", "eagle3_default", "eagle3_nccl")]


@pytest.fixture(scope="module")
def matrix_evidence():
    return compute_nccl_evidence(frames_from_logs(ALL_FOUR), hidden_size=2048)


def _run(evidence, name):
    return next(run for run in evidence.runs if run.run_name == name)


def _codes(evidence, run_name=None):
    return [finding.code for finding in evidence.findings if run_name is None or run_name in finding.runs]


def test_settings_version_channels_and_transport_come_from_the_log(matrix_evidence):
    tuned = _run(matrix_evidence, "eagle3_nccl")
    assert tuned.nccl_version == "2.28.9+cuda13.0"
    assert tuned.ranks == (0, 1) and tuned.processes == 2
    log = {setting.name: setting.log_value for setting in tuned.settings}
    assert {name: log[name] for name in SEEDS_TUNED_ENV} == SEEDS_TUNED_ENV
    assert tuned.coll_channels == 16                     # NCCL_MAX_NCHANNELS=16 took effect
    assert _run(matrix_evidence, "eagle3_default").coll_channels == 24
    assert [(use.transport, use.channels, use.peer_pairs) for use in tuned.transports] == [("P2P/IPC", 16, ("0->1", "1->0"))]


def test_custom_allreduce_bypass_is_detected_in_eagle3_runs(matrix_evidence):
    eagle = _run(matrix_evidence, "eagle3_default")
    assert eagle.allreduce_verdict.startswith("NCCL served no tensor-parallel all-reduce")
    assert "disable_custom_all_reduce=False" in eagle.allreduce_verdict
    assert "nccl_allreduce_bypassed" in _codes(matrix_evidence, "eagle3_default")
    phases = {use.phase for use in eagle.collectives if use.collective == "AllGather"}
    assert {"capture target_verify", "capture draft_decode", "capture draft_extend", "serving"} <= phases
    allreduce = [use for use in eagle.collectives if use.collective == "AllReduce"]
    assert [(use.phase, use.max_bytes) for use in allreduce] == [("init", 4)]


def test_baseline_allreduce_reaches_nccl_only_at_prefill_sizes(matrix_evidence):
    baseline = _run(matrix_evidence, "baseline_default")
    assert "only at ≥ 18 MiB (RING/SIMPLE; during capture prefill)" in baseline.allreduce_verdict
    assert "did NOT go through NCCL" in baseline.allreduce_verdict      # 2048 × 64 × 2 B = 256 KiB < 18 MiB
    tuned = _run(matrix_evidence, "baseline_nccl")
    assert "RING/LL" in tuned.allreduce_verdict                        # NCCL_PROTO=LL forced LL on 18–32 MiB


def test_settings_diff_between_compared_runs(matrix_evidence):
    diff = {entry.name: dict(entry.values) for entry in matrix_evidence.settings_diff}
    assert diff["NCCL_PROTO"] == {"baseline_default": None, "baseline_nccl": "LL", "eagle3_default": None, "eagle3_nccl": "LL"}
    assert diff["effective coll channels"]["baseline_default"] == "24"
    assert diff["effective AllReduce algo/proto"]["baseline_default"] == "RING/SIMPLE"
    assert diff["effective AllReduce algo/proto"]["baseline_nccl"] == "RING/LL"
    assert "NCCL_CUMEM_ENABLE" not in diff                               # the same everywhere
    assert "nccl_settings_differ" in _codes(matrix_evidence)
    assert "nccl_no_env_recorded" in _codes(matrix_evidence, "eagle3_nccl")  # plain logs: no run.json


def test_log_and_recorded_env_disagreeing_is_loud():
    env = {**SEEDS_TUNED_ENV, "NCCL_PROTO": "Simple", "NCCL_SOCKET_NTHREADS": "4", "NCCL_DEBUG": "INFO", "PATH": "/bin"}
    evidence = compute_nccl_evidence(frames_from_logs([MATRIX / "eagle3_nccl.log"], envs={"eagle3_nccl": env}))
    by_code = {finding.code: finding for finding in evidence.findings}
    mismatch = by_code["nccl_env_mismatch"]
    assert mismatch.severity == "warning"
    assert "THE LOG AND THE RECORDED ENV DISAGREE" in mismatch.message
    assert "NCCL_PROTO: log says LL, recorded env says Simple" in mismatch.message
    assert "NCCL_SOCKET_NTHREADS=4" in by_code["nccl_env_not_in_log"].message
    assert "NCCL_DEBUG" not in by_code["nccl_env_not_in_log"].message       # never echoed by NCCL: proves nothing
    assert by_code["nccl_set_in_process"].severity == "info"                # NCCL_CUMEM_ENABLE: SGLang sets it
    proto = next(setting for setting in evidence.runs[0].settings if setting.name == "NCCL_PROTO")
    assert (proto.log_value, proto.env_value, proto.agrees) == ("LL", "Simple", False)


def test_a_run_without_nccl_lines_proves_nothing():
    log = PROBES / "random-target-baseline.log"
    evidence = compute_nccl_evidence(frames_from_logs([log], envs={log.stem: SEEDS_TUNED_ENV}))
    finding = next(finding for finding in evidence.findings if finding.code == "nccl_no_info_lines")
    assert finding.severity == "warning" and "nothing can be proven" in finding.message
    assert evidence.runs[0].allreduce_verdict == "unknown: no NCCL INFO lines"
    # the recorded env is still shown, but nothing in the log confirms it
    assert {setting.name for setting in evidence.runs[0].settings} == set(SEEDS_TUNED_ENV)
    assert all(setting.agrees is None for setting in evidence.runs[0].settings)


def test_processes_reporting_different_values_are_flagged():
    frames = frames_from_logs([MATRIX / "eagle3_nccl.log"])
    events = frames.nccl_events.with_columns(
        pl.when((pl.col("name") == "NCCL_PROTO") & (pl.col("nccl_rank") == 1)).then(pl.lit("Simple"))
        .otherwise(pl.col("value")).alias("value"))
    evidence = compute_nccl_evidence(type(frames)(**{**frames.__dict__, "nccl_events": events}))
    finding = next(finding for finding in evidence.findings if finding.code == "nccl_ranks_disagree")
    assert "NCCL_PROTO: LL, Simple" in finding.message


def test_channel_counts_are_the_ones_the_log_prints(matrix_evidence):
    """'24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, …': both counts, as NCCL printed them."""
    for run in matrix_evidence.runs:
        printed = {line.split(" NCCL INFO ")[1] for line in (MATRIX / f"{run.run_name}.log").read_text().splitlines()
                   if " coll channels, " in line}
        assert printed == {f"{run.coll_channels} coll channels, {run.coll_channels} collnet channels, 0 nvls channels, "
                           f"{run.p2p_channels} p2p channels, {run.p2p_channels} p2p channels per peer"}
    assert [(run.run_name, run.coll_channels, run.p2p_channels) for run in matrix_evidence.runs] == [
        ("baseline_default", 24, 32), ("baseline_nccl", 16, 16), ("eagle3_default", 24, 32), ("eagle3_nccl", 16, 16)]


def test_tuning_lost_on_a_restart_is_loud(tmp_path):
    # one log file holding two server starts: the tuned one, then a restart without the NCCL variables
    restarted = tmp_path / "restarted.log"
    restarted.write_text((MATRIX / "eagle3_nccl.log").read_text() + (MATRIX / "eagle3_default.log").read_text())
    evidence = compute_nccl_evidence(frames_from_logs([restarted]))
    finding = next(finding for finding in evidence.findings if finding.code == "nccl_launches_differ")
    assert finding.severity == "warning"
    assert "NCCL_PROTO: launch 1 LL, launch 2 not set" in finding.message


def test_single_gpu_run_needs_no_nccl():
    frames = frames_from_logs([PROBES / "random-target-baseline.log"])
    frames = type(frames)(**{**frames.__dict__, "runs": frames.runs.with_columns(pl.lit(1, dtype=pl.Int32).alias("tp_size"))})
    evidence = compute_nccl_evidence(frames)
    assert [finding.code for finding in evidence.findings] == ["nccl_single_gpu"]
    assert evidence.runs[0].allreduce_verdict == "single GPU: no tensor-parallel all-reduce"


def test_restart_through_the_real_ingest(tmp_path):
    from speclogs import store
    from speclogs.analysis.nccl import nccl_evidence

    restarted = tmp_path / "restarted.log"
    restarted.write_text((MATRIX / "eagle3_nccl.log").read_text() + (MATRIX / "eagle3_default.log").read_text())
    db = tmp_path / "r.duckdb"
    store.ingest_paths([str(restarted)], db)
    con = store.connect(db, read_only=True)
    ((run_id,),) = con.execute("SELECT run_id FROM runs").fetchall()
    evidence = nccl_evidence(con, [run_id])
    finding = next(finding for finding in evidence.findings if finding.code == "nccl_launches_differ")
    assert "NCCL_PROTO: launch 1 LL, launch 2 not set" in finding.message
