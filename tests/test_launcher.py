"""speclogs launch against a real stand-in server process (tests/standin_server.py): readiness, benchmark,
stop, cleanup, run.json, and every fault the launcher must record. No mocks: real processes, sockets and HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from conftest import run_cli
from speclogs.errors import LaunchError, PlanError
from speclogs.launcher import LaunchOptions, launch_plan, parse_plan
from speclogs.launcher.process import group_pids

STANDIN = Path(__file__).resolve().parent / "standin_server.py"
SRC = Path(__file__).resolve().parent.parent / "src"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_plan(tmp_path: Path, cells: str, *, server_args: str = '"--ready-after", "0.3"', extra: str = "",
               bench: str = "requests = 3\nmax_new_tokens = 8") -> Path:
    text = f"""
name = "standin"
command = ["{{python}}", "{STANDIN}"]
port = {free_port()}
health_poll_s = 0.05
progress_every_s = 0.3
stop_grace_s = 2
port_wait_s = 0.3
launches = 1
args = [{server_args}]
{extra}
[env]
NCCL_DEBUG = "INFO"
[bench]
{bench}
{cells}
"""
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def run(plan_path: Path, out: Path, **options):
    plan = parse_plan(plan_path.read_text(), plan_path)
    messages: list[str] = []
    summary = launch_plan(plan, LaunchOptions(out_dir=out, **options), progress=messages.append)
    return summary, messages


def run_json(out: Path, cell: str, launch: int = 1) -> dict:
    return json.loads((out / cell / str(launch) / "run.json").read_text())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_ok_launch_records_run_json_bench_and_stops_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("NCCL_PROTO", "Simple")          # inherited from the shell: must not reach the server
    plan = write_plan(tmp_path, '[[cells]]\nname = "spec"\nfactors = {spec = "eagle3"}\n'
                      'args = ["--speculative-algorithm", "EAGLE3", "--print-env", "NCCL_PROTO", "--spawn-child"]')
    out = tmp_path / "out"
    summary, messages = run(plan, out)

    assert [r.outcome for r in summary.results] == ["ok"]
    record = run_json(out, "spec")
    for key in ("schema", "speclogs_version", "run_uid", "run_name", "plan_name", "plan_file", "cell", "launch",
                "factors", "order_index", "argv", "env", "env_nccl", "env_cuda", "profile", "versions", "gpus",
                "hostname", "bench", "timestamps", "utc_offset", "ready_s", "outcome", "outcome_detail", "exit_code",
                "files"):
        assert key in record, key
    assert record["schema"] == "speclogs.run/1" and record["run_name"] == "spec_1"
    assert record["factors"] == {"spec": "eagle3"} and record["order_index"] == 0
    assert record["env"]["HF_TOKEN"] == "<redacted>"
    assert record["env_nccl"] == {"NCCL_DEBUG": "INFO"} and record["env_cuda"] == {}
    assert "NCCL_PROTO" in record["env_dropped"]
    assert record["versions"]["python"] == sys.version.split()[0]
    assert record["bench"]["requests"] == 3 and record["bench"]["warmup_requests"] == 1
    stamps = record["timestamps"]
    order = [stamps[k] for k in ("spawn", "port_open", "health_200", "bench_start", "bench_end", "stop")]
    assert all(order) and order == sorted(order)
    assert 0.3 <= record["ready_s"] < 10
    assert record["stop"]["signal"] == "SIGTERM" and record["stop"]["leftover_pids"] == []

    rows = [json.loads(line) for line in (out / "spec" / "1" / "bench.jsonl").read_text().splitlines()]
    assert [(r["i"], r["warmup"]) for r in rows] == [(0, True), (1, False), (2, False)]
    assert rows[1]["run"] == "spec_1" and rows[1]["completion_tokens"] == 8
    assert rows[1]["meta_info"]["spec_accept_length"] == 2.0

    log = (out / "spec" / "1" / "server.log").read_text()
    assert "env NCCL_PROTO=<unset>" in log
    assert '"GET /health HTTP/1.1" 503' in log and '"GET /health HTTP/1.1" 200' in log
    assert "SIGTERM received" in log and "Gracefully exiting" in log
    assert group_pids(record["server_pid"]) == []
    assert any("ready in" in m for m in messages)


def test_interleaved_order_and_plan_goes_on_after_a_server_dies(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "dies"\nargs = ["--die-after", "0.2"]\nlaunches = 2\n'
                      '[[cells]]\nname = "fine"\nlaunches = 2')
    out = tmp_path / "out"
    summary, _ = run(plan, out)
    assert [(r.run_name, r.order_index, r.outcome) for r in summary.results] == [
        ("dies_1", 0, "failed_start"), ("fine_1", 1, "ok"), ("dies_2", 2, "failed_start"), ("fine_2", 3, "ok")]
    record = run_json(out, "dies")
    assert record["exit_code"] == 3
    assert "exited with code 3" in record["outcome_detail"]
    assert "CUDA error: out of memory" in (out / "dies" / "1" / "server.log").read_text()


def test_port_in_use_is_recorded_without_starting_a_server(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "a"')
    port = parse_plan(plan.read_text(), plan).port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        summary, _ = run(plan, tmp_path / "out")
    assert summary.results[0].outcome == "port_in_use"
    assert f"port {port}" in summary.results[0].outcome_detail
    assert not (tmp_path / "out" / "a" / "1" / "server.log").exists()


def test_health_never_200_times_out_and_stops_the_server(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "stuck"\nargs = ["--never-ready"]', extra="health_timeout_s = 1.0")
    summary, _ = run(plan, tmp_path / "out")
    record = run_json(tmp_path / "out", "stuck")
    assert summary.results[0].outcome == "health_timeout"
    assert "last answer: 503" in record["outcome_detail"]
    assert record["timestamps"]["port_open"] is not None and record["timestamps"]["health_200"] is None
    assert group_pids(record["server_pid"]) == []


def test_server_ignoring_sigterm_is_killed_with_its_children(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "hang"\nargs = ["--hang-on-sigterm", "--spawn-child"]',
                      extra="", bench="requests = 1\nmax_new_tokens = 4")
    summary, _ = run(plan, tmp_path / "out")
    record = run_json(tmp_path / "out", "hang")
    assert summary.results[0].outcome == "ok"
    assert record["stop"]["signal"] == "SIGKILL"
    log = (tmp_path / "out" / "hang" / "1" / "server.log").read_text()
    child_pid = int(log.split("scheduler child pid=")[1].split()[0])
    assert not alive(child_pid) and not alive(record["server_pid"])
    assert record["stop"]["leftover_pids"] == []


@pytest.mark.parametrize("server_flags, request_timeout, expected", [
    ('"--generate-status", "500"', 5, "HTTP 500"),
    ('"--generate-delay", "2"', 0.5, "timed out"),
])
def test_benchmark_errors_are_bench_failed(tmp_path, server_flags, request_timeout, expected):
    plan = write_plan(tmp_path, f'[[cells]]\nname = "b"\nargs = [{server_flags}]',
                      bench=f"requests = 2\nmax_new_tokens = 4\nrequest_timeout_s = {request_timeout}")
    summary, _ = run(plan, tmp_path / "out")
    record = run_json(tmp_path / "out", "b")
    assert summary.results[0].outcome == "bench_failed"
    assert expected in record["outcome_detail"]
    assert record["timestamps"]["stop"] is not None and group_pids(record["server_pid"]) == []


def test_disk_full_while_writing_bench_results(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("/dev/full is missing")
    plan = write_plan(tmp_path, '[[cells]]\nname = "d"')
    run_dir = tmp_path / "out" / "d" / "1"
    run_dir.mkdir(parents=True)
    (run_dir / "bench.jsonl").symlink_to("/dev/full")     # every write there fails with ENOSPC
    summary, _ = run(plan, tmp_path / "out")
    record = run_json(tmp_path / "out", "d")
    assert summary.results[0].outcome == "disk_full"
    assert "No space left" in record["outcome_detail"]
    assert group_pids(record["server_pid"]) == []


def test_too_little_free_space_stops_before_spawning(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "d"', extra="min_free_mb = 1e12")
    summary, _ = run(plan, tmp_path / "out")
    assert summary.results[0].outcome == "disk_full"
    assert "MiB free" in summary.results[0].outcome_detail


def test_missing_local_model_path_fails_up_front_with_file_line(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "m"\nmodel_path = "/nonexistent/model-dir"')
    with pytest.raises(PlanError) as error:
        run(plan, tmp_path / "out")
    line = next(i for i, text in enumerate(plan.read_text().splitlines(), 1) if "/nonexistent/model-dir" in text)
    assert f"plan.toml:{line}:" in str(error.value) and "does not exist" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_subset_per_call_then_resume_completes_the_plan(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "a"\n[[cells]]\nname = "b"\n[[cells]]\nname = "c"')
    out = tmp_path / "out"
    first, _ = run(plan, out, max_launches=2)
    assert [r.run_name for r in first.results] == ["a_1", "b_1"]
    assert first.stopped == "max_launches" and first.pending == ("c_1",)
    with pytest.raises(LaunchError, match="already holds launches"):
        run(plan, out)                                     # never overwrite without --resume
    uid_a = run_json(out, "a")["run_uid"]
    second, _ = run(plan, out, resume=True)
    assert [(r.run_name, r.skipped, r.outcome) for r in second.results] == [
        ("a_1", True, "ok"), ("b_1", True, "ok"), ("c_1", False, "ok")]
    assert second.pending == () and run_json(out, "a")["run_uid"] == uid_a


def test_max_minutes_interrupts_a_slow_start_and_resume_retries_it(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "slow"\nargs = ["--ready-after", "30"]')
    out = tmp_path / "out"
    summary, _ = run(plan, out, max_minutes=0.02)
    record = run_json(out, "slow")
    assert summary.stopped == "max_minutes" and summary.pending == ("slow_1",)
    assert record["outcome"] == "interrupted" and "max-minutes" in record["outcome_detail"]
    assert group_pids(record["server_pid"]) == []
    plan.write_text(plan.read_text().replace('"--ready-after", "30"', '"--ready-after", "0.2"'))
    again, _ = run(plan, out, resume=True)
    assert again.results[0].outcome == "ok"
    assert run_json(out, "slow")["previous_attempts"][0]["outcome"] == "interrupted"


def test_ctrl_c_stops_the_server_and_marks_the_launch_interrupted(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "c"\nargs = ["--spawn-child"]',
                      bench="requests = 1000\nmax_new_tokens = 4\n")
    plan.write_text(plan.read_text().replace('"--ready-after", "0.3"', '"--ready-after", "0.3", "--generate-delay", "0.05"'))
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(SRC))
    launcher = subprocess.Popen([sys.executable, "-m", "speclogs", "launch", str(plan), "--out", str(out), "--no-ingest"],
                                env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    bench = out / "c" / "1" / "bench.jsonl"
    while time.monotonic() < deadline and not (bench.exists() and bench.stat().st_size > 0):
        time.sleep(0.05)
    record = run_json(out, "c")
    log = (out / "c" / "1" / "server.log").read_text()
    child_pid = int(log.split("scheduler child pid=")[1].split()[0])
    launcher.send_signal(signal.SIGINT)
    _, stderr = launcher.communicate(timeout=20)
    assert launcher.returncode == 130
    assert "interrupted (Ctrl-C)" in stderr
    record = run_json(out, "c")
    assert record["outcome"] == "interrupted" and "Ctrl-C" in record["outcome_detail"]
    assert not alive(record["server_pid"]) and not alive(child_pid)
    assert "SIGTERM received" in (out / "c" / "1" / "server.log").read_text()


def test_profiled_cell_runs_under_speclogs_profile_with_speclogs_importable(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    plan = write_plan(tmp_path, '[[cells]]\nname = "p"\nprofile = true\nprofile_every = 4')
    summary, _ = run(plan, tmp_path / "out")
    record = run_json(tmp_path / "out", "p")
    assert summary.results[0].outcome == "ok", record["outcome_detail"]
    assert record["argv"][1:6] == ["-m", "speclogs.profile", "--every", "4", "--"]
    assert record["profile"] is True
    assert str(SRC) in record["env"]["PYTHONPATH"].split(os.pathsep)


def test_max_minutes_does_not_start_a_launch_that_cannot_fit(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "a"', extra="launch_estimate_s = 600")
    summary, messages = run(plan, tmp_path / "out", max_minutes=1)
    assert summary.stopped == "max_minutes" and summary.results == () and summary.pending == ("a_1",)
    assert any("a launch takes ~600 s" in m for m in messages)


def test_resume_after_the_launcher_was_killed_stops_the_orphaned_server(tmp_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "o"\nargs = ["--spawn-child"]')
    plan.write_text(plan.read_text().replace('"--ready-after", "0.3"', '"--ready-after", "30"'))
    out = tmp_path / "out"
    launcher = subprocess.Popen([sys.executable, "-m", "speclogs", "launch", str(plan), "--out", str(out), "--no-ingest"],
                                env=dict(os.environ, PYTHONPATH=str(SRC)), stderr=subprocess.DEVNULL)
    log = out / "o" / "1" / "server.log"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not ("scheduler child pid=" in (log.read_text() if log.exists() else "")
                                               and run_json(out, "o").get("server_pid")):   # recorded, then killed
        time.sleep(0.05)
    launcher.kill()                                          # -9: no chance to stop its server
    launcher.wait()
    record = run_json(out, "o")
    assert record["outcome"] == "running" and alive(record["server_pid"])
    child_pid = int(log.read_text().split("scheduler child pid=")[1].split()[0])

    plan.write_text(plan.read_text().replace('"--ready-after", "30"', '"--ready-after", "0.2"'))
    summary, messages = run(plan, out, resume=True)
    assert summary.results[0].outcome == "ok"                # the orphan no longer holds the port
    assert not alive(record["server_pid"]) and not alive(child_pid)
    assert record["server_pid"] in run_json(out, "o")["orphans_stopped"]
    assert any("left by a killed launcher" in m for m in messages)


def test_bench_serving_runs_with_the_server_env_and_its_failure_is_recorded(tmp_path):
    fake = tmp_path / "fakepkgs" / "sglang"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "bench_serving.py").write_text(
        "import json, sys, urllib.request\n"
        "args = sys.argv[1:]\n"
        "port = args[args.index('--port') + 1]\n"
        "urllib.request.urlopen(f'http://127.0.0.1:{port}/health').read()\n"
        "json.dump({'completed': int(args[args.index('--num-prompts') + 1])}, open(args[args.index('--output-file') + 1], 'w'))\n"
        "sys.exit(0 if '--fail' not in args else 4)\n")
    for flags, expected in (('"--num-prompts", "7"', "ok"), ('"--num-prompts", "7", "--fail"', "bench_failed")):
        plan = write_plan(tmp_path, '[[cells]]\nname = "s"',
                          extra=f'[bench_serving]\nargs = [{flags}]\ntimeout_s = 30\n'
                                f'[env]\nPYTHONPATH = "{tmp_path / "fakepkgs"}"\n')
        plan.write_text(plan.read_text().replace('[env]\nNCCL_DEBUG = "INFO"\n', ""))
        out = tmp_path / f"out-{expected}"
        summary, _ = run(plan, out)
        record = run_json(out, "s")
        assert summary.results[0].outcome == expected, record["outcome_detail"]
        assert json.loads((out / "s" / "1" / "bench_serving.jsonl").read_text()) == {"completed": 7}
        assert record["files"]["bench_serving"] == "bench_serving.jsonl"
        assert record["bench"]["bench_serving_args"][:2] == ["--num-prompts", "7"]
        if expected == "bench_failed":
            assert "exited 4" in record["outcome_detail"]


def test_run_json_records_the_draft_models_eagle3_layers_and_a_hash_of_its_weights(tmp_path):
    import hashlib

    draft = tmp_path / "d3"
    draft.mkdir()
    config = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "num_hidden_layers": 1,
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 7, 13]}}
    (draft / "config.json").write_text(json.dumps(config))
    weights = b"\x00\x01" * 5000
    (draft / "model.safetensors").write_bytes(weights)
    plan = write_plan(tmp_path, f'[[cells]]\nname = "e3"\nargs = ["--speculative-draft-model-path", "{draft}"]')
    summary, _ = run(plan, tmp_path / "out")
    assert summary.results[0].outcome == "ok"
    recorded = run_json(tmp_path / "out", "e3")["models"]["draft"]
    assert recorded["eagle3_layer_ids"] == [1, 7, 13] and recorded["architectures"] == ["LlamaForCausalLMEagle3"]
    expected = hashlib.sha256(b"model.safetensors\0" + str(len(weights)).encode() + b"\0" + weights).hexdigest()
    assert recorded["weights_sha256"] == expected and recorded["weights_hash"] == "sha256 of every weight byte"
    assert recorded["config_sha256"] == hashlib.sha256((draft / "config.json").read_bytes()).hexdigest()


def test_a_daemon_that_left_the_process_group_is_found_by_the_launch_tag_and_stopped(tmp_path):
    """The server double-forks a helper into a session of its own (not in its process group, not its descendant):
    the launch's environment tag finds it, and the stop leaves nothing behind."""
    plan = write_plan(tmp_path, '[[cells]]\nname = "d"\nargs = ["--spawn-daemon"]')
    summary, _ = run(plan, tmp_path / "out")
    assert summary.results[0].outcome == "ok"
    log = (tmp_path / "out" / "d" / "1" / "server.log").read_text()
    daemon = int(log.split("daemon pid=")[1].split()[0])
    deadline = time.monotonic() + 5
    while alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(daemon)


