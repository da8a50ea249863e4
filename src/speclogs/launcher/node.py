"""`python -m speclogs.launcher.node`: one node's part of a multi-node launch, run over ssh by the launcher.

It reads one JSON line on stdin (what to start: argv, the env layers, the log path, the stop grace), builds the
server's environment from this node's own (runinfo.build_env), spawns the server in its own process group
(process.spawn_server) and answers on stdout, one JSON line per event:

    {"event": "spawned", "pid", "identity", "hostname", "gpus", "env", "env_dropped", "versions", "spawn"}
    {"event": "pong", "time"}        after a `ping` line: this node's clock (time.time()), for the clock offsets
    {"event": "exited", "code"}      the server ended by itself
    {"event": "stopped", "exit_code", "signal", "stop_s", "leftover_pids", "gpu_pids", "gpu_apps_after", "stop"}
    {"event": "failed", "outcome", "message"}   nothing was started (port in use, the command cannot run)

A `stop` line, or the end of stdin (the launcher or its ssh session went away), stops the server: SIGTERM to its
group, SIGKILL after the grace, then the check that no process of it is left on this node (process.stop_server).
Standard library only (it runs on the GPU nodes).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from speclogs.launcher import process as _proc, runinfo

POLL_S = 0.5  # how often the server's processes are looked at while it runs (to know its children when stopping)


def _send(**event) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> int:
    commands: list[str] = []
    arrived = threading.Event()

    def on_signal(signum, frame) -> None:  # noqa: ARG001 - the launcher's ssh session was cut, or someone stops us
        commands.append("eof")
        arrived.set()

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, on_signal)
    line = sys.stdin.readline()
    if not line:
        return 1
    spec = json.loads(line)
    env, dropped = runinfo.build_env(dict(os.environ), tuple(spec["inherit_env"]),
                                     tuple(spec["drop_inherited_env"]), *spec["env_layers"])
    if spec.get("http_port") is not None and not _proc.port_is_free(spec.get("http_host", "127.0.0.1"), spec["http_port"]):
        _send(event="failed", outcome="port_in_use", message=f"port {spec['http_port']} is already in use on "
                 f"{runinfo.hostname()}")
        return 1
    argv = spec["argv"]
    log_path = Path(spec["log"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    versions = runinfo.server_versions(runinfo.python_of(argv), env) if spec.get("versions", True) else {}
    try:
        proc = _proc.spawn_server(argv, env, log_path)
    except OSError as error:
        _send(event="failed", outcome="spawn_failed", message=f"cannot start {argv[0]}: {error.strerror}")
        return 1
    leader = _proc.process_identity(proc.pid)
    known: dict = {}
    _send(event="spawned", pid=proc.pid, identity=leader.to_dict() if leader else None, hostname=runinfo.hostname(),
             gpus=runinfo.gpu_inventory(), env=runinfo.recorded_env(env, tuple(spec["inherit_env"]), *spec["env_layers"]),
             env_dropped=dropped, versions=versions,
             spawn=runinfo.now_iso(), utc_offset=runinfo.utc_offset())
    def read_commands() -> None:
        for command in sys.stdin:
            commands.append(command.strip())
            arrived.set()
        commands.append("eof")
        arrived.set()

    threading.Thread(target=read_commands, daemon=True).start()
    reported_exit = False
    while True:
        arrived.wait(POLL_S)
        arrived.clear()
        while commands:
            command = commands.pop(0)
            if command == "ping":
                _send(event="pong", time=time.time())
            elif command in ("stop", "eof"):
                result = _proc.stop_server(proc, float(spec["stop_grace_s"]), known, leader)
                _send(event="stopped", exit_code=result.exit_code, signal=result.signal_used, stop_s=result.stop_s,
                         leftover_pids=list(result.leftover_pids), gpu_pids=list(result.gpu_pids),
                         gpu_apps_after=None if result.gpu_apps_after is None else list(result.gpu_apps_after),
                         stop=runinfo.now_iso(), reason=command)
                return 0
        known.update(_proc.ours(proc))
        code = _proc.exit_code(proc)
        if code is not None and not reported_exit:
            _send(event="exited", code=code)
            reported_exit = True


if __name__ == "__main__":
    sys.exit(main())
