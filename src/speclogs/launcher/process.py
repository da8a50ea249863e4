"""Process handling for one server: spawn in its own process group, probe /health, stop, check nothing is left.

A process is pid + start time, never a pid alone: a pid (and so a process group id) is reused once its process is gone.
psutil.Process checks both before every signal; a group is signalled as a group only while its leader is the server the
launcher started, which stays unreaped (waitid WNOWAIT) until its stop is over, so its pid cannot be reused meanwhile.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import psutil

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Lines worth showing while a server starts (SGLang 0.5.x lifecycle lines).
_MILESTONE = re.compile(
    r"(Init torch distributed (?:begin|ends)|Load weight (?:begin|end)|KV Cache is allocated|Memory pool end|"
    r"Capture [\w ]*CUDA graph (?:begin|end)|max_total_num_tokens|Uvicorn running|Started server process|"
    r"fired up and ready to roll|server_args=|Traceback|Error|error:)"
)
# Start times of one process read twice agree to a clock tick; the boot time they count from may move by a second
# when the clock is stepped.
SAME_START_S = 1.0
_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
# The launch's mark in the environment of every process the server starts: one that leaves its process group (a double
# fork, a new session) still carries it, so stop_server finds it.
LAUNCH_TAG_ENV = "SPECLOGS_LAUNCH_TAG"
# The launcher talks only to the server it started: never through the calling shell's http_proxy / HTTPS_PROXY.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def identity(pid: int) -> dict | None:
    """run.json's `server_identity` of a live (or unreaped) process: pid, start time, boot; None when there is none."""
    try:
        return {"pid": pid, "start_time": round(psutil.Process(pid).create_time(), 3), "boot_id": boot_id()}
    except psutil.Error:
        return None


def exit_code(proc: subprocess.Popen) -> int | None:
    """Our child's exit status once it exited (negative: killed by that signal), without reaping it. None while it runs."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return proc.poll()
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def spawn_server(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """Start `argv` in a new session, stdout+stderr appended to `log_path`, its environment tagged (`proc.launch_tag`)."""
    tag = uuid.uuid4().hex
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, env={**env, LAUNCH_TAG_ENV: tag}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    proc.launch_tag = tag
    return proc


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (bind test, like the server will do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def port_is_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def probe_health(url: str, timeout_s: float = 5.0) -> int | None:
    """HTTP status of GET url, or None when no HTTP answer came (refused, reset, timeout)."""
    try:
        with DIRECT.open(url, timeout=timeout_s) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, ValueError):
        return None


def last_milestone(log_path: Path, tail_bytes: int = 65536) -> str:
    """The last lifecycle line of the server log (ANSI stripped, ≤ 160 chars), '' when none yet."""
    try:
        with open(log_path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - tail_bytes))
            tail = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    for line in reversed(re.split(r"[\r\n]", tail)):
        line = _ANSI.sub("", line).strip()
        if line and _MILESTONE.search(line):
            return line[:160]
    return ""


def nvidia_smi(*query: str) -> list[str] | None:
    """The output lines of `nvidia-smi QUERY… --format=csv,noheader,nounits`; None when nvidia-smi is absent or fails."""
    try:
        result = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):   # OSError: no nvidia-smi
        return None
    return result.stdout.strip().splitlines() if result.returncode == 0 else None


def gpu_compute_pids() -> list[int] | None:
    lines = nvidia_smi("--query-compute-apps=pid")
    return None if lines is None else [int(line) for line in lines if line.strip().isdigit()]


def group_pids(pgid: int) -> list[int]:
    return [process.pid for process in _group(pgid)]


def watch(proc: subprocess.Popen, known: dict[int, psutil.Process]) -> None:
    """Add the running server's descendants and group members to `known` (children that leave the group are ours too)."""
    if exit_code(proc) is not None:
        return
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        children = []
    known.update({p.pid: p for p in [*children, *_group(proc.pid)] if p.pid not in known})


