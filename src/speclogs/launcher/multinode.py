"""Plans with `nodes = ["user@host1", …]`: SGLang on every node at once, each reached over ssh (one node: a remote box).

Each node is a `RemoteNode`: over ssh, the node agent (`python -m speclogs.launcher.multinode`, `agent` below) reads the
uploaded plan and drives a run.Node there with SGLang's multi-node flags; the launch itself is run._launch_one, as on
one machine. This side writes a run.json per node next to the launch's (docs/launcher.md, "Remote nodes"); all carry
the launch's run_uid, so the ingest makes one run of them.
"""

from __future__ import annotations

import io
import json
import queue
import shlex
import signal
import subprocess
import sys
import tarfile
import threading
import time
from contextlib import suppress
from pathlib import Path

import speclogs
from speclogs.errors import LaunchError
from speclogs.launcher import runinfo
from speclogs.launcher.plan import PYTHON_PLACEHOLDER, LaunchSpec, Plan, load_plan
from speclogs.launcher.run import LaunchFailed, Node, Progress, probe_address, server_argv
from speclogs.runrecord import finish_record, node_record, write_run_json

SPAWN_TIMEOUT_S = 300.0   # ssh + the node's version probe + spawn
POLL_S = 0.5              # how often the agent looks at its server's processes (to know its children when stopping)
STOP_EXTRA_S = 60.0       # beyond stop_grace_s: SIGKILL, reaping, the leftover check


def dist_init_addr(plan: Plan) -> str | None:
    """Node 0's rendezvous, as the plan writes its host; None for one node (SGLang's own single-box rendezvous)."""
    nodes = plan.nodes
    return f"{nodes.http_host}:{nodes.dist_init_port}" if len(nodes.nodes) > 1 else None


def node_argv(plan: Plan, spec: LaunchSpec, rank: int) -> list[str]:
    """The server argv on node `rank`: the plan's, with {python} the nodes' Python and SGLang's multi-node flags."""
    argv = server_argv(plan, spec)
    if plan.command[0] == PYTHON_PLACEHOLDER:
        argv[0] = plan.nodes.remote_python
    if (address := dist_init_addr(plan)) is None:
        return argv
    return argv + ["--nnodes", str(len(plan.nodes.nodes)), "--node-rank", str(rank), "--dist-init-addr", address]


def remote_plan(plan: Plan) -> str:
    return f"plans/{plan.name}.toml"


def ssh_command(plan: Plan, host: str) -> list[str]:
    return ["ssh", "-o", "BatchMode=yes", *plan.nodes.ssh_options, "--", host]   # `--`: a host is never an option


