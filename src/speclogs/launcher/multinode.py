"""Multi-node launches: a plan with `nodes = ["user@host1", "user@host2", …]` runs SGLang on every node at once.

Per launch: a node agent on each node (`python -m speclogs.launcher.node`, over ssh) starts its server with SGLang's
multi-node flags; this side measures each node's clock against node 0's, waits for node 0's /health, benchmarks node 0,
stops every node at once, brings the logs back and writes run.json for the launch and for each node (docs/launcher.md,
"Several nodes"). Every run.json of a launch carries its run_uid, so the ingest makes one run of it.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path

from speclogs.doctor import arg_value
from speclogs.errors import LaunchError
from speclogs.launcher import remote, run as _run, runinfo
from speclogs.launcher.plan import PYTHON_PLACEHOLDER, LaunchSpec, NodesSpec, Plan
from speclogs.launcher.remote import _bundle, pull, python_command, ssh_command
from speclogs.launcher.run import Interrupted, LaunchResult, Progress, _LaunchFailed, server_argv
from speclogs.runrecord import RunRecord, finish_record, node_record, write_run_json

SPAWN_TIMEOUT_S = 300.0   # ssh + the node's version probe + spawn
PINGS = 5                 # clock samples per node
STOP_EXTRA_S = 60.0       # beyond stop_grace_s: SIGKILL, reaping, the leftover check


def node_argv(plan: Plan, spec: LaunchSpec, rank: int) -> list[str]:
    """The server argv on node `rank`: the plan's, with {python} the nodes' Python and SGLang's multi-node flags."""
    nodes = plan.nodes
    argv = server_argv(plan, spec)
    if plan.command and plan.command[0] == PYTHON_PLACEHOLDER:
        argv[0] = nodes.remote_python
    return argv + ["--nnodes", str(len(nodes.hosts)), "--node-rank", str(rank),
                   "--dist-init-addr", f"{nodes.http_host}:{nodes.dist_init_port}"]


def upload(plan: Plan, say: Progress) -> None:
    """speclogs (and the plan) unpacked into remote_dir on every distinct node, once per plan run."""
    nodes = plan.nodes
    bundle = _bundle(plan.path, f"plans/{plan.name}.toml")
    for host in dict.fromkeys(nodes.hosts):
        say(f"{host}: uploading speclogs to {nodes.remote_dir}")
        remote.upload(ssh_command(nodes.ssh_options, host), nodes.remote_dir, bundle, host)


