"""`speclogs whatif` on real H200 runs, and the start-up breakdown (startup_phases) of every launcher run in fixtures/."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, run_cli
from speclogs.analysis.whatif import whatif_for
from speclogs.store import connect, ingest_paths

FIXTURES = ROOT / "fixtures"
LAUNCHER_SETS = ("h200-signals", "h200x2", "h200x2-profile", "h200-adaptive", "h200-sweep", "h200-doctor")


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    """One database per fixture set (run names repeat between sets)."""
    folder = tmp_path_factory.mktemp("whatif")
    for name in LAUNCHER_SETS:
        ingest_paths([FIXTURES / name], folder / f"{name}.duckdb")
    return {name: folder / f"{name}.duckdb" for name in LAUNCHER_SETS}


@pytest.fixture(scope="module")
def db(dbs):
    return dbs["h200-signals"]


def test_clean_draft_host_bound_every_setting_ties_and_no_start_is_worth_it(db):
    """The clean synthetic pair accepts exactly one draft token a cycle, and its single H200 idles 1.33 of 4.61 ms a
    cycle waiting for the host: every setting keeps 2 tokens a cycle in a cycle as long, so all predict the measured
    422 tok/s — and the answer is that no other start is predicted faster."""
    with connect(db, read_only=True) as con:
        result = whatif_for(con, ["eagle3_prof_[0-9]"])
    (model,) = result.models
    assert model.steps == 5 and model.cycles == 344 and model.accept_at_least == (1.0, 0.0, 0.0, 0.0, 0.0)
    assert model.host_bound == 1.0 and model.cycle_regime.startswith("host-bound")
    by_steps = {p.speculative_num_steps: p for p in result.predictions}
    assert all(p.accept_len == pytest.approx(1.0 if s == 0 else 2.0) for s, p in by_steps.items())
    assert {round(by_steps[s].throughput_tok_s, 6) for s in range(1, 9)} == {round(by_steps[5].throughput_tok_s, 6)}
    assert sum(by_steps[s].p_best for s in range(1, 9)) == pytest.approx(1.0)   # ties share the win
    assert by_steps[5].calibration and abs(by_steps[5].error) < 0.005            # measured 422.4 tok/s, 2 launches
    assert by_steps[6].extrapolated and not by_steps[4].extrapolated and by_steps[0].extrapolated  # no baseline here
    assert all(p.low <= p.throughput_tok_s <= p.high for p in result.predictions)
    assert "no other start is predicted faster" in result.recommendations[0]


def test_a_baseline_calibrates_the_target_step_and_checks_no_speculation(dbs):
    """With the baseline selected, verify of one token is the baseline's decode step (memory-bound line to the measured
    6-token verify); steps 0 is then predicted within 5 % of the baselines' client throughput (measured −3.5 %)."""
    with connect(dbs["h200x2"], read_only=True) as con:
        result = whatif_for(con, ["eagle3_nccl_prof_[0-9]", "baseline_nccl_[0-9]"])
    (model,) = result.models
    assert model.baseline_runs == ("baseline_nccl_1", "baseline_nccl_2") and model.verify_regime.startswith("memory-bound")
    steps0 = next(p for p in result.predictions if p.speculative_num_steps == 0)
    assert steps0.measured_launches == 2 and abs(steps0.error) < 0.05 and not steps0.extrapolated


def test_cli_json_contract_and_errors(db):
    out = run_cli("whatif", "eagle3_prof_[0-9]", "--db", str(db), "--format", "json")
    assert out.returncode == 0, out.stderr
    predictions = json.loads(out.stdout)["predictions"]
    one = next(p for p in predictions if p["speculative_num_steps"] == 1)
    assert one["speculative_num_draft_tokens"] == 2 and one["speculative_eagle_topk"] == 1
    assert one["low"] <= one["throughput_tok_s"] <= one["high"]
    assert "no other start is predicted faster" in json.loads(out.stdout)["recommendations"][0]
    assert {p["speculative_num_steps"] for p in predictions} >= {0, 1, 2, 3, 4, 5}
    text = run_cli("whatif", "eagle3_prof_[0-9]", "--db", str(db))
    assert text.returncode == 0 and text.stdout.startswith("What to launch next") and "P(A ≥ k)" in text.stdout
    unknown = run_cli("whatif", "nothing_[0-9]", "--db", str(db))
    assert unknown.returncode == 1 and "no run matches" in unknown.stderr


def test_without_the_profiler_the_device_timer_and_request_histograms_rebuild_the_cycles(db):
    """The noisy draft ran unprofiled with the device timer and the request export: acceptance from the requests'
    histograms (about half the cycles accept the first draft token, none a second), phases from the timer."""
    with connect(db, read_only=True) as con:
        result = whatif_for(con, ["eagle3_noisy_[0-9]"])
    (model,) = result.models
    assert model.timing_source == "device timer + decode lines" and model.steps == 5
    assert 0.45 < model.accept_at_least[0] < 0.55 and model.accept_at_least[1:] == (0.0, 0.0, 0.0, 0.0)
    steps5 = next(p for p in result.predictions if p.speculative_num_steps == 5)
    assert steps5.calibration and abs(steps5.error) < 0.03 and steps5.low < steps5.measured_tok_s < steps5.high