def stop_server(proc: subprocess.Popen, grace_s: float, known: dict[int, psutil.Process]) -> dict:
    """SIGTERM the server's group (and the processes seen in it, among its descendants or carrying its launch tag),
    SIGKILL after `grace_s`, reap the server, then kill what is left. Returns run.json's `stop`; the exit status is
    proc.returncode."""
    pgid = proc.pid
    try:
        leader = psutil.Process(pgid)   # unreaped, so still ours
    except psutil.Error:
        leader = None
    tag = getattr(proc, "launch_tag", None)
    known = {**known, **{p.pid: p for p in [*_group(pgid), *_tagged(tag)]}}
    started = time.monotonic()
    signal_used = "none"
    if exit_code(proc) is None or _group(pgid):
        signal_used = "SIGTERM"
        _signal_group(pgid, leader, known, signal.SIGTERM)
        if not wait_until(lambda: exit_code(proc) is not None and group_pids(pgid) in ([], [pgid]), grace_s, 0.05):
            signal_used = "SIGKILL"
            _signal_group(pgid, leader, known, signal.SIGKILL)
    try:   # the group is gone (or killed): reaping the server frees its pid and group id
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _send(leader, signal.SIGKILL)
        proc.wait(timeout=10)
    wait_until(lambda: not _group(pgid), 5.0, 0.05)
    stop_s = time.monotonic() - started
    known.update({p.pid: p for p in _tagged(tag) if p.pid not in known})
    alive = [p for pid, p in known.items() if pid != pgid and _running(p)]
    strangers = [p.pid for p in _group(pgid) if p.pid not in known]   # never signalled: not seen as ours
    for process in alive:
        _send(process, signal.SIGKILL)
    listed = gpu_compute_pids()
    on_gpu = sorted(pid for pid in listed or [] if pid in known and known[pid].is_running())
    for pid in on_gpu:
        _send(known[pid], signal.SIGKILL)
    return {"signal": signal_used, "stop_s": round(stop_s, 3), "leftover_pids": sorted({p.pid for p in alive} | set(strangers)),
            "gpu_pids": on_gpu, "gpu_apps_after": None if listed is None else sorted(listed)}


def stop_orphan_group(recorded: object, grace_s: float) -> tuple[list[int], str]:
    """Stop the server group a killed launcher (-9) left, only while run.json's `server_identity` still names that very
    process (pid, start time, boot): after a reboot or once it is gone, the pid may be another user's process.
    Returns (the pids stopped, why nothing was signalled or '')."""
    pid, start = (recorded.get("pid"), recorded.get("start_time")) if isinstance(recorded, dict) else (None, None)
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or not isinstance(start, (int, float)):
        return [], "run.json records no process identity (pid + start time), so the pid cannot be verified"
    try:
        leader = psutil.Process(pid)
        now = leader.create_time()
    except psutil.Error:
        return [], ""
    boot, then = boot_id(), recorded.get("boot_id")
    if then and boot and then != boot:
        return [], f"pid {pid} is now another process (the machine has rebooted since)"
    if abs(now - start) > SAME_START_S:
        return [], f"pid {pid} is now another process (it started at {now:.0f}, not {start:.0f})"
    if _pgid(pid) != pid:
        return [], f"pid {pid} no longer leads its process group"
    members = {p.pid: p for p in _group(pid)}
    _signal_group(pid, leader, members, signal.SIGTERM)
    if not wait_until(lambda: not _group(pid), grace_s, 0.05):
        _signal_group(pid, leader, members, signal.SIGKILL)
        wait_until(lambda: not _group(pid), 5.0, 0.05)
    return sorted(members), ""


def wait_until(done: Callable[[], bool], wait_s: float, every_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
    return True


def _signal_group(pgid: int, leader: psutil.Process | None, known: dict[int, psutil.Process], sig: signal.Signals) -> None:
    """The group as a group while `leader` (the process we started) still leads it; else, and for SIGKILL, each process
    we saw (psutil refuses a pid that now names another process). SIGTERM also reaches ours outside the group."""
    as_group = leader is not None and leader.pid == pgid and leader.is_running() and _pgid(pgid) == pgid
    if as_group:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for process in known.values():
        if sig == signal.SIGKILL or not as_group or _pgid(process.pid) != pgid:
            _send(process, sig)


def _send(process: psutil.Process | None, sig: signal.Signals) -> None:
    with suppress(psutil.Error):
        if process is not None:
            process.send_signal(sig)


def _running(process: psutil.Process) -> bool:
    """Still that process, and not a zombie (dead, waiting for its parent to reap it)."""
    try:
        return process.is_running() and process.status() not in _GONE
    except psutil.Error:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _group(pgid: int) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["status"]) if p.info["status"] not in _GONE and _pgid(p.pid) == pgid]


def _tagged(tag: str | None) -> list[psutil.Process]:
    """Live processes whose environment carries the launch tag (those this user may read: others' environ is None)."""
    return [p for p in psutil.process_iter(["status", "environ"]) if tag and p.info["status"] not in _GONE
            and (p.info["environ"] or {}).get(LAUNCH_TAG_ENV) == tag]
