"""Process handling for one server: spawn in its own process group, probe /health, stop, check nothing is left.

Standard library only (runs on the GPU box).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Lines worth showing while a server starts (SGLang 0.5.x lifecycle lines).
_MILESTONE = re.compile(
    r"(Init torch distributed (?:begin|ends)|Load weight (?:begin|end)|KV Cache is allocated|Memory pool end|"
    r"Capture [\w ]*CUDA graph (?:begin|end)|max_total_num_tokens|Uvicorn running|Started server process|"
    r"fired up and ready to roll|server_args=|Traceback|Error|error:)"
)


@dataclass(frozen=True)
class StopResult:
    exit_code: int | None      # the server's exit status (negative = killed by that signal)
    signal_used: str           # "none" (already exited) | "SIGTERM" | "SIGKILL"
    stop_s: float              # SIGTERM → all of the group gone
    leftover_pids: tuple[int, ...]   # processes of the launch still alive after SIGKILL (should be empty)
    gpu_pids: tuple[int, ...]        # our pids that nvidia-smi still lists (should be empty)
    gpu_apps_after: tuple[int, ...] | None = None   # every pid nvidia-smi lists after the stop (None: no nvidia-smi)


def spawn_server(argv: list[str], env: dict[str, str], log_path: Path, cwd: Path | None = None) -> subprocess.Popen:
    """Start `argv` in a new session (own process group), stdout+stderr appended to `log_path`."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=cwd)


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


# The launcher talks only to the server it started: never through the calling shell's http_proxy / HTTPS_PROXY.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def open_direct(request, timeout_s: float):
    """urlopen without any proxy (the server is local or named by the plan; a proxy would see its traffic)."""
    return _DIRECT.open(request, timeout=timeout_s)


def probe_health(url: str, timeout_s: float = 5.0) -> int | None:
    """HTTP status of GET url, or None when no HTTP answer came (refused, reset, timeout)."""
    try:
        with open_direct(url, timeout_s) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, ValueError):
        return None


def last_milestone(log_path: Path, tail_bytes: int = 65536) -> str:
    """The last lifecycle line of the server log (ANSI stripped, ≤ 160 chars), '' when none yet."""
    try:
        with open(log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - tail_bytes))
            tail = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    for line in reversed(re.split(r"[\r\n]", tail)):
        line = _ANSI.sub("", line).strip()
        if line and _MILESTONE.search(line):
            return line[:160]
    return ""


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`, from /proc; falls back to killpg(0)."""
    if not Path("/proc/self/stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            return [pgid]
        return [pgid]
    pids: list[int] = []
    for pid, fields in _proc_stats():
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            pids.append(pid)
    return pids


def gpu_compute_pids() -> list[int] | None:
    """PIDs nvidia-smi lists as GPU compute apps; None when nvidia-smi is absent or fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return [int(tok) for tok in result.stdout.split() if tok.strip().isdigit()]


def stop_server(proc: subprocess.Popen, grace_s: float, known_pids: set[int] | None = None) -> StopResult:
    """SIGTERM the process group, SIGKILL it after `grace_s`, then check no process of it is left.

    `known_pids` are pids seen in the group while it ran (children that left the group are caught this way too).
    """
    pgid = proc.pid
    known = set(known_pids or ()) | set(group_pids(pgid)) | {proc.pid}
    started = time.monotonic()
    signal_used = "none"
    if proc.poll() is None or group_pids(pgid):
        signal_used = "SIGTERM"
        _signal_group(pgid, signal.SIGTERM)
        deadline = started + grace_s
        while time.monotonic() < deadline:
            proc.poll()
            if proc.returncode is not None and not group_pids(pgid):
                break
            time.sleep(0.05)
        else:
            signal_used = "SIGKILL"
            _signal_group(pgid, signal.SIGKILL)
            for pid in known:
                _kill(pid)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _kill(proc.pid)
        proc.wait(timeout=10)
    # members of the group may need a moment to be reaped after SIGKILL
    deadline = time.monotonic() + 5
    while group_pids(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop_s = time.monotonic() - started
    leftover = [pid for pid in known if _alive(pid)] + [pid for pid in group_pids(pgid) if pid not in known]
    for pid in leftover:
        _kill(pid)
    listed = gpu_compute_pids()
    ours_on_gpu = tuple(sorted(pid for pid in listed or [] if pid in known))
    for pid in ours_on_gpu:
        _kill(pid)
    return StopResult(exit_code=proc.returncode, signal_used=signal_used, stop_s=round(stop_s, 3),
                      leftover_pids=tuple(sorted(set(leftover))), gpu_pids=ours_on_gpu,
                      gpu_apps_after=None if listed is None else tuple(sorted(listed)))


def stop_orphan_group(pgid: int, grace_s: float) -> list[int]:
    """Stop a process group left by a launcher that was killed (-9): SIGTERM, SIGKILL after grace. Returns its pids."""
    pids = group_pids(pgid)
    if not pids:
        return []
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_pids(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if group_pids(pgid):
        _signal_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while group_pids(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
    return pids


def descendants(pid: int) -> set[int]:
    """All live descendants of `pid` (from /proc), to catch children that left the process group."""
    children: dict[int, list[int]] = {}
    for child, fields in _proc_stats():
        if len(fields) >= 2:
            children.setdefault(int(fields[1]), []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def free_mb(path: Path) -> float:
    return shutil.disk_usage(path).free / 2**20


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _proc_stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, fields after the command name: state ppid pgrp …) for every process in /proc (none without /proc).
    The command name may hold spaces and parentheses, so the fields start after its last ')'."""
    proc = Path("/proc")
    if not proc.exists():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), stat[stat.rfind(")") + 2:].split()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] not in ("Z", "X")