@pytest.mark.parametrize("name", LAUNCHER_SETS)
def test_startup_phases_of_every_launcher_run_add_up_to_ready_s(dbs, name):
    with connect(dbs[name], read_only=True) as con:
        rows = con.execute("""
            SELECT r.run_name, TRY_CAST(json_extract(r.run_json, '$.ready_s') AS DOUBLE) AS ready_s,
                   sum(p.seconds) FILTER (p.within_ready AND p.phase <> 'other') AS named_s,
                   sum(p.seconds) FILTER (p.within_ready) AS total_s, list(p.phase) AS phases
            FROM runs r JOIN startup_phases p USING (run_id) WHERE r.run_json IS NOT NULL GROUP BY ALL""").fetchall()
    assert len(rows) >= 3
    for name, ready_s, named_s, total_s, phases in rows:
        assert total_s == pytest.approx(ready_s, rel=0.05), name
        assert named_s >= 0.7 * ready_s, (name, named_s, ready_s)        # 'other' is the small remainder
        assert {"imports", "load_weights_target", "health_poll", "other"} <= set(phases), name
        assert any(p.startswith("cuda_graph_") for p in phases), name


def test_the_0523_startup_timings_line_gives_the_phases(tmp_path):
    log = tmp_path / "s.log"
    log.write_text(
        "[2026-09-15 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1)\n"
        "[2026-09-15 10:02:11 TP0] Engine startup timings (s): load_weight=401.89, kv_cache_allocation=3.04, "
        "scheduler_e2e=625.45, cuda_graph={target_verify=64.92, draft_decode=5.39}, tokenizer_e2e=630.50\n"
        "[2026-09-15 10:02:12] The server is fired up and ready to roll!\n")
    ingest_paths([log], tmp_path / "s.duckdb")
    with connect(tmp_path / "s.duckdb", read_only=True) as con:
        phases = dict(con.execute("SELECT phase, seconds FROM startup_phases").fetchall())
    assert phases["load_weights"] == 401.89 and phases["kv_cache"] == 3.04
    assert phases["cuda_graph_target_verify"] == 64.92 and phases["cuda_graph_draft_decode"] == 5.39


def test_the_smg_sidecar_metric_names_count_like_sglangs(tmp_path):
    """`sglang_generation_tokens_total` (underscore: the smg sidecar's spelling) gives the same exact accept length."""
    import shutil

    from speclogs.analysis.signals import signal_evidence_for

    source = FIXTURES / "h200-sglang-0.5.14-metrics"
    copy = tmp_path / "smg"
    shutil.copytree(source, copy)
    for prom in copy.glob("*.prom"):
        prom.write_text(prom.read_text().replace("sglang:", "sglang_"))
    ingest_paths([copy], tmp_path / "m.duckdb", run_name="smg_metrics")
    with connect(tmp_path / "m.duckdb", read_only=True) as con:
        run_ids = [row[0] for row in con.execute("SELECT run_id FROM runs").fetchall()]
        [window] = signal_evidence_for(con, {"smg": run_ids}).windows
    assert (window.generation_tokens, window.verify_calls, window.accept_len_counters) == (1000.0, 500.0, 2.0)


def test_gateway_and_env_lines_are_typed_rows(tmp_path):
    log = tmp_path / "mixed.log"
    log.write_text(
        "[2026-08-10 09:16:03] get env SGLANG_OPT_BF16_FP32_GEMM_ALGO = torch\n"
        "2025-10-15 10:45:11 INFO sglang_router_rs::server: src/server.rs:561: Starting router on 0.0.0.0:31000 | mode: x\n"
        "2025-10-15 10:45:11 INFO sglang_router_rs::routers::http::router: src/routers/http/router.rs:202: "
        "Waiting for 2 workers to become healthy (timeout: 600s)\n"
        "2025-10-15 10:55:11 ERROR sglang_router_rs::routers::http::router: src/routers/http/router.rs:229: "
        "Timeout 600s waiting for workers [\"http://10.0.0.1:30000\"] to become healthy\n")
    ingest_paths([log], tmp_path / "g.duckdb")
    with connect(tmp_path / "g.duckdb", read_only=True) as con:
        kinds = [row[0] for row in con.execute("SELECT kind FROM server_events ORDER BY line_no").fetchall()]
        env = con.execute("SELECT regexp_extract(message, 'get env (\\S+) = (.*)', ['name', 'value']) "
                          "FROM server_events WHERE kind = 'env_get'").fetchall()
        unparsed = con.execute("SELECT count(*) FROM unparsed_lines").fetchall()[0][0]
    assert kinds == ["env_get", "gateway_start", "gateway_waiting_for_workers", "gateway_health_timeout"]
    assert env == [({"name": "SGLANG_OPT_BF16_FP32_GEMM_ALGO", "value": "torch"},)] and unparsed == 0


