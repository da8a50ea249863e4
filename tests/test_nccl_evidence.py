"""NCCL evidence on the real H200 logs: settings from the log vs the recorded env, transports, channels, what NCCL
served (SGLang's custom all-reduce bypass), settings diff, and the communication share of verify time."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from nccl_fixture_frames import frames_from_logs
from speclogs.analysis.nccl import compute_nccl_evidence, interpolate_latency_us

MATRIX = Path(__file__).resolve().parents[1] / "fixtures/h200x2-sglang-0.5.14/matrix"
PROBES = Path(__file__).resolve().parents[1] / "fixtures/h200x2-sglang-0.5.14/probes"
# The NCCL settings the seed runs were tuned with (docs/nccl.md).
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


def _probe_frame() -> pl.DataFrame:
    rows = []
    for env_set, env, scale in (("default", {"NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "INFO"}, 1.0),
                                ("tuned", {"NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "INFO", **SEEDS_TUNED_ENV}, 0.5)):
        for tokens in (1, 2, 4, 8, 16):
            rows.append({"probe_id": "p1", "env_set": env_set, "env": json.dumps(env), "collective": "all_reduce",
                         "world_size": 2, "bytes": 2048 * tokens * 2, "tokens": tokens,
                         "latency_us": scale * (10.0 + tokens), "latency_us_p10": 0.0, "latency_us_p90": 0.0})
    return pl.DataFrame(rows)


def test_communication_share_of_verify_time_uses_the_matching_probe_env_set():
    cycles = [{"run_id": "eagle3_nccl", "batch_size": 1, "verify_ms": value} for value in (1.9, 2.0, 2.1)]
    evidence = compute_nccl_evidence(frames_from_logs([MATRIX / "eagle3_nccl.log"], spec_cycles=cycles,
                                                      probe=_probe_frame()), num_layers=16)
    (estimate,) = evidence.estimates
    assert estimate.env_set == "tuned" and estimate.env_set_matches
    assert estimate.verify_tokens == 6                     # batch 1 × speculative_num_draft_tokens 6
    assert estimate.message_bytes == 2048 * 6 * 2          # hidden taken from the probe's decode sizes
    expected_us = 0.5 * (10 + 4 + (8 - 4) * 0.5849625007211562)   # log2 interpolation between 4 and 8 tokens
    assert estimate.allreduce_latency_us == pytest.approx(expected_us)
    assert estimate.allreduces_per_verify == 32
    assert estimate.comm_ms == pytest.approx(expected_us * 32 / 1000)
    assert estimate.share == pytest.approx(estimate.comm_ms / 2.0)
    assert any("2 per layer" in text for text in estimate.assumptions)
    assert any("taken from the probe" in text for text in estimate.assumptions)
    assert estimate.latency_source == "eager" and any("eager" in text for text in estimate.assumptions)


def test_estimate_prefers_the_probes_cuda_graph_timings():
    """Verify replays a CUDA graph: when the probe timed the all-reduces that way too, those are used."""
    probe = _probe_frame().with_columns((pl.col("latency_us") / 4).alias("graph_latency_us"))
    cycles = [{"run_id": "eagle3_nccl", "batch_size": 1, "verify_ms": 2.0}]
    evidence = compute_nccl_evidence(frames_from_logs([MATRIX / "eagle3_nccl.log"], spec_cycles=cycles, probe=probe),
                                     num_layers=16)
    (estimate,) = evidence.estimates
    expected_us = 0.5 * (10 + 4 + (8 - 4) * 0.5849625007211562) / 4
    assert estimate.latency_source == "cuda_graph" and estimate.allreduce_latency_us == pytest.approx(expected_us)
    assert any("replayed the all-reduces from a CUDA graph" in text for text in estimate.assumptions)


def test_estimate_says_why_it_is_missing():
    cycles = [{"run_id": "eagle3_default", "batch_size": 1, "verify_ms": 2.0}]
    evidence = compute_nccl_evidence(frames_from_logs([MATRIX / "eagle3_default.log"], spec_cycles=cycles,
                                                      probe=_probe_frame()))
    assert evidence.estimates == ()
    finding = next(finding for finding in evidence.findings if finding.code == "nccl_estimate_unavailable")
    assert "layer count is unknown" in finding.message
    no_probe = compute_nccl_evidence(frames_from_logs([MATRIX / "eagle3_default.log"], spec_cycles=cycles), num_layers=16)
    assert "no NCCL probe results" in next(f.message for f in no_probe.findings if f.code == "nccl_estimate_unavailable")


def test_latency_interpolation_is_linear_in_log_size():
    assert interpolate_latency_us([4096, 16384], [10.0, 30.0], 8192) == pytest.approx(20.0)
    assert interpolate_latency_us([4096, 16384], [10.0, 30.0], 1024) == 10.0          # clamped
    assert interpolate_latency_us([4096, 4096, 4096], [1.0, 9.0, 5.0], 4096) == 5.0   # median of repeats


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


def test_real_device_probe_matches_the_tuned_runs_and_gives_an_in_graph_share(tmp_path):
    """fixtures/h200x2: the profiled EAGLE-3 runs (NCCL tuned set) + the probe measured on the same device stack.

    The probe's 'tuned' env set must be recognised as the runs' settings (the container's NCCL_VERSION label is not a
    setting). With the probe's in-graph timings the share is plausible (~18 % of verify); with its eager timings
    alone, 32 all-reduces add up to more than verify and must be called an upper bound, not a share."""
    from speclogs.analysis.nccl import nccl_evidence
    from speclogs.store import connect, ingest_paths

    root = Path(__file__).resolve().parents[1] / "fixtures/h200x2"
    db = tmp_path / "h.duckdb"
    ingest_paths([str(root / "eagle3_nccl_prof"), str(root / "nccl_probe.nccl_probe.json")], db)
    con = connect(db, read_only=True)
    ids = [row[0] for row in con.execute("SELECT run_id FROM runs WHERE cell = 'eagle3_nccl_prof' ORDER BY run_name").fetchall()]
    evidence = nccl_evidence(con, ids, num_layers=16)
    con.close()
    assert [(e.env_set, e.env_set_matches) for e in evidence.estimates] == [("tuned", True), ("tuned", True)]
    assert all(e.allreduces_per_verify == 32 and e.message_bytes == 2048 * 6 * 2 for e in evidence.estimates)
    assert all(e.latency_source == "cuda_graph" and 5 < e.allreduce_latency_us < 30 for e in evidence.estimates)
    assert all(0.05 < e.share < 0.5 for e in evidence.estimates) and "nccl_estimate_implausible" not in _codes(evidence)

    writable = connect(db)
    writable.execute("UPDATE nccl_probe SET graph_latency_us = NULL")  # as a probe without the CUDA-graph mode
    writable.close()
    con = connect(db, read_only=True)
    eager = nccl_evidence(con, ids, num_layers=16)
    con.close()
    assert all(e.latency_source == "eager" and e.share > 0.5 for e in eager.estimates)
    assert "nccl_estimate_implausible" in _codes(eager)


def test_the_html_report_lists_what_the_estimate_assumes():
    """Brief outputs (terminal, markdown) give the estimate in one line; the full report lists its assumptions."""
    from types import SimpleNamespace

    from speclogs.report.text import nccl_sections

    cycles = [{"run_id": "eagle3_nccl", "batch_size": 1, "verify_ms": 2.0}]
    evidence = compute_nccl_evidence(frames_from_logs([MATRIX / "eagle3_nccl.log"], spec_cycles=cycles, probe=_probe_frame()),
                                     num_layers=16)
    (estimate,) = evidence.estimates
    full = {title: rows for title, _, rows in nccl_sections(SimpleNamespace(nccl=evidence))}
    assert full["What the estimate assumes"] == [["eagle3_nccl", text] for text in estimate.assumptions]
    assert len(estimate.assumptions) >= 5
    brief = {title for title, _, _ in nccl_sections(SimpleNamespace(nccl=evidence), brief=True)}
    assert "Communication share of verify (estimate)" in brief and "What the estimate assumes" not in brief
