"""Carry out a plan: each launch starts the server, waits for /health 200, benchmarks, stops, records run.json.

One launch path: its servers are a `Node` on this machine, or a multinode.RemoteNode on each node of a plan with `nodes`.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator

import speclogs
from speclogs.doctor import FLAGS as DOCTOR_FLAGS, DoctorFinding, arg_value, check_settings, server_settings
from speclogs.errors import LaunchError, PlanError
from speclogs.launcher import adaptive as _adaptive, bench as _bench, process as _proc, runinfo
from speclogs.launcher.bench import METRICS_FLAG, Windows
from speclogs.launcher.plan import DEVICE_TIMER_ENV, MODEL_PATH_FLAGS, PYTHON_PLACEHOLDER, AdaptiveSpec, LaunchSpec, Plan
from speclogs.redact import redact_json
from speclogs.runrecord import FILE_NAME as RUN_JSON, RunRecord, finish_record, launch_record, read_run_json, write_run_json

Progress = Callable[[str], None]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP reached the launcher (its reason: args[0]); a KeyboardInterrupt to generic handlers."""


class _DeadlineReached(Interrupted):
    """--max-minutes ran out: the launch under way is interrupted like one Ctrl-C stops, and the plan stops there."""


class LaunchFailed(LaunchError):
    """A launch ended with `outcome` (docs/launcher.md, Outcomes); the plan goes on."""

    def __init__(self, outcome: str, message: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.outcome = outcome


@dataclass(frozen=True)
class LaunchOptions:
    out_dir: Path
    resume: bool = False
    retry_failed: bool = False
    only: tuple[str, ...] = ()
    max_launches: int | None = None   # this call; with an adaptive design: the run's whole budget
    max_minutes: float | None = None
    until: float | None = None        # adaptive: stop when every comparison's interval spans at most this
    force: bool = False               # launch although the doctor found an error in the setup


@dataclass(frozen=True)
class LaunchResult:
    run_name: str
    cell: str
    launch: int
    order_index: int
    outcome: str
    outcome_detail: str
    ready_s: float | None
    median_tok_s: float | None
    run_dir: str
    skipped: bool = False   # --resume found it complete


@dataclass(frozen=True)
class PlanRunSummary:
    plan_name: str
    out_dir: str
    results: tuple[LaunchResult, ...]
    stopped: str             # complete | max_launches | max_minutes | interrupted | decided (adaptive)
    pending: tuple[str, ...] = ()   # run names not yet complete
    adaptive: dict | None = None    # adaptive runs: adaptive.finish()

    @property
    def failed(self) -> tuple[LaunchResult, ...]:
        return tuple(r for r in self.results if not r.skipped and r.outcome != "ok")

    def to_dict(self) -> dict:
        return redact_json(asdict(self))


def launch_plan(plan: Plan, options: LaunchOptions, progress: Progress | None = None) -> PlanRunSummary:
    """Run the plan's launches into options.out_dir. PlanError / LaunchError before anything starts; Interrupted stops
    the running server, marks its run.json `interrupted` and propagates."""
    findings = doctor_plan(plan, _select(plan, options.only))
    errors = [f"{f.source}: {f.message}" for found in findings.values() for f in found if f.severity == "error"]
    if errors and not options.force:
        raise PlanError(f"the doctor found {len(errors)} error(s) in the setup; nothing was started:\n  " + "\n  ".join(errors),
                        hint="fix them (speclogs doctor PLAN shows each fix), or pass --force to launch anyway")
    if plan.nodes is not None and (options.until is not None or options.max_minutes is not None):
        raise PlanError(f"{plan.path}: --until and --max-minutes are not supported with nodes yet",
                        hint="slice a multi-node plan with --max-launches and --resume")
    say = progress or (lambda message: None)
    deadline = time.monotonic() + options.max_minutes * 60 if options.max_minutes else None
    out_dir = options.out_dir.resolve()
    design = adaptive_design(plan, options)
    if design is not None:   # every round up to the budget's last one; the looks decide how many of them run
        plan = replace(plan, cells=tuple(replace(cell, launches=design.last_look) for cell in plan.cells))
    order = _select(plan, options.only)
    if plan.nodes is None:   # the nodes' model paths are theirs to check
        _check_model_paths(plan, order)
    if not options.resume and (existing := [s.run_name for s in order if (_run_dir(out_dir, s) / RUN_JSON).exists()]):
        raise LaunchError(f"{out_dir} already holds launches ({', '.join(existing[:4])}{' …' if len(existing) > 4 else ''})",
                          hint="add --resume to skip complete ones and redo the rest, or choose a new --out")
    if design is not None:
        _adaptive.check_state(out_dir, design)
    out_dir.mkdir(parents=True, exist_ok=True)
    if plan.nodes is not None:
        from speclogs.launcher import multinode

        multinode.upload(plan, say)
    machine = runinfo.Machine(design.to_dict() if design is not None else None)
    results: list[LaunchResult] = []
    stopped = "complete"
    looks: list[_adaptive.Look] = []

    def take_look(round_: int) -> bool:
        """The adaptive look after `round_` rounds (all of them processed); True when it stops the plan."""
        nonlocal stopped
        if design is None or round_ < design.first_look or any(lk.round == round_ for lk in looks):
            return False
        looks.append(_adaptive.look(design, round_, _adaptive.values_through(out_dir, design.cells, round_)))
        for comparison in looks[-1].comparisons:
            say(f"look after round {round_}: {comparison}")
        if looks[-1].decided:
            stopped = "decided"
        return looks[-1].decided

    with _signals_raise_interrupted():
        for spec in order:
            if take_look(spec.launch - 1):
                break
            run_dir = _run_dir(out_dir, spec)
            previous = read_run_json(run_dir)
            if previous and previous.is_complete(options.retry_failed):
                results.append(_result_from(previous, spec, run_dir, skipped=True))
                continue
            launched = sum(not r.skipped for r in results)
            if design is None and options.max_launches is not None and launched >= options.max_launches:
                stopped = "max_launches"
                break
            if deadline is not None:
                remaining = deadline - time.monotonic()
                measured = _estimate_launch_s(out_dir)   # spawn → stop; +10 % for the version probe and GPU wait
                estimate = measured * 1.1 if measured else plan.launch_estimate_s
                if remaining <= 0 or remaining < estimate:
                    say(f"max-minutes: {remaining:.0f} s left, a launch takes ~{estimate:.0f} s: stopping here")
                    stopped = "max_minutes"
                    break
            say(f"[{spec.order_index + 1}/{len(plan.launch_order())}] {spec.run_name}: starting")
            try:
                result = _launch_one(plan, spec, run_dir, previous, machine, deadline, say, findings[spec.cell.name])
            except _DeadlineReached:
                results.append(_result_from(read_run_json(run_dir), spec, run_dir))
                stopped = "max_minutes"
                break
            except Interrupted:
                results.append(_result_from(read_run_json(run_dir), spec, run_dir))
                raise
            results.append(result)
            _raise_if_pending()
            say(f"{spec.run_name}: {result.outcome}" + (f" ({result.outcome_detail})" if result.outcome_detail else ""))
        else:
            if design is not None and not take_look(design.last_look):
                stopped = "max_launches"
    pending = () if stopped == "decided" else tuple(
        spec.run_name for spec in order if not (read_run_json(_run_dir(out_dir, spec)) or RunRecord()).is_complete(options.retry_failed))
    summary = None
    if design is not None:
        summary = _adaptive.finish(out_dir, design, looks, {"decided": "decided", "max_launches": "budget"}.get(stopped, "not yet"))
        say(f"adaptive: {summary['reason']}")
    return PlanRunSummary(plan_name=plan.name, out_dir=str(out_dir), results=tuple(results), stopped=stopped,
                          pending=pending, adaptive=summary)


def adaptive_design(plan: Plan, options: LaunchOptions) -> _adaptive.Design | None:
    """The adaptive design of this run (plan [adaptive] and --until / --max-launches), or None for a plain plan."""
    if plan.adaptive is None and options.until is None:
        return None
    spec = plan.adaptive or AdaptiveSpec()
    until = options.until if options.until is not None else spec.until
    budget = options.max_launches if options.max_launches is not None else spec.max_launches
    where = str(plan.path)
    if until is None:
        raise PlanError(f"{where}: [adaptive] needs until = \"ci_width<=P%\" (or --until)", hint="e.g. --until 'ci_width<=5%'")
    if budget is None:
        raise PlanError(f"{where}: adaptive launching needs a budget: --max-launches N or [adaptive] max_launches",
                        hint="e.g. --max-launches 12 (all cells together)")
    if options.only:
        raise PlanError(f"{where}: --only cannot be combined with adaptive launching (its looks compare every cell)",
                        hint="drop --only, or write a plan with the cells to compare")
    design = _adaptive.Design(cells=tuple(cell.name for cell in plan.cells), reference=spec.reference or plan.cells[0].name,
                              until=until, max_launches=budget, first_look=max(cell.launches for cell in plan.cells),
                              confidence=spec.confidence, min_effect=spec.min_effect)
    design.check(where)
    return design


def server_argv(plan: Plan, spec: LaunchSpec, run_dir: Path | None = None) -> list[str]:
    """The exact argv of the server process for this launch (profile wrapper included); `run_dir` is where
    `[metrics] request_export` has SGLang write its per-request file."""
    argv = [sys.executable if part == PYTHON_PLACEHOLDER else part for part in plan.command]
    if model_path := spec.cell.model_path or plan.model_path:
        argv += ["--model-path", model_path]
    argv += [*plan.args, *spec.cell.args]
    if "--port" not in argv:
        argv += ["--port", str(plan.port)]
    if plan.metrics.enable and METRICS_FLAG not in argv:
        argv.append(METRICS_FLAG)
    if plan.metrics.request_export and "--export-metrics-to-file" not in argv:
        argv += ["--export-metrics-to-file", "--export-metrics-to-file-dir", str(run_dir or ".")]
    if spec.cell.profile:
        argv = [runinfo.python_of(argv), "-m", "speclogs.profile", "--every", str(spec.cell.profile_every), "--", *argv]
    return argv


def server_env(plan: Plan, spec: LaunchSpec) -> tuple[dict[str, str], list[str]]:
    """Our env (the names inherit_env allows, minus drop_inherited_env) + plan env + cell env; speclogs on
    PYTHONPATH when profiled. Returns (env, names of our env not passed on)."""
    timer = {DEVICE_TIMER_ENV: "1"} if plan.metrics.device_timer else {}   # under the plan's and cell's own env
    env, dropped = runinfo.build_env(dict(os.environ), plan.inherit_env, plan.drop_inherited_env, timer, plan.env,
                                     spec.cell.env)
    if spec.cell.profile:   # the profiled server imports speclogs from here
        root = str(Path(speclogs.__file__).resolve().parent.parent)
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(paths if root in paths else [root, *paths])
    return env, dropped


def probe_address(plan: Plan, argv: list[str]) -> tuple[str, str, int]:
    """(host as the plan gives it, where to reach it, port) of the server's HTTP side."""
    host = arg_value(argv, "--host") or plan.host
    probe = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    return host, probe, int(arg_value(argv, "--port") or plan.port)


def doctor_plan(plan: Plan, order: list[LaunchSpec] | None = None, trained_layers: list[int] | None = None
                ) -> dict[str, list[DoctorFinding]]:
    """The doctor's findings for each cell of the plan (speclogs.doctor), their sources `plan.toml:LINE`."""
    out: dict[str, list[DoctorFinding]] = {}
    for spec in order if order is not None else plan.launch_order():
        if spec.cell.name in out:
            continue

        def source_of(name: str, cell=spec.cell) -> str:
            needles = [f'"{flag}' for flag, field in DOCTOR_FLAGS.items() if field == name] + [f"{name} ="]
            return f"{plan.path}:{_plan_line(plan, cell, needles)} (cell {cell.name})"

        out[spec.cell.name] = check_settings(server_settings(server_argv(plan, spec)), source_of, trained_layers)
    return out


def _plan_line(plan: Plan, cell, needles: list[str]) -> int:
    """The line that sets a flag for `cell`: inside the cell's table, else the plan's own, else the cell's header."""
    lines = plan.text.splitlines()

    def table_end(start: int) -> int:
        return next((n for n in range(start + 1, len(lines) + 1) if lines[n - 1].lstrip().startswith("[")), len(lines) + 1)

    for number in [*range(cell.line_no, table_end(cell.line_no)), *range(1, table_end(0))]:
        if any(needle in lines[number - 1] for needle in needles):
            return number
    return cell.line_no


def _select(plan: Plan, only: tuple[str, ...]) -> list[LaunchSpec]:
    names = {cell.name for cell in plan.cells}
    wanted = {name for item in only for name in item.split(",") if name}
    if unknown := sorted(wanted - names):
        raise PlanError(f"{plan.path}: --only names unknown cell(s): {', '.join(unknown)}",
                        hint=f"cells in this plan: {', '.join(sorted(names))}")
    return [spec for spec in plan.launch_order() if not wanted or spec.cell.name in wanted]


def _check_model_paths(plan: Plan, order: list[LaunchSpec]) -> None:
    for spec in order:
        argv = server_argv(plan, spec)
        for flag in MODEL_PATH_FLAGS:
            value = arg_value(argv, flag)
            looks_local = value is not None and (value.startswith(("/", "./", "../", "~")) or os.path.exists(value))
            if looks_local and not Path(value).expanduser().exists():
                raise PlanError(f"{plan.path}:{_plan_line(plan, spec.cell, [value])}: {flag} {value} does not exist "
                                f"(cell {spec.cell.name})", hint="create the model first (e.g. python scripts/synth_pair.py) "
                                "or fix the path")


def _run_dir(out_dir: Path, spec: LaunchSpec) -> Path:
    return out_dir / spec.cell.name / str(spec.launch)


def _estimate_launch_s(out_dir: Path, recent: int = 3) -> float | None:
    """Longest spawn → stop among the `recent` latest ok launches (the first start on a fresh machine, Triton JIT
    included, is much slower and should not hold back later calls); None before any."""
    spans: list[tuple[str, float]] = []
    for path in out_dir.glob(f"*/*/{RUN_JSON}"):
        record = read_run_json(path.parent)
        stamps = record.timestamps if record is not None and record.outcome == "ok" else {}
        with suppress(KeyError, TypeError, ValueError):
            spawn, stop = datetime.fromisoformat(stamps["spawn"]), datetime.fromisoformat(stamps["stop"])
            spans.append((stamps["spawn"], (stop - spawn).total_seconds()))
    latest = sorted(spans)[-recent:]
    return max(span for _, span in latest) if latest else None


def _result_from(record: RunRecord | None, spec: LaunchSpec, run_dir: Path, skipped: bool = False) -> LaunchResult:
    record = record or RunRecord()
    return LaunchResult(run_name=spec.run_name, cell=spec.cell.name, launch=spec.launch, order_index=spec.order_index,
                        outcome=record.outcome or "unknown", outcome_detail=record.outcome_detail,
                        ready_s=record.ready_s, median_tok_s=record.median_tok_s, run_dir=str(run_dir), skipped=skipped)


class Node:
    """One server on this machine, from the checks before its start to the check after its stop (also what the node
    agent, multinode.agent, drives on each node of a plan with `nodes`)."""

    name = ""   # what goes before its news in progress and outcome details ("node 1 (host): " for a RemoteNode)

    def __init__(self, plan: Plan, spec: LaunchSpec, machine: runinfo.Machine, argv: list[str], log_path: Path,
                 port_probe: tuple[str, int] | None):
        self.plan, self.machine, self.log_path, self.port_probe = plan, machine, log_path, port_probe
        self.env, dropped = server_env(plan, spec)
        self.proc, self.known = None, {}   # known: the processes seen as the server's (pid → psutil.Process)
        recorded = runinfo.recorded_env(self.env, plan.inherit_env, plan.env, spec.cell.env)
        self.facts = {"hostname": machine.hostname, "gpus": machine.gpus, "argv": argv, "env": recorded,
                      **{f"env_{family.lower()}": {k: v for k, v in recorded.items() if k.startswith(f"{family}_")}
                         for family in ("NCCL", "CUDA")},
                      "env_dropped": dropped, "versions": {}, "models": {}, "server_pid": None, "server_identity": None,
                      "exit_code": None, "stop": None, "timestamps": {"spawn": None, "stop": None},
                      "utc_offset": runinfo.utc_offset()}

    def start(self) -> None:
        """Wait for the port and the GPUs to be free, record versions and models, spawn the server."""
        wait_s, argv = self.plan.port_wait_s, self.facts["argv"]
        if self.port_probe and not _proc.wait_until(lambda: _proc.port_is_free(*self.port_probe), wait_s, 0.2):
            raise LaunchFailed("port_in_use", f"port {self.port_probe[1]} on {self.port_probe[0]} is already in use",
                               hint="stop whatever listens there or set port = … in the plan")
        # an earlier launch's GPU compute apps get a moment to go; those still listed are recorded
        _proc.wait_until(lambda: not _proc.gpu_compute_pids(), wait_s * 3, 1.0)
        self.facts.update(gpu_apps_before_spawn=_proc.gpu_compute_pids(), models=self.machine.models(argv),
                          versions=self.machine.versions(runinfo.python_of(argv), self.env))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_bytes(b"")
        try:
            self.proc = _proc.spawn_server(argv, self.env, self.log_path)
        except OSError as exc:
            raise LaunchFailed("spawn_failed", f"cannot start {argv[0]}: {exc.strerror}", hint="check the plan's command") from exc
        self.facts["timestamps"]["spawn"] = runinfo.now_iso()
        self.facts.update(server_pid=self.proc.pid, server_identity=_proc.identity(self.proc.pid))   # pid = its group id

    def ended(self) -> str | None:
        code = None if self.proc is None else _proc.exit_code(self.proc)
        return None if code is None else f"exited with code {code}"

    def last_line(self) -> str:
        return _proc.last_milestone(self.log_path)

    def watch(self) -> None:
        if self.proc is not None:
            _proc.watch(self.proc, self.known)

    def stop(self) -> None:
        if self.proc is not None:
            self.facts["stop"] = _proc.stop_server(self.proc, self.plan.stop_grace_s, self.known)
            self.facts.update(exit_code=self.proc.returncode)
            self.facts["timestamps"]["stop"] = runinfo.now_iso()
            self.proc = None


def _launch_one(plan: Plan, spec: LaunchSpec, run_dir: Path, previous: RunRecord | None, machine: runinfo.Machine,
                deadline: float | None, say: Progress, findings: list[DoctorFinding]) -> LaunchResult:
    run_dir.mkdir(parents=True, exist_ok=True)
    argv = server_argv(plan, spec, run_dir)
    host, probe_host, port = probe_address(plan, argv)
    fields: dict = {"files": {"server_log": "server.log", "bench": "bench.jsonl"}, "doctor": [f.to_dict() for f in findings],
                    "adaptive": machine.design}
    if plan.nodes is not None:
        from speclogs.launcher import multinode

        host = probe_host = plan.nodes.http_host
        fields.update(multinode.launch_fields(plan))
    record = new_record(plan, spec, previous, argv, server_env(plan, spec)[0], host=host, port=port, profile=spec.cell.profile,
                        **fields)
    nodes: list = [] if plan.nodes is not None else [Node(plan, spec, machine, argv, run_dir / "server.log", (probe_host, port))]
    record.update(_launch_facts(nodes))
    stamps = record["timestamps"]
    health_url = f"http://{probe_host}:{port}/health"

    def finish(outcome: str, detail: str) -> LaunchResult:
        with _signals_deferred():
            if any(node.facts["server_pid"] is not None for node in nodes):
                say(f"{spec.run_name}: stopping{f' {len(nodes)} nodes' if len(nodes) > 1 else ''} (SIGTERM, grace "
                    f"{plan.stop_grace_s:g} s)")
            with ThreadPoolExecutor(max(1, len(nodes))) as pool:   # every node at once
                list(pool.map(lambda node: node.stop(), nodes))
        if stamps["spawn"] is not None:
            stamps["stop"] = runinfo.now_iso()
        for node in nodes:
            if left := (node.facts["stop"] or {}).get("leftover_pids") or (node.facts["stop"] or {}).get("gpu_pids"):
                say(f"{spec.run_name}: WARNING {node.name}processes left after stop: {left} (killed)")
        record.update(_launch_facts(nodes))
        finish_record(record, outcome, detail)
        if record["metrics"]["request_export"]:   # the per-request files SGLang wrote, once it stopped
            record["files"]["request_export"] = sorted(p.name for p in run_dir.glob("sglang-request-metrics-*.log"))
        try:
            if plan.nodes is not None:
                multinode.write_node_records(record, nodes, run_dir, outcome, detail)
            write_run_json(run_dir, record)
        except OSError as exc:
            record["outcome_detail"] = f"{detail}; run.json not written: {exc.strerror}"
        return _result_from(RunRecord(record), spec, run_dir)

    def check_disk() -> None:
        if (free := shutil.disk_usage(run_dir).free / 2**20) < plan.min_free_mb:
            raise LaunchFailed("disk_full", f"only {free:.0f} MiB free under {run_dir} (min_free_mb = {plan.min_free_mb:g})",
                               hint="free disk space")

    try:
        try:
            if plan.nodes is None:
                _stop_orphan(previous, machine.hostname, plan.stop_grace_s, record, spec.run_name, say)
            check_disk()
            write_run_json(run_dir, record)
            for rank, ssh in enumerate(plan.nodes.nodes if plan.nodes is not None else ()):   # each spawns its server now
                nodes.append(multinode.RemoteNode(plan, spec, rank, ssh, say))
            for node in nodes:
                node.start()
                say(f"{spec.run_name}: {node.name}pid {node.facts['server_pid']}, log {node.log_path}")
            spawn_clock = time.monotonic()
            stamps["spawn"] = runinfo.now_iso()
            record.update(_launch_facts(nodes))
            write_run_json(run_dir, record)   # with the server's pid + start time: a killed launcher's is stopped on --resume
            next_report = spawn_clock + plan.progress_every_s
            while (status := _proc.probe_health(health_url, timeout_s=min(5.0, plan.health_poll_s * 5))) != 200:
                now = time.monotonic()
                for node in nodes:
                    if ended := node.ended():
                        tail = node.last_line()
                        raise LaunchFailed("failed_start", f"{node.name}the server {ended} after {now - spawn_clock:.1f} s "
                                           "before /health answered 200" + (f"; last line: {tail}" if tail else ""),
                                           hint=f"see {run_dir}")
                if stamps["port_open"] is None and _proc.port_is_open(probe_host, port):
                    stamps["port_open"] = runinfo.now_iso()
                if now - spawn_clock > plan.health_timeout_s:
                    raise LaunchFailed("health_timeout", f"{health_url} did not answer 200 within {plan.health_timeout_s:g} s "
                                       f"(last answer: {status or 'no connection'})",
                                       hint="raise health_timeout_s, or see server.log for where it stalled")
                if deadline is not None and now > deadline:
                    raise _DeadlineReached("max-minutes reached")
                if now >= next_report:
                    for node in nodes:
                        node.watch()
                    check_disk()
                    milestone = nodes[0].last_line()
                    say(f"{spec.run_name}: waiting {now - spawn_clock:.0f} s, /health {status or 'no connection'}"
                        + (f" · {milestone}" if milestone else ""))
                    next_report = now + plan.progress_every_s
                time.sleep(plan.health_poll_s)
            stamps["health_200"] = runinfo.now_iso()
            record["ready_s"] = round(time.monotonic() - spawn_clock, 3)
            say(f"{spec.run_name}: ready in {record['ready_s']:.1f} s")
            for node in nodes:
                node.watch()
            _run_benchmarks(plan, spec, run_dir, record, deadline, say, nodes, probe_host, port)
            for node in nodes:
                node.watch()
            return finish("ok", "")
        except LaunchFailed as exc:
            return finish(exc.outcome, str(exc))
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            return finish("disk_full", f"disk full while writing under {run_dir}: {exc.strerror}")
    except KeyboardInterrupt as exc:
        reason = exc.args[0] if isinstance(exc, Interrupted) else "Ctrl-C"
        finish("interrupted", f"{reason} during this launch; --resume runs it again")
        if isinstance(exc, Interrupted):
            raise
        raise Interrupted(reason) from None


def _launch_facts(nodes: list) -> dict:
    """The launch's run.json on its servers: node 0's facts, and for a plan with nodes a line per node and the leftovers."""
    if not nodes:
        return {}
    head = {key: value for key, value in nodes[0].facts.items() if key not in ("timestamps", "node", "utc_offset")}
    if "node" not in nodes[0].facts:   # a server on this machine
        return head
    return {**head, "nodes": [{"rank": rank, "ssh": node.host, "hostname": node.facts["hostname"],
                               "exit_code": node.facts["exit_code"], "stop": node.facts["stop"]} for rank, node in enumerate(nodes)],
            "leftover_pids": sorted({pid for node in nodes for pid in (node.facts["stop"] or {}).get("leftover_pids") or []})}


def _stop_orphan(previous: RunRecord | None, hostname: str, grace_s: float, record: dict, run_name: str,
                 say: Progress) -> None:
    """A run.json still saying `running` means its launcher was killed: stop the server group it left behind."""
    if not previous or previous.outcome != "running" or previous.hostname != hostname or previous.server_pid is None:
        return
    pgid = previous.server_pid
    identity = previous.server_identity if (previous.server_identity or {}).get("pid") == pgid else None
    with _signals_deferred():
        stopped, reason = _proc.stop_orphan_group(identity, grace_s)
    if stopped:
        say(f"{run_name}: stopped {len(stopped)} process(es) left by a killed launcher (group {pgid})")
        record["orphans_stopped"] = stopped
    elif reason:
        say(f"{run_name}: the previous attempt's server (pid {pgid}) was not signalled: {reason}")
        record["orphan_not_signalled"] = {"pid": pgid, "reason": reason}


def _run_benchmarks(plan: Plan, spec: LaunchSpec, run_dir: Path, record: dict, deadline: float | None, say: Progress,
                    nodes: list, probe_host: str, port: int) -> None:
    """The plan's benchmarks against a ready server, each inside its window (with /metrics scrapes when enabled)."""
    base_url = f"http://{probe_host}:{port}"
    if deadline is not None and time.monotonic() > deadline:
        raise _DeadlineReached("max-minutes reached")
    record["timestamps"]["bench_start"] = runinfo.now_iso()
    windows = Windows(base_url, run_dir, scrape=record["metrics"]["scrape"], every_s=plan.metrics.scrape_every_s,
                      timeout_s=plan.metrics.scrape_timeout_s, say=lambda m: say(f"{spec.run_name}: {m}"))

    def on_request(row: dict) -> None:
        tok_s = row["tok_per_s"]
        say(f"{spec.run_name}: request {row['i'] + 1}/{plan.bench.requests}"
            + (" (warm-up)" if row["warmup"] else "") + (f" {tok_s:.1f} tok/s" if tok_s else ""))
        if row["i"] + 1 == plan.bench.warmup_requests and plan.bench.requests > plan.bench.warmup_requests:
            windows.open("single_stream")   # the measured requests start now
        if deadline is not None and time.monotonic() > deadline:
            raise _DeadlineReached("max-minutes reached")

    try:
        if plan.bench.requests:
            if plan.bench.warmup_requests == 0:
                windows.open("single_stream")
            try:
                done, median = _bench.run_single_stream(base_url, plan.bench, spec.run_name, run_dir / "bench.jsonl", on_request)
            except _bench.BenchFailed as exc:
                ended = next((e for node in nodes if (e := node.ended())), None)
                raise LaunchFailed("bench_failed", str(exc) + (f" (server {ended})" if ended else ""), hint=exc.hint) from exc
            windows.close()
            record["bench_summary"] = {"requests_done": done, "median_tok_s": median}
        else:
            record["files"].pop("bench", None)
        if plan.bench_serving is not None and plan.nodes is None:
            windows.open("bench_serving")
            code, detail = _bench.run_bench_serving(runinfo.python_of(nodes[0].facts["argv"]), nodes[0].env, probe_host,
                                                    port, plan.bench_serving, run_dir)
            windows.close()
            record["files"].update(bench_serving="bench_serving.jsonl", bench_serving_log="bench_serving.log")
            if code != 0:
                raise LaunchFailed("bench_failed", detail, hint=f"see {run_dir / 'bench_serving.log'}")
    finally:
        record["timestamps"]["bench_end"] = runinfo.now_iso()
        windows.close()
        record["windows"] = windows.records
        record["files"]["metrics"] = windows.files()


def new_record(plan: Plan, spec: LaunchSpec, previous: RunRecord | None, argv: list[str], env: dict[str, str],
               **fields) -> dict:
    """A launch's run.json document: its identity, the plan's benchmark and [metrics], and `fields`."""
    b = plan.bench
    bench = {"requests": b.requests, "warmup_requests": b.warmup_requests, "max_new_tokens": b.max_new_tokens,
             "prompt_tokens": None if b.prompts else b.prompt_tokens, "prompt_kind": "text" if b.prompts else "input_ids",
             "vocab_size": b.vocab_size, "seed": b.seed, "temperature": b.temperature}
    if plan.bench_serving is not None:
        bench["bench_serving_args"] = list(plan.bench_serving.args)
    metrics = {"scrape": METRICS_FLAG in argv, "scrape_every_s": plan.metrics.scrape_every_s,
               "device_timer": env.get(DEVICE_TIMER_ENV) == "1", "request_export": "--export-metrics-to-file" in argv}
    return launch_record(run_name=spec.run_name, plan_name=plan.name, plan_file=str(plan.path), cell=spec.cell.name,
                         launch=spec.launch, factors=spec.cell.factors, order_index=spec.order_index, previous=previous,
                         stamps=("spawn", "port_open", "health_200", "bench_start", "bench_end", "stop"), bench=bench,
                         metrics=metrics, windows=[], utc_offset=runinfo.utc_offset(), **fields)


# --- signals: SIGINT, SIGTERM, SIGHUP raise Interrupted, held back while a server is being stopped ------------------
_held = SimpleNamespace(deferred=False, pending=[])


@contextmanager
def _signals_raise_interrupted() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():   # only the main thread can have signal handlers
        yield
        return
    _held.deferred, _held.pending = False, []

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        _held.pending.append(signum)
        if not _held.deferred:
            _raise_if_pending()

    saved = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
        _held.deferred, _held.pending = False, []


def _raise_if_pending() -> None:
    if _held.pending:
        signum = _held.pending.pop(0)
        raise Interrupted("Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Signals arriving while a server is being stopped wait until the stop is done (nothing orphaned)."""
    previous, _held.deferred = _held.deferred, True
    try:
        yield
    finally:
        _held.deferred = previous