def test_startup_metrics_give_the_phases_where_the_log_has_no_timings_line(tmp_path):
    """0.5.23's sglang:startup_time_seconds / startup_cuda_graph_time_seconds gauges (names and labels as SGLang's
    metrics reference lists them) win over the log's own elapsed values."""
    (tmp_path / "server.log").write_text(
        "[2026-08-10 09:16:04] server_args=ServerArgs(model_path='m', tp_size=1)\n"
        "[2026-08-10 09:16:10] Load weight end. elapsed=150.00 s, type=LlamaForCausalLM, avail mem=137.76 GB, "
        "mem usage=1.37 GB.\n"
        "[2026-08-10 09:16:31] The server is fired up and ready to roll!\n")
    (tmp_path / "metrics_after.prom").write_text(
        "# TYPE sglang:startup_time_seconds gauge\n"
        'sglang:startup_time_seconds{phase="load_weight"} 154.93\n'
        'sglang:startup_time_seconds{phase="scheduler_e2e"} 243.89\n'
        "# TYPE sglang_startup_cuda_graph_time_seconds gauge\n"
        'sglang_startup_cuda_graph_time_seconds{phase="decode"} 4.58\n')
    ingest_paths([tmp_path], tmp_path / "m.duckdb", run_name="metrics_startup")
    with connect(tmp_path / "m.duckdb", read_only=True) as con:
        phases = {row[0]: row[1:] for row in con.execute("SELECT phase, seconds, source FROM startup_phases").fetchall()}
    assert phases["load_weights"] == (154.93, "metrics") and phases["cuda_graph_decode"] == (4.58, "metrics")
    assert "load_weights_target" not in phases and "cuda_graph_scheduler_e2e" not in phases


def test_a_phase_every_rank_times_is_the_slowest_ranks(dbs):
    """TP 2: each rank prints its own weights and graph lines; the start waits for the slower one."""
    with connect(dbs["h200x2"], read_only=True) as con:
        rows = con.execute("""
            SELECT p.seconds, p.tp_rank, (SELECT max(e.elapsed_s) FROM server_events e WHERE e.run_id = p.run_id
                                           AND e.kind = 'cuda_graph_end' AND e.graph = 'target_verify')
            FROM startup_phases p JOIN runs r USING (run_id)
            WHERE r.run_name = 'eagle3_default_1' AND p.phase = 'cuda_graph_target_verify'""").fetchall()
    assert rows == [(3.89, 1, 3.89)]


@pytest.fixture(scope="module")
def sweep_db(dbs):
    return dbs["h200-sweep"]


@pytest.mark.parametrize(("draft", "worst", "same_order"), [("a", 0.06, True), ("b", 0.09, False)])
def test_the_sweep_predicted_from_its_steps_5_runs(sweep_db, draft, worst, same_order):
    """fixtures/h200-sweep (one H100, SGLang 0.5.14): each draft's steps 1, 2, 3 and the baseline predicted from its
    steps-5 launches. Measured errors: draft A +5.7 % (steps 1), +2.8 %, +2.3 %, −2.0 % (no speculation), the order of
    the five settings as measured; draft B −8.2 %, −5.8 %, −6.0 %, −3.1 %: its steps-5 source has one launch 14 % slower
    than the other (2.96 vs 2.60 ms a cycle), which every prediction from it inherits — inside the 95 % intervals."""
    with connect(sweep_db, read_only=True) as con:
        result = whatif_for(con, [f"{draft}_s[0-9]_[0-9]", "baseline_[0-9]"])
    (model,) = result.models
    assert model.steps == 5 and model.source_runs == (f"{draft}_s5_1", f"{draft}_s5_2") and model.host_bound == 1.0
    checked = {p.speculative_num_steps: p for p in result.predictions if p.measured_tok_s is not None}
    assert set(checked) == {0, 1, 2, 3, 5} and checked[5].calibration and checked[0].calibration
    assert all(abs(p.error) <= worst for p in checked.values()), {s: round(p.error, 3) for s, p in checked.items()}
    assert ("the same order" in result.recommendations[1]) is same_order
    # acceptance is exact below the measured steps: the design's accept length (draft record) within 2 %
    design = {"a": (1.904, 2.543, 2.846), "b": (1.601, 1.844, 1.930)}[draft]
    assert all(checked[s].accept_len == pytest.approx(design[s - 1], rel=0.02) for s in (1, 2, 3))
    if draft == "b":
        assert all(p.low <= p.measured_tok_s <= p.high for s, p in checked.items() if s in (1, 2, 3))
