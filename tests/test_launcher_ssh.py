"""`speclogs launch --host user@box` for real: our own sshd on loopback, a tmp key pair, the stand-in server
started on the "remote" side through ssh, outputs pulled back. Skipped where /usr/sbin/sshd is missing."""

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

from speclogs.launcher import LaunchOptions, launch_remote

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


def test_remote_launch_runs_the_standin_over_ssh_and_pulls_outputs_back(sshd, tmp_path):
    host, options, tmp = sshd
    plan = tmp_path / "remote.toml"
    plan.write_text(f"""
name = "remote"
command = ["{{python}}", "{STANDIN}"]
port = {free_port()}
health_poll_s = 0.05
stop_grace_s = 2
launches = 1
args = ["--ready-after", "0.3", "--speculative-algorithm", "EAGLE3"]
[env]
NCCL_DEBUG = "INFO"
[bench]
requests = 3
max_new_tokens = 8
[[cells]]
name = "a"
factors = {{spec = "eagle3"}}
[[cells]]
name = "b"
""")
    remote_dir = str(tmp / "remote-work")
    out = tmp_path / "pulled"
    messages: list[str] = []
    summary = launch_remote(plan, host, LaunchOptions(out_dir=out, max_launches=1), ssh_options=options,
                            remote_python=sys.executable, remote_dir=remote_dir, progress=messages.append)
    assert [(r.run_name, r.outcome) for r in summary.results] == [("a_1", "ok")]
    assert summary.pending == ("b_1",) and summary.results[0].run_dir == str(out / "a" / "1")
    record = json.loads((out / "a" / "1" / "run.json").read_text())
    assert record["outcome"] == "ok" and record["factors"] == {"spec": "eagle3"}
    assert record["env"]["NCCL_DEBUG"] == "INFO"
    assert "SIGTERM received" in (out / "a" / "1" / "server.log").read_text()
    assert len((out / "a" / "1" / "bench.jsonl").read_text().splitlines()) == 3
    assert any(m.startswith(f"{host}| ") and "ready in" in m for m in messages)   # remote progress relayed

    again = launch_remote(plan, host, LaunchOptions(out_dir=out, resume=True), ssh_options=options,
                          remote_python=sys.executable, remote_dir=remote_dir)
    assert [(r.run_name, r.skipped, r.outcome) for r in again.results] == [("a_1", True, "ok"), ("b_1", False, "ok")]
    assert (out / "b" / "1" / "run.json").exists()


def test_remote_plan_error_is_reported_with_the_remote_message(sshd, tmp_path):
    host, options, tmp = sshd
    plan = tmp_path / "bad.toml"
    plan.write_text('model_path = "/nonexistent/remote-model"\n[[cells]]\nname = "a"\n')
    from speclogs.errors import LaunchError
    with pytest.raises(LaunchError, match="does not exist"):
        launch_remote(plan, host, LaunchOptions(out_dir=tmp_path / "o"), ssh_options=options,
                      remote_python=sys.executable, remote_dir=str(tmp / "remote-work"))


def test_ctrl_c_during_a_remote_launch_stops_the_remote_server(sshd, tmp_path):
    host, options, tmp = sshd
    plan = tmp_path / "slow.toml"
    plan.write_text(f"""
name = "slow"
command = ["{{python}}", "{STANDIN}"]
port = {free_port()}
health_poll_s = 0.05
stop_grace_s = 2
launches = 1
args = ["--never-ready", "--spawn-child"]
[[cells]]
name = "a"
""")
    remote_dir = tmp / "remote-ctrl-c"
    out = tmp_path / "pulled"
    cli = [sys.executable, "-m", "speclogs", "launch", str(plan), "--out", str(out), "--no-ingest", "--host", host,
           "--remote-python", sys.executable, "--remote-dir", str(remote_dir)] + [f"--ssh-opt={o}" for o in options]
    launcher = subprocess.Popen(cli, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), stderr=subprocess.PIPE,
                                text=True)
    remote_log = remote_dir / "runs" / "slow" / "a" / "1" / "server.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "scheduler child pid=" not in (remote_log.read_text() if remote_log.exists() else ""):
        time.sleep(0.1)
    child_pid = int(remote_log.read_text().split("scheduler child pid=")[1].split()[0])
    launcher.send_signal(signal.SIGINT)
    _, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 130, stderr[-2000:]
    record = json.loads((out / "a" / "1" / "run.json").read_text())      # pulled back after the interrupt
    assert record["outcome"] == "interrupted"
    for pid in (record["server_pid"], child_pid):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
