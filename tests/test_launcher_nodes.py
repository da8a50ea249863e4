"""Multi-node launches for real: our own sshd on loopback, two "nodes" reached through it, the stand-in server
playing node 0 (HTTP, rendezvous on the dist-init port) and node 1 (joins node 0, serves nothing).
Skipped where /usr/sbin/sshd is missing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import query, run_cli
from speclogs.launcher import LaunchOptions, launch_plan, load_plan
from test_launcher_ssh import STANDIN, free_port, sshd  # noqa: F401 - the sshd fixture

pytestmark = pytest.mark.ssh


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def write_plan(tmp_path: Path, host: str, options, remote_dir: Path, *, extra_args: str = "") -> Path:
    plan = tmp_path / "two-nodes.toml"
    ssh_options = ", ".join(json.dumps(o) for o in options)
    plan.write_text(f"""
name = "two-nodes"
command = ["{{python}}", "{STANDIN}"]
nodes = ["{host}", "{host}"]
ssh_options = [{ssh_options}]
remote_python = "{sys.executable}"
remote_dir = "{remote_dir}"
dist_init_port = {free_port()}
port = {free_port()}
health_poll_s = 0.05
stop_grace_s = 2
launches = 1
args = ["--ready-after", "0.2", "--speculative-algorithm", "EAGLE3"{extra_args}]
[env]
NCCL_DEBUG = "INFO"
NCCL_SOCKET_IFNAME = "lo"
[bench]
requests = 3
max_new_tokens = 8
[[cells]]
name = "a"
factors = {{spec = "eagle3"}}
""")
    return plan


def test_two_nodes_start_serve_stop_and_come_back_as_one_run(sshd, tmp_path):  # noqa: F811 (the imported fixture)
    host, options, tmp = sshd
    out = tmp_path / "runs"
    plan = load_plan(write_plan(tmp_path, host, options, tmp / "nodes-work"))
    messages: list[str] = []
    summary = launch_plan(plan, LaunchOptions(out_dir=out), progress=messages.append)
    assert [(r.run_name, r.outcome) for r in summary.results] == [("a_1", "ok")], messages[-5:]
    launch = out / "a" / "1"
    record = json.loads((launch / "run.json").read_text())
    assert record["outcome"] == "ok" and record["ready_s"] > 0 and record["bench_summary"]["requests_done"] == 3
    assert [node["rank"] for node in record["nodes"]] == [0, 1] and record["leftover_pids"] == []
    dist_init = record["dist_init_addr"]
    for rank in (0, 1):
        node = json.loads((launch / f"node{rank}" / "run.json").read_text())
        assert node["run_uid"] == record["run_uid"] and node["node"]["rank"] == rank and node["node"]["nnodes"] == 2
        assert node["node"]["ssh"] == host and node["hostname"]
        assert node["argv"][-6:] == ["--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", dist_init]
        assert node["env_nccl"] == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "lo"}
        assert node["stop"]["leftover_pids"] == [] and node["stop"]["signal"] == "SIGTERM"
        assert not _alive(node["server_pid"])  # stopped, on its node
        log = (launch / f"node{rank}" / "server.log").read_text()
        assert "SIGTERM received" in log and "Gracefully exiting" in log
    assert "node rank 1 joined (2/2 nodes)" in (launch / "node0" / "server.log").read_text()
    assert len((launch / "bench.jsonl").read_text().splitlines()) == 3

    db = tmp_path / "speclogs.duckdb"
    ingested = run_cli("ingest", str(out), "--db", str(db))
    assert ingested.returncode == 0, ingested.stderr
    assert query(db, "SELECT run_name, cell, outcome FROM runs") == [("a_1", "a", "ok")]
    logs = query(db, "SELECT source_file FROM launches ORDER BY 1")
    assert [Path(s).parent.name for (s,) in logs] == ["node0", "node1"]  # one launch, its two nodes' logs
    assert query(db, "SELECT count(DISTINCT run_id) FROM server_events") == [(1,)]
    assert query(db, "SELECT count(*) FROM bench_requests") == [(3,)]


def test_a_node_that_dies_fails_the_launch_and_every_node_is_stopped(sshd, tmp_path):  # noqa: F811 (the imported fixture)
    """node 0's server dies during its start (exit 3): failed_start naming node 0; node 1 is stopped all the same."""
    host, options, tmp = sshd
    plan_path = write_plan(tmp_path, host, options, tmp / "nodes-fail", extra_args=', "--die-after", "0.3"')
    out = tmp_path / "runs"
    result = run_cli("launch", str(plan_path), "--out", str(out), "--no-ingest", timeout=180)
    assert result.returncode == 1, result.stderr
    record = json.loads((out / "a" / "1" / "run.json").read_text())
    assert record["outcome"] == "failed_start" and "node 0" in record["outcome_detail"]
    for rank in (0, 1):
        node = json.loads((out / "a" / "1" / f"node{rank}" / "run.json").read_text())
        assert node["outcome"] == "failed_start" and node["stop"]["leftover_pids"] == []
        assert not _alive(node["server_pid"])


@pytest.mark.parametrize("text, message", [
    ("nodes = []\n", "nodes is empty"),
    ('dist_init_port = 5000\n', "dist_init_port needs nodes"),
    ('nodes = ["me@a", "me@b"]\n[adaptive]\nuntil = "ci_width<=5%"\n', "cannot be combined with [adaptive]"),
])
def test_multi_node_plan_errors_name_the_line(tmp_path, text, message):
    from speclogs.errors import PlanError

    plan = tmp_path / "bad.toml"
    plan.write_text(text + '[[cells]]\nname = "a"\n')
    with pytest.raises(PlanError, match=message.replace("[", r"\[")) as error:
        load_plan(plan)
    assert str(error.value).startswith(f"{plan}:1:")


def test_a_profiled_cell_is_refused_with_nodes(tmp_path):
    from speclogs.errors import PlanError

    plan = tmp_path / "bad.toml"
    plan.write_text('nodes = ["me@a", "me@b"]\n[[cells]]\nname = "a"\nprofile = true\n')
    with pytest.raises(PlanError, match=r"bad.toml:4: cell a: profile = true is not supported with nodes"):
        load_plan(plan)
