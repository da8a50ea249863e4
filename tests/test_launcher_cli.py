"""`speclogs launch` through the real CLI: launch the stand-in, ingest into DuckDB, exit codes a user sees."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "tests" / "standin_server.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def speclogs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "speclogs", *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200"))


def plan_file(tmp_path: Path, cells: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(f"""name = "cli"
command = ["{{python}}", "{STANDIN}"]
port = {free_port()}
health_poll_s = 0.05
stop_grace_s = 2
launches = 1
args = ["--ready-after", "0.2", "--speculative-algorithm", "EAGLE3"]
[bench]
requests = 3
max_new_tokens = 8
{cells}""")
    return path


def test_launch_then_ingest_puts_the_runs_in_duckdb(tmp_path):
    import duckdb
    plan = plan_file(tmp_path, '[[cells]]\nname = "eagle3"\nfactors = {spec = "eagle3"}')
    db = tmp_path / "runs.duckdb"
    result = speclogs("launch", str(plan), "--out", str(tmp_path / "out"), "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert "eagle3_1" in result.stderr and "ok" in result.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT run_name, cell, launch_index, outcome FROM runs").fetchall()
        bench = con.execute("SELECT count(*) FROM bench_requests WHERE NOT warmup").fetchone()[0]
        accept = con.execute("SELECT max(accept_len) FROM decode_batches").fetchone()[0]
    assert runs == [("eagle3_1", "eagle3", 1, "ok")]
    assert bench == 2 and accept == 2.0


def test_failed_launch_exits_1_and_names_it(tmp_path):
    plan = plan_file(tmp_path, '[[cells]]\nname = "dies"\nargs = ["--die-after", "0.1"]')
    result = speclogs("launch", str(plan), "--out", str(tmp_path / "out"), "--no-ingest")
    assert result.returncode == 1
    assert "Error:" in result.stderr and "dies_1 (failed_start)" in result.stderr
    assert "Traceback" not in result.stderr


def test_plan_error_exits_1_with_file_line(tmp_path):
    plan = tmp_path / "bad.toml"
    plan.write_text('[[cells]]\nname = "a"\nprofile = "yes"\n')
    result = speclogs("launch", str(plan), "--no-ingest")
    assert result.returncode == 1
    assert "bad.toml:3:" in result.stderr and "profile must be true or false" in result.stderr
