"""Process handling for one server: spawn in its own process group, probe /health, stop, check nothing is left.

psutil reads the process table (SGLang depends on it, so it is there wherever a server runs).

A process is named by pid + start time (`ProcessIdentity`), never by pid alone: a pid — and so a process group id —
is reused once its process is gone, and after a reboot the pid in an old run.json belongs to whoever got it. Nothing
is signalled unless its identity still matches: a group only while its leader is the very process the launcher
started, a single pid only while it is the process that was seen then. The server stays unreaped (waitid WNOWAIT)
until its stop is over, so its pid and group id cannot be taken by another process in between.
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
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as it was seen: pid, start time (seconds since the epoch) and the boot it ran in (Linux)."""

    pid: int
    start_time: float
    boot_id: str | None = None

    def to_dict(self) -> dict:
        return {"pid": self.pid, "start_time": self.start_time, "boot_id": self.boot_id}

    @classmethod
    def from_dict(cls, data: object) -> "ProcessIdentity | None":
        """From run.json; None when the record has no usable identity (written by an older launcher)."""
        if not isinstance(data, dict):
            return None
        pid, start = data.get("pid"), data.get("start_time")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or not isinstance(start, (int, float)):
            return None
        boot = data.get("boot_id")
        return cls(pid, float(start), boot if isinstance(boot, str) else None)


def boot_id() -> str | None:
    """This boot's id (Linux), None elsewhere."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def process_identity(pid: int) -> ProcessIdentity | None:
    """The identity of the live (or zombie, not yet reaped) process `pid`; None when there is none or it cannot be read."""
    try:
        start = psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):
        return None
    return ProcessIdentity(pid, round(start, 3), boot_id())


def is_same_process(identity: ProcessIdentity | None) -> bool:
    """True only when `identity`'s pid is, now, the process that was seen: same boot, same start time."""
    if identity is None:
        return False
    now = process_identity(identity.pid)
    if now is None:
        return False
    if identity.boot_id and now.boot_id and identity.boot_id != now.boot_id:
        return False
    return abs(now.start_time - identity.start_time) <= SAME_START_S


def identities(pids) -> dict[int, ProcessIdentity]:
    """{pid: identity} for the pids that are alive now (to be checked again before any of them is signalled)."""
    return {pid: identity for pid in pids if (identity := process_identity(pid)) is not None}


def exit_code(proc: subprocess.Popen) -> int | None:
    """The exit status of our child if it has exited (negative: killed by that signal), without reaping it: its pid and
    process group id stay ours until `stop_server` reaps it. None while it runs."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return proc.poll()
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


@dataclass(frozen=True)
class StopResult:
    exit_code: int | None      # the server's exit status (negative = killed by that signal)
    signal_used: str           # "none" (already exited) | "SIGTERM" | "SIGKILL"
    stop_s: float              # SIGTERM → all of the group gone
    leftover_pids: tuple[int, ...]   # processes of the launch still alive after SIGKILL (should be empty)
    gpu_pids: tuple[int, ...]        # our pids that nvidia-smi still lists (should be empty)
    gpu_apps_after: tuple[int, ...] | None = None   # every pid nvidia-smi lists after the stop (None: no nvidia-smi)


# The launch's own mark in the environment of every process the server starts: one that leaves its process group
# (a double fork, a new session) still carries it, so stop_server finds it in /proc/*/environ.
LAUNCH_TAG_ENV = "SPECLOGS_LAUNCH_TAG"


def spawn_server(argv: list[str], env: dict[str, str], log_path: Path, cwd: Path | None = None) -> subprocess.Popen:
    """Start `argv` in a new session (own process group), stdout+stderr appended to `log_path`, its environment
    marked with a tag of this launch (`proc.launch_tag`, LAUNCH_TAG_ENV)."""
    tag = uuid.uuid4().hex
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, env={**env, LAUNCH_TAG_ENV: tag}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
    proc.launch_tag = tag
    return proc


def tagged_pids(tag: str | None) -> list[int]:
    """Live processes whose environment carries the launch tag `tag` (those /proc lets this user read)."""
    if not tag:
        return []
    pids = []
    for process in _live():
        try:
            if process.environ().get(LAUNCH_TAG_ENV) == tag:
                pids.append(process.pid)
        except (psutil.Error, OSError):
            continue
    return pids


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
    """Live (non-zombie) processes whose process group is `pgid`."""
    return [process.pid for process in _live() if _pgid(process.pid) == pgid]


def nvidia_smi(*query: str) -> list[str] | None:
    """The output lines of `nvidia-smi QUERY… --format=csv,noheader,nounits`; None when nvidia-smi is absent or fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip().splitlines() if result.returncode == 0 else None


def gpu_compute_pids() -> list[int] | None:
    """PIDs nvidia-smi lists as GPU compute apps; None when nvidia-smi is absent or fails."""
    lines = nvidia_smi("--query-compute-apps=pid")
    return None if lines is None else [int(line) for line in lines if line.strip().isdigit()]