def upload(plan: Plan, say: Progress) -> None:
    """speclogs and the plan, as tar over ssh, unpacked into remote_dir on every distinct node (once per plan run):
    ssh, tar and Python ≥ 3.11 are all a node needs."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(Path(speclogs.__file__).resolve().parent, arcname="src/speclogs",
                filter=lambda info: None if "__pycache__" in info.name else info)
        tar.add(plan.path, arcname=remote_plan(plan))
    where = shlex.quote(plan.nodes.remote_dir)
    for host in dict.fromkeys(plan.nodes.nodes):
        say(f"{host}: uploading speclogs to {plan.nodes.remote_dir}")
        done = subprocess.run([*ssh_command(plan, host), f"mkdir -p {where} && cd {where} && rm -rf src/speclogs && tar -xf -"],
                              input=buffer.getvalue(), capture_output=True, timeout=300)
        if done.returncode != 0:
            raise LaunchError(f"ssh {host}: upload failed (exit {done.returncode}): {_tail(done.stderr)}",
                              hint=f"check that `{shlex.join(ssh_command(plan, host))} true` works")


def _tail(raw: bytes) -> str:
    lines = raw.decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1] if lines else "no message"


def launch_fields(plan: Plan) -> dict:
    """The launch run.json's own multi-node fields (each node's facts come with its record)."""
    return {"dist_init_addr": dist_init_addr(plan),
            "nodes": [{"rank": rank, "ssh": host} for rank, host in enumerate(plan.nodes.nodes)],
            "files": {"bench": "bench.jsonl", "nodes": [f"node{rank}" for rank in range(len(plan.nodes.nodes))]}}


class RemoteNode:
    """One node's server through its agent over ssh, with run.Node's interface."""

    def __init__(self, plan: Plan, spec: LaunchSpec, rank: int, host: str, say: Progress) -> None:
        nodes = plan.nodes
        self.plan, self.spec, self.rank, self.host, self.say = plan, spec, rank, host, say
        self.name = f"node {rank} ({host}): "
        self.log = f"runs/{plan.name}/{spec.cell.name}/{spec.launch}/node{rank}/server.log"   # under remote_dir
        self.log_path = f"{host}:{nodes.remote_dir}/{self.log}"
        self.facts: dict = {   # the agent's `spawned` event adds the rest of run.Node's facts
            "node": {"rank": rank, "nnodes": len(nodes.nodes), "ssh": host, "dist_init_addr": dist_init_addr(plan)},
            "argv": node_argv(plan, spec, rank), "hostname": None, "timestamps": {"spawn": None, "stop": None},
            "server_pid": None, "exit_code": None, "stop": None, "files": {"server_log": "server.log"}}
        self.ssh = ssh_command(plan, host)
        command = (f"cd {shlex.quote(nodes.remote_dir)} && PYTHONPATH=\"$PWD/src${{PYTHONPATH:+:$PYTHONPATH}}\" exec "
                   f"{shlex.quote(nodes.remote_python)} -m speclogs.launcher.multinode")
        try:
            self.proc = subprocess.Popen([*self.ssh, command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1)
        except OSError as error:
            raise LaunchFailed("spawn_failed", f"{self.name}cannot run ssh: {error.strerror}") from error
        self.events: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        self.last: dict[str, dict] = {}
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(line.rstrip() for line in self.proc.stderr), daemon=True).start()
        self._send(json.dumps({"plan": remote_plan(plan), "cell": spec.cell.name, "launch": spec.launch, "rank": rank, "log": self.log}))

    def _read(self) -> None:
        for line in self.proc.stdout:
            with suppress(json.JSONDecodeError):   # ssh's or a login script's own lines
                event = json.loads(line)
                self.last[event.get("event", "")] = event
                self.events.put(event)
        self.events.put({"event": "gone"})

    def _send(self, line: str) -> None:
        with suppress(OSError):
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()

    def _wait_for(self, name: str, timeout_s: float) -> dict | None:
        """The next event `name` (or 'gone', 'failed'); None on timeout. Every event is kept in `last` too."""
        deadline = time.monotonic() + timeout_s
        try:
            while (event := self.events.get(timeout=max(0.0, deadline - time.monotonic()))).get("event") not in (name, "gone", "failed"):
                pass
        except queue.Empty:
            return None
        return event

    def _why_gone(self) -> str:
        return self.stderr[-1] if self.stderr else f"ssh exited with {self.proc.poll()}"

    def start(self) -> None:
        event = self._wait_for("spawned", SPAWN_TIMEOUT_S)
        if event is None:
            raise LaunchFailed("failed_start", f"{self.name}the server did not start within {SPAWN_TIMEOUT_S:g} s")
        if event["event"] == "failed":
            raise LaunchFailed(event.get("outcome", "failed_start"), f"{self.name}{event.get('message')}")
        if event["event"] == "gone":
            raise LaunchFailed("spawn_failed", f"{self.name}the node agent did not start: {self._why_gone()}")
        self.facts.update({key: value for key, value in event.items() if key not in ("event", "node")})

    def ended(self) -> str | None:
        if "exited" in self.last:
            return self.last["exited"].get("how")
        return None if self.proc.poll() is None else f"is out of reach: its agent ended ({self._why_gone()})"

    def last_line(self) -> str:
        return ""

    def watch(self) -> None:   # the agent watches its server itself
        pass

    def stop(self) -> None:
        """Stop the server (the agent checks its node) and close the session."""
        self._send("stop")
        event = self.last.get("stopped") or self._wait_for("stopped", self.plan.stop_grace_s + STOP_EXTRA_S)
        with suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if event is not None and event.get("event") == "stopped":   # the agent's timestamps: its server's spawn and stop
            self.facts.update(exit_code=event.get("exit_code"), stop=event.get("stop"), timestamps=event.get("timestamps"))
        elif self.facts["server_pid"] is not None:
            self.facts["stop"] = {"error": f"the node agent did not report its stop ({self._why_gone()})"}
            self.say(f"{self.spec.run_name}: WARNING {self.name}the node agent did not report its stop: check it by hand")

    def pull_log(self, run_dir: Path) -> None:
        target = run_dir / f"node{self.rank}"
        target.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([*self.ssh, f"cat {shlex.quote(self.plan.nodes.remote_dir + '/' + self.log)}"], capture_output=True)
        if done.returncode == 0:
            (target / "server.log").write_bytes(done.stdout)
        else:
            self.say(f"{self.spec.run_name}: WARNING node {self.rank}'s log stays on {self.host}: {_tail(done.stderr)}")


def write_node_records(launch: dict, nodes: list[RemoteNode], run_dir: Path, outcome: str, detail: str) -> None:
    """Each node's log and its run.json (the launch's identity and outcome, the node's facts) under run_dir/node<I>."""
    for node in nodes:
        node.pull_log(run_dir)
        record = node_record(launch, **node.facts)
        finish_record(record, outcome, detail)
        write_run_json(run_dir / f"node{node.rank}", record)


def agent() -> int:
    """One node's part, over ssh: reads one JSON line on stdin (the uploaded plan, cell, launch, rank, log), drives a
    run.Node with this node's own environment and answers one JSON line per event: `spawned` (the node's facts),
    `exited` (how the server ended by itself), `stopped` (after `stop`, or the end
    of stdin: the launcher or its ssh session went away), `failed` (nothing started: outcome and message)."""
    commands: queue.SimpleQueue = queue.SimpleQueue()   # its put() is safe in a signal handler

    def send(**event) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):   # the ssh session was cut, or someone stops us
        signal.signal(signum, lambda signum, frame: commands.put("eof"))
    if not (line := sys.stdin.readline()):
        return 1
    request = json.loads(line)
    plan = load_plan(request["plan"])
    spec = next(s for s in plan.launch_order() if s.cell.name == request["cell"] and s.launch == request["launch"])
    argv = node_argv(plan, spec, request["rank"])
    _, probe_host, port = probe_address(plan, argv)
    node = Node(plan, spec, runinfo.Machine(), argv, Path(request["log"]), (probe_host, port) if request["rank"] == 0 else None)
    try:
        node.start()
    except LaunchFailed as failure:
        send(event="failed", outcome=failure.outcome, message=f"{failure} on {node.facts['hostname']}")
        return 1
    send(event="spawned", **node.facts)

    def read_commands() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("eof")

    threading.Thread(target=read_commands, daemon=True).start()
    exited = False
    while True:
        try:
            line = commands.get(timeout=POLL_S)
        except queue.Empty:
            line = ""
        if line in ("stop", "eof"):
            node.stop()
            send(event="stopped", reason=line, **{key: node.facts[key] for key in ("exit_code", "stop", "timestamps")})
            return 0
        node.watch()
        if (how := node.ended()) is not None and not exited:
            send(event="exited", how=how)
            exited = True


if __name__ == "__main__":
    sys.exit(agent())
