"""A plan with one node (`nodes = ["user@box"]`) for real: our own sshd on loopback, a tmp key pair, the stand-in
server started on the "remote" side through ssh, its log brought back. Skipped where /usr/sbin/sshd is missing."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speclogs.launcher import LaunchOptions, launch_plan, load_plan

pytestmark = pytest.mark.ssh

SSHD = Path("/usr/sbin/sshd")
STANDIN = Path(__file__).resolve().parent / "standin_server.py"
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not SSHD.exists() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("sshd/ssh missing (Debian: apt-get install -y openssh-server)")
    tmp = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "client_key.pub").read_text())
    os.chmod(tmp / "authorized_keys", 0o600)
    Path("/run/sshd").mkdir(exist_ok=True)          # privilege-separation dir sshd insists on
    port = free_port()
    config = tmp / "sshd_config"
    config.write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {tmp / 'host_key'}
PidFile none
AuthorizedKeysFile {tmp / 'authorized_keys'}
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
""")
    server = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=open(tmp / "sshd.log", "wb"))
    options = ("-p", str(port), "-i", str(tmp / "client_key"), "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5")
    host = f"{getpass.getuser()}@127.0.0.1"
    deadline = time.monotonic() + 10
    while True:
        probe = subprocess.run(["ssh", "-o", "BatchMode=yes", *options, host, "true"], capture_output=True)
        if probe.returncode == 0:
            break
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            pytest.skip(f"sshd on loopback did not accept us: {probe.stderr.decode()[-300:]} "
                        f"{(tmp / 'sshd.log').read_text()[-300:]}")
        time.sleep(0.2)
    yield host, options, tmp
    server.terminate()
    server.wait(timeout=10)


def one_node_plan(path: Path, host: str, options, remote_dir: Path, body: str) -> Path:
    ssh_options = ", ".join(json.dumps(o) for o in options)
    path.write_text(f"""
name = "{path.stem}"
command = ["{{python}}", "{STANDIN}"]
nodes = ["{host}"]
ssh_options = [{ssh_options}]
remote_python = "{sys.executable}"
remote_dir = "{remote_dir}"
port = {free_port()}
health_poll_s = 0.05
stop_grace_s = 2
launches = 1
{body}""")
    return path


def test_a_one_node_plan_runs_the_standin_over_ssh_and_brings_its_log_back(sshd, tmp_path):
    host, options, tmp = sshd
    plan = one_node_plan(tmp_path / "remote.toml", host, options, tmp / "remote-work", """
args = ["--ready-after", "0.3", "--speculative-algorithm", "EAGLE3"]
[env]
NCCL_DEBUG = "INFO"
[bench]
requests = 3
max_new_tokens = 8
[[cells]]
name = "a"
factors = {spec = "eagle3"}
[[cells]]
name = "b"
""")
    out = tmp_path / "runs"
    messages: list[str] = []
    summary = launch_plan(load_plan(plan), LaunchOptions(out_dir=out, max_launches=1), progress=messages.append)
    assert [(r.run_name, r.outcome) for r in summary.results] == [("a_1", "ok")], messages[-5:]
    assert summary.pending == ("b_1",)
    record = json.loads((out / "a" / "1" / "run.json").read_text())
    assert record["outcome"] == "ok" and record["factors"] == {"spec": "eagle3"} and record["env"]["NCCL_DEBUG"] == "INFO"
    assert record["nodes"][0]["ssh"] == host and record["leftover_pids"] == []
    node = json.loads((out / "a" / "1" / "node0" / "run.json").read_text())
    assert "--nnodes" not in node["argv"] and node["node"]["dist_init_addr"] is None   # one box: no rendezvous flags
    assert "SIGTERM received" in (out / "a" / "1" / "node0" / "server.log").read_text()
    assert len((out / "a" / "1" / "bench.jsonl").read_text().splitlines()) == 3

    again = launch_plan(load_plan(plan), LaunchOptions(out_dir=out, resume=True))
    assert [(r.run_name, r.skipped, r.outcome) for r in again.results] == [("a_1", True, "ok"), ("b_1", False, "ok")]


def test_ctrl_c_during_a_remote_launch_stops_the_remote_server(sshd, tmp_path):
    host, options, tmp = sshd
    remote_dir = tmp / "remote-ctrl-c"
    plan = one_node_plan(tmp_path / "slow.toml", host, options, remote_dir,
                         'args = ["--never-ready", "--spawn-child"]\n[[cells]]\nname = "a"\n')
    out = tmp_path / "runs"
    cli = [sys.executable, "-m", "speclogs", "launch", str(plan), "--out", str(out), "--no-ingest"]
    launcher = subprocess.Popen(cli, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), stderr=subprocess.PIPE,
                                text=True)
    remote_log = remote_dir / "runs" / "slow" / "a" / "1" / "node0" / "server.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "scheduler child pid=" not in (remote_log.read_text() if remote_log.exists() else ""):
        time.sleep(0.1)
    child_pid = int(remote_log.read_text().split("scheduler child pid=")[1].split()[0])
    launcher.send_signal(signal.SIGINT)
    _, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 130, stderr[-2000:]
    record = json.loads((out / "a" / "1" / "node0" / "run.json").read_text())
    assert record["outcome"] == "interrupted" and record["stop"]["leftover_pids"] == []
    for pid in (record["server_pid"], child_pid):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
