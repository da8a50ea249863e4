"""The launcher never signals a process it did not start: a process is pid + start time (+ boot), checked before every
signal. Real processes throughout: a stranger is a real `sleep` leading its own process group, as a server would."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from speclogs.launcher import process as proc
from test_launcher import alive, run, run_json, write_plan


@pytest.fixture
def stranger():
    """An unrelated process that leads its own process group (what a pid from an old run.json may be now)."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    deadline = time.monotonic() + 5
    while proc.identity(other.pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    yield other
    other.kill()
    other.wait()


def _stale_run_json(out, stranger_pid: int, identity: dict | None) -> None:
    """A run.json left by a launcher that was killed mid-launch, before a reboot: its server pid now names a stranger."""
    run_dir = out / "o" / "1"
    run_dir.mkdir(parents=True)
    record = {"schema": "speclogs.run/1", "run_name": "o_1", "outcome": "running", "hostname": socket.gethostname(),
              "server_pid": stranger_pid, "timestamps": {}}
    if identity is not None:
        record["server_identity"] = identity
    (run_dir / "run.json").write_text(json.dumps(record))


@pytest.mark.parametrize("case", ["before a reboot", "same boot, pid reused", "old run.json without identity"])
def test_resume_with_a_stale_run_json_does_not_signal_a_stranger(tmp_path, stranger, case):
    now = proc.identity(stranger.pid)
    identity = {
        "before a reboot": {"pid": stranger.pid, "start_time": now["start_time"] - 7200, "boot_id": "0" * 8 + "-boot-before"},
        "same boot, pid reused": {"pid": stranger.pid, "start_time": now["start_time"] - 30, "boot_id": now["boot_id"]},
        "old run.json without identity": None,
    }[case]
    plan = write_plan(tmp_path, '[[cells]]\nname = "o"')
    out = tmp_path / "out"
    _stale_run_json(out, stranger.pid, identity)

    summary, messages = run(plan, out, resume=True)

    assert summary.results[0].outcome == "ok"
    assert alive(stranger.pid) and stranger.poll() is None, "the launcher signalled a process it did not start"
    record = run_json(out, "o")
    assert record["orphan_not_signalled"]["pid"] == stranger.pid and "orphans_stopped" not in record
    assert any("was not signalled" in m for m in messages)
    assert record["server_identity"]["pid"] == record["server_pid"] and record["server_identity"]["start_time"] > 0


def test_a_group_whose_leader_is_not_ours_is_never_signalled(stranger):
    seen = proc.identity(stranger.pid)
    stopped, reason = proc.stop_orphan_group({**seen, "start_time": seen["start_time"] - 60}, 0.1)
    time.sleep(0.2)
    assert stranger.poll() is None and stopped == [] and "is now another process" in reason
    stopped, reason = proc.stop_orphan_group(seen, 0.5)      # the real identity: now it may be signalled
    assert stopped == [stranger.pid] and reason == "" and stranger.wait(timeout=5) == -signal.SIGTERM


def test_stop_does_not_reap_the_server_before_its_group_is_gone(tmp_path):
    """exit_code() sees an exit without reaping: the pid (and group id) stay ours until stop_server reaps it."""
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    deadline = time.monotonic() + 10
    while proc.exit_code(child) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.exit_code(child) == 0 and child.returncode is None     # exited, not reaped
    assert proc.identity(child.pid) is not None                        # a zombie keeps its identity
    result = proc.stop_server(child, 1.0, {})
    assert result["signal"] == "none" and child.returncode == 0