def test_max_minutes_then_resume_leaves_the_database_equal_to_a_fresh_ingest(tmp_path):
    """The slicing workflow through the CLI: the first call's budget (1.2 s) ends inside its first launch by
    construction (20 requests × 0.2 s each), so that launch is ingested half done; --resume runs it again and the
    next one, and the database then holds exactly what a fresh ingest of the final directory holds."""
    from conftest import assert_same_tables
    from speclogs.store.lake import contract_columns

    plan = write_plan(tmp_path, '[[cells]]\nname = "a"\nlaunches = 2',
                      server_args='"--ready-after", "0.2", "--generate-delay", "0.2", "--log-requests"',
                      bench="requests = 20\nmax_new_tokens = 8")
    out, db, fresh = tmp_path / "out", tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    first = run_cli("launch", str(plan), "--out", str(out), "--db", str(db), "--max-minutes", "0.02", timeout=300)
    assert first.returncode == 1, first.stderr
    assert run_json(out, "a")["outcome"] == "interrupted" and not (out / "a" / "2").exists()
    with duckdb.connect(str(db), read_only=True) as connection:
        assert connection.execute("SELECT outcome FROM runs").fetchall() == [("interrupted",)]
    again = run_cli("launch", str(plan), "--out", str(out), "--db", str(db), "--resume", timeout=300)
    assert again.returncode == 0, again.stderr
    assert [run_json(out, "a", n)["outcome"] for n in (1, 2)] == ["ok", "ok"]
    ingested = run_cli("ingest", str(out), "--db", str(fresh))
    assert ingested.returncode == 0, ingested.stderr
    with duckdb.connect(str(fresh), read_only=True) as expected, duckdb.connect(str(db), read_only=True) as actual:
        assert expected.execute("SELECT count(*) FROM runs WHERE outcome = 'ok'").fetchone() == (2,)
        assert_same_tables(expected, actual, [*contract_columns(), "line_accounting"])
