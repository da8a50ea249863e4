"""`speclogs probe nccl`: maths (nccl-tests' definitions), env sets, the real runner driven through a stand-in
worker (this machine has no GPU), the JSON → nccl_probe reader into a real DuckDB, and the CLI's messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speclogs.errors import PlanError, ProbeError
from speclogs.launcher.plan import load_plan
from speclogs.probe import (
    SEEDS_TUNED_ENV,
    EnvSet,
    ProbeRequest,
    env_sets_from_plan,
    parse_env_set,
    parse_env_sets,
    run_probe,
    write_probe_json,
)
from speclogs.probe.maths import (
    alg_bandwidth_gb_s,
    bus_bandwidth_factor,
    bus_bandwidth_gb_s,
    combine_rank_samples_us,
    decode_message_bytes,
    element_count,
    percentile,
    summarize_latencies_us,
    sweep_message_bytes,
)
from speclogs.probe.runner import planned_measurements

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


# --- maths ------------------------------------------------------------------------------------------

def test_bus_bandwidth_factors_are_nccl_tests_definitions():
    # nccl-tests doc/PERFORMANCE.md: AllReduce 2(n-1)/n, AllGather (n-1)/n
    assert bus_bandwidth_factor("all_reduce", 2) == 1.0
    assert bus_bandwidth_factor("all_reduce", 8) == 1.75
    assert bus_bandwidth_factor("all_gather", 2) == 0.5
    assert bus_bandwidth_factor("all_gather", 8) == 0.875
    assert bus_bandwidth_factor("all_reduce", 1) == 0.0


def test_bandwidths_in_decimal_gb_per_second():
    # 64 MiB in 1 ms = 67.108864 GB/s algbw; all_reduce over 8 ranks → ×1.75 busbw
    assert alg_bandwidth_gb_s(64 * 2**20, 1000.0) == pytest.approx(67.108864)
    assert bus_bandwidth_gb_s("all_reduce", 64 * 2**20, 1000.0, 8) == pytest.approx(67.108864 * 1.75)
    assert bus_bandwidth_gb_s("all_gather", 64 * 2**20, 1000.0, 2) == pytest.approx(67.108864 / 2)
    assert alg_bandwidth_gb_s(4096, 0.0) is None


def test_percentiles_match_numpy_linear():
    import numpy
    values = [float(v) for v in numpy.random.default_rng(7).gamma(2.0, 10.0, size=37)]
    for q in (0, 10, 50, 90, 100):
        assert percentile(values, q) == pytest.approx(float(numpy.percentile(values, q)))
    summary = summarize_latencies_us(values)
    assert summary["latency_us"] == pytest.approx(float(numpy.median(values)))
    assert summary["iters"] == 37


def test_a_collective_iteration_costs_its_slowest_rank():
    assert combine_rank_samples_us([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == [3.0, 5.0, 2.5]
    with pytest.raises(ProbeError, match="different iteration counts"):
        combine_rank_samples_us([[1.0], [1.0, 2.0]])


def test_message_sizes_for_decode_and_sweep():
    assert decode_message_bytes(2048, 6) == 24576          # hidden 2048 × 6 verify tokens × bf16
    sizes = sweep_message_bytes()
    assert sizes[0] == 8 and sizes[-1] == 64 * 2**20 and len(sizes) == 24
    assert all(later == 2 * earlier for earlier, later in zip(sizes, sizes[1:]))
    # all_gather buffers round up to whole bf16 elements per rank
    assert element_count("all_gather", 8, 8) == 8 and element_count("all_reduce", 8, 8) == 4
    with pytest.raises(ProbeError, match="must be positive"):
        decode_message_bytes(2048, 0)


def test_planned_measurements_cover_both_collectives_at_every_size():
    request = ProbeRequest(env_sets=(EnvSet("default"),), tokens=(1, 64), sweep=True)
    planned = planned_measurements(request, 2)
    assert {item["collective"] for item in planned} == {"all_reduce", "all_gather"}
    decode = [item for item in planned if item["kind"] == "decode" and item["collective"] == "all_reduce"]
    assert [(item["tokens"], item["bytes"]) for item in decode] == [(1, 4096), (64, 262144)]
    assert len(planned) == 2 * (2 + 24)


# --- env sets ---------------------------------------------------------------------------------------

def test_env_set_values_may_hold_commas():
    env_set = parse_env_set("tuned:NCCL_PROTO=LL,NCCL_DEBUG_SUBSYS=INIT,ENV,NCCL_ALGO=Ring")
    assert env_set == EnvSet("tuned", {"NCCL_PROTO": "LL", "NCCL_DEBUG_SUBSYS": "INIT,ENV", "NCCL_ALGO": "Ring"})
    assert parse_env_set("default") == EnvSet("default", {})
    assert parse_env_sets([]) == [EnvSet("default", {})]
    # NVLS stays off unless a set names it
    assert parse_env_set("x:NCCL_PROTO=LL").applied_env()["NCCL_NVLS_ENABLE"] == "0"


@pytest.mark.parametrize("text, message", [
    (":NCCL_PROTO=LL", "is not a name"),
    ("tuned:NCCL_PROTO", "is not NAME=VALUE"),
    ("tuned:1BAD=2", "is not NAME=VALUE"),
])
def test_bad_env_sets_say_what_is_wrong(text, message):
    with pytest.raises(ProbeError, match=message):
        parse_env_set(text)


def test_repeated_env_set_names_are_refused():
    with pytest.raises(ProbeError, match="names repeat: a"):
        parse_env_sets(["a:NCCL_PROTO=LL", "a:NCCL_PROTO=Simple"])


def test_env_sets_from_a_launch_plan(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[env]\nNCCL_DEBUG = "INFO"\nNCCL_NVLS_ENABLE = "0"\n'
        '[[cells]]\nname = "baseline_default"\nfactors = {spec = "baseline", nccl = "default"}\n'
        '[[cells]]\nname = "baseline_nccl"\nfactors = {spec = "baseline", nccl = "tuned"}\n'
        + "env = {" + ", ".join(f'{k} = "{v}"' for k, v in SEEDS_TUNED_ENV.items()) + "}\n"
        '[[cells]]\nname = "eagle3_nccl"\nfactors = {spec = "eagle3", nccl = "tuned"}\n'
        + "env = {" + ", ".join(f'{k} = "{v}"' for k, v in SEEDS_TUNED_ENV.items()) + "}\n"
    )
    env_sets = env_sets_from_plan(plan)
    assert [env_set.name for env_set in env_sets] == ["default", "tuned"]
    assert env_sets[0].env == {"NCCL_NVLS_ENABLE": "0"}          # NCCL_DEBUG is left to the probe
    assert env_sets[1].env == {"NCCL_NVLS_ENABLE": "0", **SEEDS_TUNED_ENV}


def test_a_broken_plan_names_the_file_and_line(tmp_path):
    plan = tmp_path / "bad.toml"
    plan.write_text("[[cells]]\nname = \n")
    with pytest.raises(PlanError, match=r"bad\.toml.*line 2"):
        env_sets_from_plan(plan)
    empty = tmp_path / "empty.toml"
    empty.write_text("port = 30000\n")
    with pytest.raises(PlanError, match="no cells"):
        env_sets_from_plan(empty)


@pytest.mark.parametrize("plan_text, message", [
    ('[server]\nenv = { NCCL_PROTO = "LL" }\n[[cells]]\nname = "a"\n', r"plan\.toml:1: unknown key 'server' in the plan"),
    ('[[cells]]\nname = "a"\nenvv = { NCCL_PROTO = "LL" }\n', r"plan\.toml:3: unknown key 'envv'"),
    ('[[cells]]\nname = "a"\nenv = { NCCL_PROTO = ["LL"] }\n', r"plan\.toml:1: env\.NCCL_PROTO must be a string or number"),
])
def test_the_probe_refuses_exactly_the_plans_the_launcher_refuses(tmp_path, plan_text, message):
    """One plan parser: `probe nccl --plan` and `launch` agree on every plan, error text and line included."""
    plan = tmp_path / "plan.toml"
    plan.write_text(plan_text)
    with pytest.raises(PlanError, match=message) as launcher:
        load_plan(plan)
    with pytest.raises(PlanError, match=message) as probe:
        env_sets_from_plan(plan)
    assert str(probe.value) == str(launcher.value)


def test_cells_as_named_tables_give_their_env_sets(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text('env = { NCCL_ALGO = "Ring" }\n[cells.base]\nargs = []\n[cells.tuned]\nenv = { NCCL_PROTO = "LL" }\n')
    assert [(e.name, e.env) for e in env_sets_from_plan(plan)] == [
        ("base", {"NCCL_ALGO": "Ring"}), ("tuned", {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"})]


# --- the runner, with a stand-in worker (real processes, stage files, timeouts) ------------------------

@pytest.fixture
def standin(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.setenv("STANDIN_GPUS", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for key in [key for key in os.environ if key.startswith("NCCL_")]:
        monkeypatch.delenv(key)

    def request(*env_sets: str, **options) -> ProbeRequest:
        return ProbeRequest(env_sets=tuple(parse_env_sets(list(env_sets))), worker_module="nccl_standin_worker",
                            iters=20, warmup_iters=2, **options)
    return request


def test_probe_measures_every_env_set_with_the_slowest_rank(standin):
    result = run_probe(standin("default", "tuned:NCCL_PROTO=LL,NCCL_ALGO=Ring", tokens=(1, 6)))
    assert result.outcome == "ok", result.message
    assert [env_set.name for env_set in result.env_sets] == ["default", "tuned"]
    tuned = result.env_sets[1]
    assert tuned.env["NCCL_PROTO"] == "LL" and tuned.env["NCCL_NVLS_ENABLE"] == "0"
    assert any("NCCL_PROTO set by environment to LL" in line for line in tuned.nccl_env_lines)
    first = tuned.measurements[0]
    # stand-in latency: 5 µs + bytes/100 GB/s, rank 1 is 1 µs slower, jitter median 0.45 µs
    assert (first.collective, first.bytes, first.tokens) == ("all_reduce", 4096, 1)
    assert first.latency_us == pytest.approx(5 + 4096 / 1e5 + 1 + 0.45)
    assert first.busbw_gb_s == pytest.approx(first.algbw_gb_s)           # 2 ranks: factor 1
    gather = [m for m in tuned.measurements if m.collective == "all_gather"][0]
    assert gather.busbw_gb_s == pytest.approx(gather.algbw_gb_s / 2)
    # replayed from a CUDA graph (default 16 calls per graph): 2 µs + bytes/100 GB/s, rank 1 0.5 µs slower
    assert first.graph_latency_us == pytest.approx(2 + 4096 / 1e5 + 0.5 + 0.45) and first.graph_error is None


def test_cuda_graph_timing_is_optional_and_its_failure_is_recorded(standin):
    eager_only = run_probe(standin("default", tokens=(1,), graph_calls=0))
    assert all(m.graph_latency_us is None and m.graph_error is None for m in eager_only.env_sets[0].measurements)
    failed = run_probe(standin("nograph:STANDIN_MODE=graph_fail", tokens=(1,)))
    assert failed.outcome == "ok"            # the eager timings stand
    measurement = failed.env_sets[0].measurements[0]
    assert measurement.graph_latency_us is None and "capture is not supported" in measurement.graph_error


def test_nccl_init_hang_is_stopped_and_recorded(standin):
    started = time.monotonic()
    result = run_probe(standin("default", "hang:STANDIN_MODE=hang_init", tokens=(1,), init_timeout_s=1.5))
    assert time.monotonic() - started < 30
    assert result.outcome == "partial"
    hang = result.env_sets[1]
    assert hang.outcome == "nccl_init_timeout" and "within 1.5 s" in hang.message
    assert "hang: nccl_init_timeout" in result.message


def test_nccl_init_failure_keeps_the_rank_log(standin):
    result = run_probe(standin("crash:STANDIN_MODE=crash_init", tokens=(1,)))
    assert result.outcome == "failed"
    crash = result.env_sets[0]
    assert crash.outcome == "nccl_init_failed" and "rank 1 exited with 1" in crash.message
    assert any("NCCL error: unhandled system error" in line for line in crash.log_excerpt)


def test_more_gpus_than_exist_and_single_gpu_are_outcomes(standin, monkeypatch):
    too_many = run_probe(standin("default", gpus=4))
    assert too_many.outcome == "not_enough_gpus"
    assert too_many.message == "asked for 4 GPUs, this machine has 2"
    monkeypatch.setenv("STANDIN_GPUS", "1")
    single = run_probe(standin("default"))
    assert single.outcome == "single_gpu" and "no-ops" in single.message and single.env_sets == ()
    monkeypatch.setenv("STANDIN_GPUS", "0")
    assert run_probe(standin("default")).outcome == "no_cuda"


def test_probe_json_round_trips_into_a_real_duckdb_table(standin, tmp_path):
    import duckdb
    import polars as pl

    from speclogs.ingest.jsonfiles import parse_nccl_probe
    result = run_probe(standin("default", "tuned:NCCL_PROTO=LL", "hang:STANDIN_MODE=hang_init",
                               tokens=(1, 2), init_timeout_s=1.0))
    path = write_probe_json(result, tmp_path / "box.nccl_probe.json")
    with pytest.raises(ProbeError, match="already exists"):
        write_probe_json(result, path)
    tables, account = parse_nccl_probe(path.read_text(), str(path))
    assert tables["nccl_probe_files"]["outcome"].to_list() == ["partial"]
    assert tables["nccl_probe"].height == 2 * 2 * 2                 # 2 ok env sets × 2 collectives × 2 sizes
    assert any("hang: nccl_init_timeout" in warning for warning in account.warnings)

    con = duckdb.connect(str(tmp_path / "x.duckdb"))
    con.execute((ROOT / "src/speclogs/store/schema.sql").read_text())
    # through the Arrow C stream, as the writer does (no pyarrow in the core install; DuckDB refuses all-null columns)
    con.register("probe_rows", tables["nccl_probe"].select(pl.exclude(pl.Null)).__arrow_c_stream__())
    con.execute("INSERT INTO nccl_probe BY NAME SELECT * FROM probe_rows")
    rows = con.execute("SELECT env_set, collective, bytes, tokens, round(latency_us, 5), env->>'NCCL_PROTO', "
                       "round(graph_latency_us, 5) FROM nccl_probe WHERE env_set = 'tuned' ORDER BY collective DESC, bytes").fetchall()
    assert rows[0] == ("tuned", "all_reduce", 4096, 1, round(5 + 4096 / 1e5 + 1 + 0.45, 5), "LL", round(2 + 4096 / 1e5 + 0.5 + 0.45, 5))


def test_reader_refuses_files_that_are_not_probe_results():
    from speclogs.ingest.jsonfiles import parse_nccl_probe

    for text, reason in (('{"format": "speclogs.nccl_probe", ', "not JSON"), (json.dumps({"hello": 1}), "not a speclogs NCCL probe file")):
        tables, account = parse_nccl_probe(text, "a.nccl_probe.json")
        assert account.unparsed_lines == account.total_lines == 1 and reason in tables["unparsed_lines"]["reason"][0]


# --- CLI ----------------------------------------------------------------------------------------------

def _speclogs(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run([sys.executable, "-m", "speclogs", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def test_cli_without_torch_says_so_records_it_and_exits_1(tmp_path):
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("torch is installed here")
    out = tmp_path / "here.nccl_probe.json"
    completed = _speclogs("probe", "nccl", "--env-set", "default", "--out", str(out), cwd=tmp_path)
    assert completed.returncode == 1
    assert "Error: torch is not installed" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert json.loads(out.read_text())["outcome"] == "no_torch"
    again = _speclogs("probe", "nccl", "--out", str(out), cwd=tmp_path)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_cli_bad_env_set_is_an_error_not_a_traceback(tmp_path):
    completed = _speclogs("probe", "nccl", "--env-set", "tuned:NCCL_PROTO", cwd=tmp_path)
    assert completed.returncode == 1
    assert "is not NAME=VALUE" in completed.stderr and "Traceback" not in completed.stderr
    bad_tokens = _speclogs("probe", "nccl", "--tokens", "1,x", cwd=tmp_path)
    assert bad_tokens.returncode == 2


# --- the real probe, on a machine with 2+ CUDA GPUs -----------------------------------------------------

@pytest.mark.gpu
def test_real_probe_on_two_gpus(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA GPUs")
    tuned = ",".join(f"{key}={value}" for key, value in SEEDS_TUNED_ENV.items())
    result = run_probe(ProbeRequest(env_sets=tuple(parse_env_sets(["default", f"tuned:{tuned}"])), gpus=2,
                                    tokens=(1, 6, 64), iters=20))
    assert result.outcome == "ok", result.message
    for env_set in result.env_sets:
        assert all(m.latency_us > 0 and m.busbw_gb_s > 0 for m in env_set.measurements)
        assert all(m.graph_latency_us and m.graph_latency_us > 0 for m in env_set.measurements), env_set.measurements[0].graph_error
    assert any("NCCL_PROTO set by environment to LL" in line for line in result.env_sets[1].nccl_env_lines)
    path = write_probe_json(result, tmp_path / "gpu.nccl_probe.json")
    assert json.loads(path.read_text())["outcome"] == "ok"