def stop_server(proc: subprocess.Popen, grace_s: float, known: dict[int, ProcessIdentity] | None = None,
                leader: ProcessIdentity | None = None) -> StopResult:
    """SIGTERM the process group, SIGKILL it after `grace_s`, then check no process of it is left.

    `leader` is the server's identity taken at spawn; `known` the identities of processes seen in its group or among
    its descendants while it ran (children that left the group are caught this way too). Every signal is sent only
    to what still matches them.
    """
    pgid = proc.pid
    leader = leader or process_identity(proc.pid)
    known = dict(known or {})
    if is_same_process(leader):
        known.update(identities(group_pids(pgid)))
    tag = getattr(proc, "launch_tag", None)
    known.update(identities(tagged_pids(tag)))  # those that left the group (double fork, setsid) carry the tag
    if leader is not None:
        known[proc.pid] = leader
    outside = {pid: identity for pid, identity in known.items() if _pgid(pid) != pgid}
    started = time.monotonic()
    signal_used = "none"
    if exit_code(proc) is None or group_pids(pgid):
        signal_used = "SIGTERM"
        _signal_group(pgid, signal.SIGTERM, leader, known)
        for identity in outside.values():  # (a daemon of the server's is asked to stop too)
            if is_same_process(identity):
                _send(identity.pid, signal.SIGTERM)
        if not wait_until(lambda: exit_code(proc) is not None and group_pids(pgid) in ([], [pgid]), grace_s, 0.05):
            signal_used = "SIGKILL"
            _signal_group(pgid, signal.SIGKILL, leader, known)
            for identity in known.values():
                _kill(identity)
    # the group is gone (or killed): now reap the server, which frees its pid and group id
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        _kill(leader)
        proc.wait(timeout=10)
    # members of the group may need a moment to be reaped after SIGKILL
    wait_until(lambda: not group_pids(pgid), 5.0, 0.05)
    stop_s = time.monotonic() - started
    known.update({pid: identity for pid, identity in identities(tagged_pids(tag)).items() if pid not in known})
    alive_known = [identity for pid, identity in known.items()
                   if pid != proc.pid and _running(pid) and is_same_process(identity)]
    # members still in the group: ours only if seen before (a group whose leader is gone is never signalled as a group)
    strangers = [pid for pid in group_pids(pgid) if pid not in known]
    leftover = sorted({identity.pid for identity in alive_known} | set(strangers))
    for identity in alive_known:
        _kill(identity)
    listed = gpu_compute_pids()
    ours_on_gpu = tuple(sorted(pid for pid in listed or [] if pid in known and is_same_process(known[pid])))
    for pid in ours_on_gpu:
        _kill(known[pid])
    return StopResult(exit_code=proc.returncode, signal_used=signal_used, stop_s=round(stop_s, 3),
                      leftover_pids=tuple(leftover), gpu_pids=ours_on_gpu,
                      gpu_apps_after=None if listed is None else tuple(sorted(listed)))


@dataclass(frozen=True)
class OrphanStop:
    stopped: tuple[int, ...]   # pids of the group that was stopped ((): nothing signalled)
    reason: str                # why nothing was signalled, '' when the group was stopped or was already gone


def stop_orphan_group(leader: ProcessIdentity | None, grace_s: float) -> OrphanStop:
    """Stop the server group a killed launcher (-9) left behind: SIGTERM, SIGKILL after grace — only when its leader
    is still the very process that launcher started (same pid, start time and boot). Anything else is left alone:
    after a reboot or once the server is gone, that pid may belong to another user's process."""
    if leader is None:
        return OrphanStop((), "run.json records no process identity (pid + start time), so the pid cannot be verified")
    now = process_identity(leader.pid)
    if now is None:
        return OrphanStop((), "")
    if not is_same_process(leader):
        why = ("the machine has rebooted since" if leader.boot_id and now.boot_id and leader.boot_id != now.boot_id
               else f"it started at {now.start_time:.0f}, not {leader.start_time:.0f}")
        return OrphanStop((), f"pid {leader.pid} is now another process ({why})")
    if _pgid(leader.pid) != leader.pid:
        return OrphanStop((), f"pid {leader.pid} no longer leads its process group")
    pids = group_pids(leader.pid)
    known = identities(pids)
    _signal_group(leader.pid, signal.SIGTERM, leader, known)
    if not wait_until(lambda: not group_pids(leader.pid), grace_s, 0.05):
        _signal_group(leader.pid, signal.SIGKILL, leader, known)
        wait_until(lambda: not group_pids(leader.pid), 5.0, 0.05)
    return OrphanStop(tuple(pids), "")


def descendants(pid: int) -> set[int]:
    """All descendants of `pid`, to catch children that left the process group."""
    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def ours(proc: subprocess.Popen) -> dict[int, ProcessIdentity]:
    """Identities of the server's descendants and group members, taken while the server runs (so they are ours)."""
    if exit_code(proc) is not None:
        return {}
    return identities(descendants(proc.pid) | set(group_pids(proc.pid)))


def wait_until(done: Callable[[], bool], wait_s: float, every_s: float) -> bool:
    """Call `done` every every_s until it is true (→ True) or wait_s have passed (→ False)."""
    deadline = time.monotonic() + wait_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
    return True


def free_mb(path: Path) -> float:
    return shutil.disk_usage(path).free / 2**20


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie is dead: it only waits for its parent to reap it)."""
    try:
        return psutil.Process(pid).status() not in _GONE
    except psutil.Error:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError, OSError):
        return None


def _signal_group(pgid: int, sig: signal.Signals, leader: ProcessIdentity | None,
                  known: dict[int, ProcessIdentity]) -> None:
    """Signal group `pgid` as a group only while its leader is `leader` (the process we started, still leading it);
    otherwise signal, one by one, the members that are processes we saw before."""
    if leader is not None and leader.pid == pgid and is_same_process(leader) and _pgid(pgid) == pgid:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        return
    for pid in group_pids(pgid):
        identity = known.get(pid)
        if identity is not None and is_same_process(identity):
            _send(pid, sig)


def _send(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(identity: ProcessIdentity | None) -> None:
    """SIGKILL the process `identity` names, only if it is still that process."""
    if identity is not None and is_same_process(identity):
        _send(identity.pid, signal.SIGKILL)


def _live() -> Iterator[psutil.Process]:
    """Every process that has not exited (zombies are dead: they only wait for their parent to reap them)."""
    for process in psutil.process_iter(["status"]):
        if process.info["status"] not in _GONE:
            yield process