class _Agent:
    """One node's agent over ssh; its events arrive in a queue."""

    def __init__(self, nodes: NodesSpec, rank: int, host: str) -> None:
        self.rank, self.host = rank, host
        command = python_command(nodes.remote_dir, nodes.remote_python, "speclogs.launcher.node")
        self.proc = subprocess.Popen([*ssh_command(nodes.ssh_options, host), command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.events: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        self.last: dict[str, dict] = {}
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            self.last[event.get("event", "")] = event
            self.events.put(event)
        self.events.put({"event": "gone"})

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip())

    def send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def wait_for(self, names: tuple[str, ...], timeout_s: float) -> dict | None:
        """The next event among `names` (or 'gone', 'failed'); None on timeout. Other events are kept in `last`."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                event = self.events.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if event.get("event") in (*names, "gone", "failed"):
                return event

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def why_gone(self) -> str:
        return self.stderr[-1] if self.stderr else f"ssh exited with {self.proc.poll()}"


def _clock_offset(agent: _Agent) -> tuple[float, float] | None:
    """(this node's clock − ours, half the round trip) from the ping with the shortest round trip."""
    best = None
    for _ in range(PINGS):
        sent = time.time()
        agent.send("ping")
        pong = agent.wait_for(("pong",), 10.0)
        back = time.time()
        if pong is None or pong.get("event") != "pong":
            return None
        sample = (pong["time"] - (sent + back) / 2, (back - sent) / 2)
        if best is None or sample[1] < best[1]:
            best = sample
    return best


def launch_one(plan: Plan, spec: LaunchSpec, run_dir: Path, previous: RunRecord | None, say: Progress) -> LaunchResult:
    """One launch on every node of `plan.nodes`: spawn, clocks, node 0's /health, benchmark, stop, logs back."""
    nodes = plan.nodes
    run_dir.mkdir(parents=True, exist_ok=True)
    argv = server_argv(plan, spec)
    port = int(arg_value(argv, "--port") or plan.port)
    base_url = f"http://{nodes.http_host}:{port}"
    dist_init = f"{nodes.http_host}:{nodes.dist_init_port}"
    record = _run.new_record(
        plan, spec, previous, argv, {**plan.env, **spec.cell.env}, ("spawn", "health_200", "bench_start", "bench_end", "stop"),
        host=nodes.http_host, port=port, dist_init_addr=dist_init,
        files={"bench": "bench.jsonl", "nodes": [f"node{rank}" for rank in range(len(nodes.hosts))]},
        nodes=[{"rank": rank, "ssh": host} for rank, host in enumerate(nodes.hosts)],
    )
    stamps = record["timestamps"]
    node_records = [_node_record(record, plan, spec, rank, host) for rank, host in enumerate(nodes.hosts)]
    write_run_json(run_dir, record)
    agents: list[_Agent] = []
    spawn_clock = time.monotonic()

    def finish(outcome: str, detail: str) -> LaunchResult:
        _stop_all(agents, plan, node_records, stamps, say, spec.run_name)
        _bring_logs_back(plan, spec, agents, run_dir, say)
        finish_record(record, outcome, detail)
        _summarise_nodes(record, node_records)
        for rank, node in enumerate(node_records):
            finish_record(node, outcome, detail)
            (run_dir / f"node{rank}").mkdir(exist_ok=True)
            write_run_json(run_dir / f"node{rank}", node)
        write_run_json(run_dir, record)
        return _run._result_from(RunRecord(record), spec, run_dir)

    def poll() -> None:
        for agent in agents:
            if "exited" in agent.last or agent.proc.poll() is not None:
                code = agent.last.get("exited", {}).get("code")
                raise _LaunchFailed("failed_start", f"node {agent.rank} ({agent.host}): the server exited with code {code} "
                                                    "before node 0's /health answered 200")

    try:
        try:
            stamps["spawn"] = runinfo.now_iso()
            for rank, host in enumerate(nodes.hosts):
                try:
                    agent = _Agent(nodes, rank, host)
                except OSError as error:
                    raise _LaunchFailed("spawn_failed", f"cannot run ssh for node {rank} ({host}): {error.strerror}") from error
                agents.append(agent)
                agent.send(json.dumps(_agent_spec(plan, spec, rank)))
            for agent, node in zip(agents, node_records):
                _take_spawned(agent, node, say, spec.run_name)
            _measure_clocks(agents, node_records)
            _run._wait_ready(plan, f"{base_url}/health", stamps, spawn_clock, None, spec.run_name, say, poll, lambda: "")
            record["ready_s"] = round(time.monotonic() - spawn_clock, 3)
            say(f"{spec.run_name}: node 0 ready in {record['ready_s']:.1f} s")
            _run._run_benchmarks(plan, spec, run_dir, base_url, record, None, say, lambda: None, None)
            return finish("ok", "")
        except _LaunchFailed as failure:
            return finish(failure.outcome, str(failure))
    except (Interrupted, KeyboardInterrupt) as exc:
        reason = exc.reason if isinstance(exc, Interrupted) else "Ctrl-C"
        with _run._signals_deferred():
            finish("interrupted", f"{reason} during this launch; --resume runs it again")
        raise Interrupted(reason) from None


def _agent_spec(plan: Plan, spec: LaunchSpec, rank: int) -> dict:
    argv = node_argv(plan, spec, rank)
    return {
        "argv": argv, "inherit_env": list(plan.inherit_env), "drop_inherited_env": list(plan.drop_inherited_env),
        "env_layers": [plan.env, spec.cell.env], "stop_grace_s": plan.stop_grace_s,
        "log": f"runs/{plan.name}/{spec.cell.name}/{spec.launch}/node{rank}/server.log",
        "http_port": int(arg_value(argv, "--port") or plan.port) if rank == 0 else None,
        "http_host": arg_value(argv, "--host") or "127.0.0.1",
    }


def _node_record(launch: dict, plan: Plan, spec: LaunchSpec, rank: int, host: str) -> dict:
    return node_record(
        launch, node={"rank": rank, "nnodes": len(plan.nodes.hosts), "ssh": host, "dist_init_addr": launch["dist_init_addr"],
                      "clock_offset_to_node0_s": None, "clock_offset_error_s": None},
        argv=node_argv(plan, spec, rank), env=None, env_nccl={}, env_cuda={}, env_dropped=[],
        versions={}, gpus=[], hostname=None, timestamps={"spawn": None, "stop": None}, utc_offset=None, server_pid=None,
        server_identity=None, exit_code=None, stop=None, files={"server_log": "server.log"},
    )


def _take_spawned(agent: _Agent, node: dict, say: Progress, run_name: str) -> None:
    event = agent.wait_for(("spawned",), SPAWN_TIMEOUT_S)
    if event is None:
        raise _LaunchFailed("failed_start", f"node {agent.rank} ({agent.host}) did not start its server within {SPAWN_TIMEOUT_S:g} s")
    if event["event"] == "failed":
        raise _LaunchFailed(event.get("outcome", "failed_start"), f"node {agent.rank} ({agent.host}): {event.get('message')}")
    if event["event"] == "gone":
        raise _LaunchFailed("spawn_failed", f"node {agent.rank} ({agent.host}): the node agent did not start: {agent.why_gone()}")
    node.update(hostname=event.get("hostname"), gpus=event.get("gpus") or [], **_run.env_fields(event.get("env") or {}),
                env_dropped=event.get("env_dropped"), versions=event.get("versions") or {}, server_pid=event.get("pid"),
                server_identity=event.get("identity"), utc_offset=event.get("utc_offset"))
    node["timestamps"]["spawn"] = event.get("spawn")
    say(f"{run_name}: node {agent.rank} ({event.get('hostname')}) pid {event.get('pid')}")


def _measure_clocks(agents: list[_Agent], nodes: list[dict]) -> None:
    offsets = [_clock_offset(agent) for agent in agents]
    if offsets[0] is None:
        return
    for offset, node in zip(offsets, nodes):
        if offset is not None:
            node["node"]["clock_offset_to_node0_s"] = round(offset[0] - offsets[0][0], 6)
            node["node"]["clock_offset_error_s"] = round(offset[1] + offsets[0][1], 6)


def _stop_all(agents: list[_Agent], plan: Plan, nodes: list[dict], stamps: dict, say: Progress, run_name: str) -> None:
    """Stop every node at once; each agent checks its node. What is left anywhere is said and recorded."""
    if not agents:
        return
    say(f"{run_name}: stopping {len(agents)} nodes (SIGTERM, grace {plan.stop_grace_s:g} s)")
    for agent in agents:
        agent.send("stop")
    for agent, node in zip(agents, nodes):
        event = agent.last.get("stopped") or agent.wait_for(("stopped",), plan.stop_grace_s + STOP_EXTRA_S)
        agent.close()
        if event is None or event.get("event") != "stopped":
            if node["server_pid"] is not None:
                node["stop"] = {"error": f"the node agent did not report its stop ({agent.why_gone()})"}
                say(f"{run_name}: WARNING node {agent.rank} ({agent.host}) did not report its stop: check it by hand")
            continue
        node["exit_code"] = event.get("exit_code")
        node["timestamps"]["stop"] = event.get("stop")
        node["stop"] = {key: event.get(key) for key in ("signal", "stop_s", "leftover_pids", "gpu_pids", "gpu_apps_after")}
        if event.get("leftover_pids") or event.get("gpu_pids"):
            say(f"{run_name}: WARNING node {agent.rank} ({agent.host}): processes left after stop: "
                f"{event.get('leftover_pids') or event.get('gpu_pids')} (killed)")
    stamps["stop"] = runinfo.now_iso()


def _bring_logs_back(plan: Plan, spec: LaunchSpec, agents: list[_Agent], run_dir: Path, say: Progress) -> None:
    nodes = plan.nodes
    for agent in agents:
        target = run_dir / f"node{agent.rank}"
        target.mkdir(parents=True, exist_ok=True)
        folder = f"runs/{plan.name}/{spec.cell.name}/{spec.launch}/node{agent.rank}"
        try:
            pull(ssh_command(nodes.ssh_options, agent.host), nodes.remote_dir, folder, target, agent.host)
        except LaunchError as error:
            say(f"{spec.run_name}: WARNING node {agent.rank}'s log stays on {agent.host}: {error}")


def _summarise_nodes(record: dict, nodes: list[dict]) -> None:
    """The launch record's view of its nodes; node 0's host facts are the launch's (runs.hostname, gpu_name …)."""
    record["nodes"] = [{"rank": node["node"]["rank"], "ssh": node["node"]["ssh"], "hostname": node["hostname"],
                        "clock_offset_to_node0_s": node["node"]["clock_offset_to_node0_s"],
                        "exit_code": node["exit_code"], "stop": node["stop"]} for node in nodes]
    head = nodes[0]
    for key in ("hostname", "gpus", "argv", "env", "env_nccl", "env_cuda", "env_dropped", "versions", "server_pid",
                "server_identity", "exit_code", "stop"):
        record[key] = head[key]
    record["leftover_pids"] = sorted({pid for node in nodes for pid in ((node["stop"] or {}).get("leftover_pids") or [])})
