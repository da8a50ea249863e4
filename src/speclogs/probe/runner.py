"""Run the NCCL probe: one fresh process per GPU and per env set, results as a ProbeResult (stdlib only).

torch is never imported here: a preflight subprocess (`python -m speclogs.probe.worker --preflight`) asks the machine
what it has, and the ranks run `python -m speclogs.probe.worker SPEC.json`. Bad input and failures become an `outcome`
with a message in the result (and in its JSON), never a traceback.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from speclogs.errors import ProbeError
from speclogs.launcher.process import stop_server
from speclogs.launcher.runinfo import prepend_path
from speclogs.probe import maths
from speclogs.probe.envsets import EnvSet

FORMAT_NAME, FORMAT_VERSION = "speclogs.nccl_probe", 1
DTYPE, DTYPE_BYTES = "bfloat16", 2
DEFAULT_TOKENS: tuple[int, ...] = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
_SRC_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the speclogs package
_LOG_TAIL_LINES = 40
_QUIET_NCCL_KEYS = ("NCCL_NVLS_ENABLE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")


@dataclass(frozen=True)
class ProbeRequest:
    """What to measure. gpus=None: every visible GPU. Messages are hidden_size × tokens × 2 B; `sweep` adds 8 B … 64 MiB.
    graph_calls > 0 also times each size replayed from a CUDA graph of that many calls."""

    env_sets: tuple[EnvSet, ...]
    gpus: int | None = None
    hidden_size: int = 2048
    tokens: tuple[int, ...] = DEFAULT_TOKENS
    sweep: bool = False
    iters: int = 50
    warmup_iters: int = 10
    graph_calls: int = 16
    init_timeout_s: float = 60.0
    env_set_timeout_s: float = 300.0
    worker_module: str = "speclogs.probe.worker"  # tests run a stand-in


@dataclass(frozen=True)
class Measurement:
    """One collective at one size under one env set: latencies in µs over `iters` calls (per call: the slowest rank);
    `bytes` is all_gather's total gathered size; bandwidths in GB/s from the median; `span_mean_us` nccl-tests' span of
    all timed calls / iters; `graph_latency_us` the median per call replayed from a CUDA graph, or `graph_error`."""

    collective: str
    kind: str  # decode | sweep
    bytes: int
    tokens: int | None
    elements: int
    dtype: str
    iters: int
    latency_us: float
    latency_us_p10: float
    latency_us_p90: float
    latency_us_mean: float
    latency_us_min: float
    latency_us_max: float
    span_mean_us: float
    algbw_gb_s: float | None
    busbw_gb_s: float | None
    graph_latency_us: float | None = None
    graph_error: str | None = None


@dataclass(frozen=True)
class EnvSetResult:
    """The measurements under one env set (`env`: every NCCL_* variable its ranks had), or why there are none."""

    name: str
    env: dict[str, str]
    outcome: str  # ok | nccl_init_failed | nccl_init_timeout | rank_failed | timeout
    message: str
    world_size: int
    wall_s: float
    nccl_env_lines: tuple[str, ...] = ()  # NCCL's own "X set by environment to Y" lines (rank 0)
    log_excerpt: tuple[str, ...] = ()  # tails of failing ranks' logs
    measurements: tuple[Measurement, ...] = ()


@dataclass(frozen=True)
class ProbeResult:
    """A whole probe run: machine facts, request, and one EnvSetResult per env set."""

    probe_id: str
    outcome: str
    message: str
    measured_at: str  # ISO 8601, UTC
    hostname: str
    python_version: str
    torch_version: str | None
    cuda_version: str | None
    nccl_version: str | None
    gpu_names: tuple[str, ...]
    topology: str
    world_size: int
    request: dict
    env_sets: tuple[EnvSetResult, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_json_dict(self) -> dict:
        return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **asdict(self)}


def planned_measurements(request: ProbeRequest, world_size: int) -> list[dict]:
    """The (collective, kind, bytes, tokens, elements) list every rank runs, in order."""
    sizes = [("decode", maths.decode_message_bytes(request.hidden_size, n, DTYPE_BYTES), n) for n in request.tokens]
    sizes += [("sweep", size, None) for size in maths.sweep_message_bytes()] if request.sweep else []
    planned = []
    for collective in maths.COLLECTIVES:
        for kind, size, tokens in sizes:
            elements = maths.element_count(collective, size, world_size, DTYPE_BYTES)
            planned.append({"collective": collective, "kind": kind, "bytes": elements * DTYPE_BYTES, "requested_bytes": size,
                            "tokens": tokens, "elements": elements})
    return planned


def validate_request(request: ProbeRequest) -> None:
    """Raise ProbeError for requests that cannot mean anything (before any process starts)."""
    if not request.env_sets:
        raise ProbeError("no env set to probe", hint="give --env-set NAME:K=V,… or --plan PLAN.toml")
    if request.gpus is not None and request.gpus < 1:
        raise ProbeError(f"--gpus {request.gpus}: need at least 1", hint="e.g. --gpus 2")
    if request.graph_calls < 0:
        raise ProbeError(f"--graph-calls {request.graph_calls}: need ≥ 0 (0 times eager calls only)")
    if request.iters < 1 or request.warmup_iters < 0:
        raise ProbeError(f"--iters {request.iters} / warm-up {request.warmup_iters}: need iters ≥ 1, warm-up ≥ 0")
    if not request.tokens and not request.sweep:
        raise ProbeError("nothing to measure: no --tokens and no --sweep", hint="e.g. --tokens 1,2,4,8 or --sweep")
    for tokens in request.tokens:
        maths.decode_message_bytes(request.hidden_size, tokens, DTYPE_BYTES)


def run_probe(request: ProbeRequest) -> ProbeResult:
    """Preflight the machine, then measure every env set in its own fresh set of rank processes."""
    validate_request(request)
    base = dict(probe_id=uuid.uuid4().hex[:12], measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                hostname=socket.gethostname(), python_version=platform.python_version(), topology=read_topology(),
                request={**asdict(request), "dtype": DTYPE})
    try:
        facts = _preflight(request)
    except ProbeError as err:
        facts = {"error": str(err)}
    machine = dict(torch_version=facts.get("torch_version"), cuda_version=facts.get("cuda_version"),
                   nccl_version=facts.get("nccl_version"), gpu_names=tuple(facts.get("gpu_names") or ()))
    device_count = int(facts.get("device_count") or 0)
    world_size = request.gpus if request.gpus is not None else device_count
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible_note = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
    torch_note = f"torch {machine['torch_version']}"
    problem = None
    if "error" in facts:
        problem = "preflight_failed", 0, facts["error"]
    elif machine["torch_version"] is None:
        problem = "no_torch", 0, (f"torch is not installed for {sys.executable} ({facts.get('torch_import_error')}): "
                                  "the probe needs torch with CUDA and NCCL on the GPU machine")
    elif not facts.get("cuda_available") or device_count == 0:
        problem = "no_cuda", 0, f"{torch_note} sees no CUDA GPU{visible_note}: nothing to measure"
    elif not facts.get("nccl_available"):
        problem = "no_nccl", 0, f"{torch_note} was built without NCCL: torch.distributed has no 'nccl' backend"
    elif world_size > device_count:
        problem = "not_enough_gpus", world_size, f"asked for {world_size} GPUs, this machine has {device_count}{visible_note}"
    if problem is None and world_size == 1:
        problem = "single_gpu", 1, ("world size 1: all_reduce and all_gather are no-ops (nothing crosses a link), so nothing "
                                    "was measured; tensor-parallel communication needs 2 or more GPUs")
    if problem is not None:
        return ProbeResult(outcome=problem[0], world_size=problem[1], message=problem[2], **base, **machine)

    results = tuple(_run_env_set(request, env_set, world_size) for env_set in request.env_sets)
    failed = [result for result in results if result.outcome != "ok"]
    if not failed:
        outcome, message = "ok", f"{len(results)} env set(s) measured on {world_size} GPUs"
    else:
        outcome = "partial" if len(failed) < len(results) else "failed"
        message = (f"{len(results) - len(failed)} of {len(results)} env set(s) measured; failed: "
                   + "; ".join(f"{result.name}: {result.outcome} ({result.message})" for result in failed))
    return ProbeResult(outcome=outcome, message=message, world_size=world_size, env_sets=results,
                       warnings=_warnings(machine["gpu_names"], world_size), **base, **machine)


def write_probe_json(result: ProbeResult, path: Path, *, overwrite: bool = False) -> Path:
    """Write the result as JSON (the file `speclogs ingest` reads into nccl_probe); never overwrites unless asked."""
    if path.exists() and not overwrite:
        raise ProbeError(f"{path} already exists", hint="choose another --out, or pass --force to overwrite it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result.to_json_dict(), indent=1) + "\n", encoding="utf-8")
    except OSError as err:
        raise ProbeError(f"cannot write {path}: {err.strerror}", hint="check the directory and free space") from err
    return path


def default_output_path(directory: Path | None = None) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return (directory or Path.cwd()) / f"{socket.gethostname()}-{stamp}.nccl_probe.json"


def read_topology() -> str:
    """`nvidia-smi topo -m` output, or a line saying why there is none."""
    try:
        completed = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        return "unavailable: nvidia-smi not found"
    except subprocess.TimeoutExpired:
        return "unavailable: nvidia-smi topo -m did not answer within 30 s"
    if completed.returncode != 0:
        return f"unavailable: nvidia-smi topo -m exited {completed.returncode}: {completed.stderr.strip()[:500]}"
    return completed.stdout.rstrip()


def inherited_nccl_env() -> dict[str, str]:
    """NCCL_* variables of the probe's own environment: every env set inherits them (and records them)."""
    return {key: value for key, value in os.environ.items() if key.startswith("NCCL_")}


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    """The parent's environment (safety settings such as NCCL_NVLS_ENABLE=0 stay), plus `extra`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # a killed rank still leaves its last lines in its log
    prepend_path(env, "PYTHONPATH", str(_SRC_ROOT))
    return {**env, **extra}


def _preflight(request: ProbeRequest) -> dict:
    what = "the preflight (import torch, count GPUs)"
    try:
        completed = subprocess.run([sys.executable, "-m", request.worker_module, "--preflight"], capture_output=True,
                                   text=True, timeout=180, env=_child_env({}), check=False)
    except subprocess.TimeoutExpired as err:
        raise ProbeError(f"{what} took over 180 s", hint="is the GPU driver hung? try nvidia-smi") from err
    if completed.returncode != 0:
        tail = "\n".join(completed.stderr.strip().splitlines()[-8:])
        raise ProbeError(f"{what} failed with exit {completed.returncode}: {tail}")
    try:
        return json.loads(completed.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as err:
        raise ProbeError(f"the preflight printed no JSON: {completed.stdout[-500:]!r}") from err


def _read(path: Path) -> str:
    """A rank's file, or "" before the rank wrote it."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _run_env_set(request: ProbeRequest, env_set: EnvSet, world_size: int) -> EnvSetResult:
    applied = {**inherited_nccl_env(), **env_set.applied_env()}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"speclogs-probe-{env_set.name}-") as tmp:
        work_dir = Path(tmp)
        spec = {"iters": request.iters, "warmup_iters": request.warmup_iters,
                "graph_calls": request.graph_calls, "init_timeout_s": request.init_timeout_s,
                "measurements": planned_measurements(request, world_size)}
        (work_dir / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        with socket.socket() as sock:  # a free port for the rendezvous
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        processes = []
        for rank in range(world_size):
            env = _child_env({**applied, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
            with open(work_dir / f"rank{rank}.log", "wb") as log:
                processes.append(subprocess.Popen([sys.executable, "-m", request.worker_module, str(work_dir / "spec.json")],
                                                  stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        outcome, message = _watch_ranks(request, processes, work_dir, started)
        common = dict(name=env_set.name, env=applied, world_size=world_size, wall_s=round(time.monotonic() - started, 3))
        if outcome != "ok":
            excerpt = [f"[rank {rank}] {line}" for rank in range(world_size)
                       for line in _read(work_dir / f"rank{rank}.log").splitlines()[-_LOG_TAIL_LINES:]]
            return EnvSetResult(outcome=outcome, message=message, log_excerpt=tuple(excerpt), **common)
        rank_results = [json.loads(_read(work_dir / f"rank{rank}.json")) for rank in range(world_size)]
        env_lines = tuple(line.strip() for line in _read(work_dir / "rank0.log").splitlines()
                          if "NCCL INFO" in line and ("set by environment to" in line or "NCCL version" in line))
    try:
        measurements = tuple(_combine(rank_results, world_size))
    except ProbeError as err:
        return EnvSetResult(outcome="rank_failed", message=str(err), **common)
    return EnvSetResult(outcome="ok", message=f"{len(measurements)} measurements", nccl_env_lines=env_lines,
                        measurements=measurements, **common)


def _watch_ranks(request: ProbeRequest, processes: list[subprocess.Popen], work_dir: Path, started: float) -> tuple[str, str]:
    """Wait for every rank (polling their exit codes and stage files); stop them all at the first failure or timeout."""
    init_seen_at: dict[int, float] = {}
    try:
        while True:
            now = time.monotonic()
            codes = [process.poll() for process in processes]
            stages = [_read(work_dir / f"rank{rank}.stage").strip() or "not_started" for rank in range(len(processes))]
            for rank in (rank for rank, stage in enumerate(stages) if stage == "init_begin"):
                init_seen_at.setdefault(rank, now)
            failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                rank = failed[0]
                outcome = "nccl_init_failed" if stages[rank] == "init_begin" else "rank_failed"
                return outcome, f"rank {rank} exited with {codes[rank]} at stage {stages[rank]!r} (its log tail is in log_excerpt)"
            if all(code == 0 for code in codes):
                missing = [rank for rank in range(len(processes)) if not (work_dir / f"rank{rank}.json").exists()]
                return ("rank_failed", f"rank(s) {missing} exited 0 without writing results") if missing else ("ok", "ok")
            stuck = [rank for rank, seen in init_seen_at.items()
                     if stages[rank] == "init_begin" and now - seen > request.init_timeout_s]
            if stuck:
                return "nccl_init_timeout", (f"NCCL init did not finish within {request.init_timeout_s:g} s on rank(s) {stuck} "
                                             f"(stages: {stages})")
            if now - started > request.env_set_timeout_s:
                return "timeout", f"the env set took over {request.env_set_timeout_s:g} s (stages: {stages})"
            time.sleep(0.2)
    finally:
        for process in processes:
            stop_server(process, grace_s=5.0)


def _combine(rank_results: list[dict], world_size: int) -> list[Measurement]:
    by_rank = sorted(rank_results, key=lambda result: result["rank"])
    measurements = []
    for index, item in enumerate(by_rank[0]["measurements"]):
        per_rank = [result["measurements"][index] for result in by_rank]
        summary = maths.summarize_latencies_us(maths.combine_rank_samples_us([entry["samples_us"] for entry in per_rank]))
        size, latency_us = int(item["bytes"]), summary["latency_us"]
        graph: dict = {}
        errors = [entry["graph_error"] for entry in per_rank if entry.get("graph_error")]
        if errors:
            graph["graph_error"] = errors[0]
        elif all(entry.get("graph_samples_us") for entry in per_rank):  # per replay the slowest rank, then the median
            combined = maths.combine_rank_samples_us([entry["graph_samples_us"] for entry in per_rank])
            graph["graph_latency_us"] = maths.percentile(combined, 50.0)
        measurements.append(Measurement(
            collective=item["collective"], kind=item["kind"], bytes=size, tokens=item["tokens"], elements=int(item["elements"]),
            dtype=DTYPE, **summary, span_mean_us=max(float(entry["span_mean_us"]) for entry in per_rank),
            algbw_gb_s=maths.alg_bandwidth_gb_s(size, latency_us),
            busbw_gb_s=maths.bus_bandwidth_gb_s(item["collective"], size, latency_us, world_size), **graph))
    return measurements


def _warnings(gpu_names: tuple[str, ...], world_size: int) -> tuple[str, ...]:
    warnings = []
    if len(names := set(gpu_names[:world_size])) > 1:
        warnings.append(f"the {world_size} GPUs are not all the same model ({', '.join(sorted(names))}): "
                        "the slowest link sets the numbers")
    inherited = {key: value for key, value in inherited_nccl_env().items() if key not in _QUIET_NCCL_KEYS}
    if inherited:
        settings = " ".join(f"{key}={value}" for key, value in sorted(inherited.items()))
        warnings.append(f"the probe's own environment sets {settings}: every env set inherits it unless it names the "
                        "variable (so 'default' is not NCCL's default for these)")
    return tuple(warnings)
