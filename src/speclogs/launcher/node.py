"""`python -m speclogs.launcher.node`: one node's part of a multi-node launch, run over ssh by multinode.RemoteNode.

It reads one JSON line on stdin (the uploaded plan, cell, launch, rank, log), drives a run.Node (the same checks, spawn
and stop as on one machine, with this node's own environment) and answers one JSON line per event on stdout:
`spawned` (the node's facts), `pong` (after a `ping` line: this node's clock), `exited` (the server ended by itself),
`stopped` (after a `stop` line, or the end of stdin: the launcher or its ssh session went away), `failed` (nothing
was started: outcome and message).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

from speclogs.launcher import runinfo
from speclogs.launcher.multinode import node_argv
from speclogs.launcher.plan import load_plan
from speclogs.launcher.run import LaunchFailed, Node, probe_address

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
    request = json.loads(line)
    plan = load_plan(request["plan"])
    spec = next(s for s in plan.launch_order() if s.cell.name == request["cell"] and s.launch == request["launch"])
    rank = request["rank"]
    argv = node_argv(plan, spec, rank)
    _, probe_host, port = probe_address(plan, argv)
    node = Node(plan, spec, runinfo.Machine(), argv, Path(request["log"]), (probe_host, port) if rank == 0 else None)
    try:
        node.start()
    except LaunchFailed as failure:
        _send(event="failed", outcome=failure.outcome, message=f"{failure} on {node.facts['hostname']}")
        return 1
    _send(event="spawned", **node.facts)

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
                node.stop()
                _send(event="stopped", reason=command, **{key: node.facts[key] for key in ("exit_code", "stop", "timestamps")})
                return 0
        node.watch()
        if (code := node.exit_code()) is not None and not reported_exit:
            _send(event="exited", code=code)
            reported_exit = True


if __name__ == "__main__":
    sys.exit(main())
