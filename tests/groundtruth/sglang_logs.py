"""Ground-truth log sets: SGLang 0.5.14 server logs + bench.jsonl (+ run.json) whose true effects are known.

Each generated server log starts with the real start-up of a fixture log (fixtures/h200x2-sglang-0.5.14/matrix:
server_args dump, NCCL INFO lines including 'NAME set by environment to VALUE', CUDA-graph capture, uvicorn,
/health 503s) with its timestamps shifted, then a simulated benchmark written the way SGLang 0.5.14 writes it:
a 'Decode batch' line every 40 decode steps (SGLang's decode_log_interval) whose gen throughput is the tokens
since the previous decode line over the wall time since then — so the first line after idle includes the idle
gap, exactly as in real logs — plus our profiling lines
`speclogs spec_cycle cycle=… bs=… draft_ms=… verify_ms=… extend_ms=… other_ms=… cycle_ms=… accepted=… proposed=…`.

Noise model (seeded): per launch a multiplicative factor exp(N(0, launch_sigma)) on the step time; per decode-log
window a factor exp(N(0, row_sigma)); accepted draft tokens per step ~ Binomial(steps, (accept_len − 1)/steps).
The true steady decode throughput of a cell is accept_len / step time (bs = 1).

`python tests/groundtruth/sglang_logs.py OUT_DIR` writes the seeds' story (launcher layout) into OUT_DIR.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "h200x2-sglang-0.5.14" / "matrix"
DECODE_LOG_INTERVAL = 40
TS_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
TS_FMT = "%Y-%m-%d %H:%M:%S"
TUNED_NCCL = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
              "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING",
            "NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0", "HF_TOKEN": "<redacted>"}
PHASE_SHARES = {"draft": 0.04, "verify": 0.95, "extend": 0.008, "other": 0.002}
SPEC_STEPS = 5


@dataclass(frozen=True)
class RunSpec:
    """One launch to generate. rate_tok_s is the TRUE steady decode throughput before launch noise."""

    name: str
    spec: bool
    nccl_tuned: bool
    rate_tok_s: float
    accept_len: float = 1.0
    cell: str | None = None
    launch: int | None = None
    factors: dict = field(default_factory=dict)
    requests: int = 8  # including one warm-up request
    max_new_tokens: int = 500
    prompt_tokens: int = 64
    launch_sigma: float = 0.01
    row_sigma: float = 0.03
    profile: bool = True  # spec_cycle lines (speculative runs only)
    profile_every: int = 16
    eager_rows_before_ready: int = 2  # decode rows with cuda graph False before the server is ready
    extra_env: dict = field(default_factory=dict)
    sglang_version: str = "0.5.14"
    drift: float = 0.0  # step time grows linearly by this fraction from the first to the last request
    client_overhead_s: float = 0.0  # extra latency the client sees per request (HTTP, tokenizer …), not the server
    retract_at_request: int | None = None  # log a 'KV cache pool is full. Retract requests.' line in this request
    slow_start_requests: int = 0  # the first N measured requests (after the warm-up one) run slow_start_factor × as fast,
    slow_start_factor: float = 1.0  # with CUDA graphs on: a warm-up only the data show
    disable_cuda_graph: bool = False  # server_args disable_cuda_graph=True: every decode batch eager, steps eager_slowdown × longer
    eager_requests: int = 0  # the first N measured requests (after the warm-up one) decode eager (cuda graph False, graphs on)
    eager_slowdown: float = 6.0
    draft_model: dict | None = None  # run.json models.draft (e.g. {"weights_sha256": …, "eagle3_layer_ids": […]})
    gpu_name: str = "NVIDIA H200"
    server_arg_overrides: dict = field(default_factory=dict)  # name → printed value in the server_args dump
    seed: int = 0
    start: datetime = datetime(2026, 11, 30, 9, 0, 0)


def _template(spec: bool, tuned: bool) -> tuple[list[str], datetime]:
    name = f"{'eagle3' if spec else 'baseline'}_{'nccl' if tuned else 'default'}.log"
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    cut = next(i for i, line in enumerate(lines) if "Prefill batch" in line)
    first = next(TS_RE.search(line) for line in lines if TS_RE.search(line))
    return lines[:cut], datetime.strptime(first.group(1), TS_FMT)


def _shift(line: str, delta: timedelta) -> str:
    return TS_RE.sub(lambda m: "[" + (datetime.strptime(m.group(1), TS_FMT) + delta).strftime(TS_FMT), line)


def _ts(t: datetime, rank: bool = True) -> str:
    return f"[{t.strftime(TS_FMT)}{' TP0' if rank else ''}]"


def write_run(spec: RunSpec, directory: Path, layout: str = "launcher") -> dict:
    """Write one launch. layout 'launcher': directory/<cell>/<launch>/{server.log,bench.jsonl,run.json};
    'plain': directory/<name>.log + <name>.bench.jsonl. Returns the truth of this launch."""
    rng = np.random.default_rng(spec.seed)
    template, template_start = _template(spec.spec, spec.nccl_tuned)
    out = [_server_args(_shift(line, spec.start - template_start), spec) for line in template]
    last_ts = max(datetime.strptime(m.group(1), TS_FMT) for line in out if (m := TS_RE.search(line)))
    t = last_ts + timedelta(seconds=1)
    launch_factor = math.exp(rng.normal(0.0, spec.launch_sigma))
    accept = spec.accept_len if spec.spec else 1.0
    step_s = accept / spec.rate_tok_s * launch_factor * (spec.eager_slowdown if spec.disable_cuda_graph else 1.0)

    # the server's own warm-up request before 'ready': eager (no CUDA graph) decode rows
    out.append(f"{_ts(t)} Prefill batch, #new-seq: 1, #new-token: 3, #cached-token: 0, token usage: 0.00, "
               "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 0.82")
    for k in range(spec.eager_rows_before_ready):
        t += timedelta(seconds=0.6)
        out.append(_decode_line(t, 3 + 40 * (k + 1), accept if spec.spec else None, 21.3 + k, cuda_graph=False))
    out.append(f"{_ts(t, False)} INFO:     127.0.0.1:45644 - \"POST /generate HTTP/1.1\" 200 OK")
    out.append(f"{_ts(t, False)} The server is fired up and ready to roll!")
    t += timedelta(seconds=1.5)
    out.append(f"{_ts(t, False)} INFO:     127.0.0.1:57646 - \"GET /health HTTP/1.1\" 200 OK")
    ready = t
    t += timedelta(seconds=0.5)

    last_log_t = ready - timedelta(seconds=30)  # SGLang's decode-stats clock started long before (idle time)
    tokens_since_log = 0
    steps_since_log = 0
    step_count = 0
    window_factor = math.exp(rng.normal(0.0, spec.row_sigma))
    bench = []
    cycle_rows = 0
    decode_rows = 0
    for i in range(spec.requests):
        req_start = t
        t += timedelta(seconds=0.015)  # prefill
        out.append(f"{_ts(t)} Prefill batch, #new-seq: 1, #new-token: {spec.prompt_tokens}, #cached-token: 0, token usage: 0.00, "
                   f"#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): "
                   f"{spec.prompt_tokens / 0.9:.2f}")
        generated = 0
        verify_ct = 0
        accepted_total = 0
        if spec.retract_at_request == i:
            out.append(f"{_ts(t)} KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                       "#new_token_ratio: 0.4123 -> 0.5000")
        drift_factor = 1.0 + spec.drift * i / max(spec.requests - 1, 1)
        if 1 <= i <= spec.slow_start_requests:
            drift_factor /= spec.slow_start_factor
        eager = 1 <= i <= spec.eager_requests
        if eager:
            drift_factor *= spec.eager_slowdown
        while generated < spec.max_new_tokens:
            this_step = step_s * window_factor * drift_factor
            t += timedelta(seconds=this_step)
            accepted = int(rng.binomial(SPEC_STEPS, (accept - 1.0) / SPEC_STEPS)) if spec.spec else 0
            new_tokens = min(1 + accepted, spec.max_new_tokens - generated)
            generated += new_tokens
            accepted_total += new_tokens - 1
            verify_ct += 1
            tokens_since_log += new_tokens
            steps_since_log += 1
            step_count += 1
            if spec.spec and spec.profile and step_count % spec.profile_every == 0:
                cycle_ms = this_step * 1000 * math.exp(rng.normal(0.0, 0.01))
                parts = {k: v * cycle_ms for k, v in PHASE_SHARES.items()}
                out.append(f"{_ts(t)} speclogs spec_cycle cycle={step_count} bs=1 draft_ms={parts['draft']:.3f} "
                           f"verify_ms={parts['verify']:.3f} extend_ms={parts['extend']:.3f} other_ms={parts['other']:.3f} "
                           f"cycle_ms={cycle_ms:.3f} accepted={accepted} proposed={SPEC_STEPS}")
                cycle_rows += 1
            if step_count % DECODE_LOG_INTERVAL == 0:
                elapsed = (t - last_log_t).total_seconds()
                window_accept = tokens_since_log / steps_since_log  # SGLang prints the window's mean acceptance
                out.append(_decode_line(t, spec.prompt_tokens + generated, window_accept if spec.spec else None,
                                        tokens_since_log / elapsed, cuda_graph=not (spec.disable_cuda_graph or eager)))
                decode_rows += 1
                last_log_t = t
                tokens_since_log = 0
                steps_since_log = 0
                window_factor = math.exp(rng.normal(0.0, spec.row_sigma))
        t += timedelta(seconds=0.003)
        latency = (t - req_start).total_seconds() + spec.client_overhead_s
        out.append(f"{_ts(t, False)} INFO:     127.0.0.1:{57662 + i} - \"POST /generate HTTP/1.1\" 200 OK")
        meta = {"id": uuid.UUID(int=int(rng.integers(0, 2**63))).hex, "finish_reason": {"type": "length", "length": spec.max_new_tokens},
                "prompt_tokens": spec.prompt_tokens, "num_retractions": 0, "completion_tokens": generated,
                "cached_tokens": 0, "e2e_latency": latency - 0.002}
        if spec.spec:
            meta.update({"spec_accept_rate": round(accepted_total / (verify_ct * SPEC_STEPS), 4),
                         "spec_accept_length": round(generated / verify_ct, 4), "spec_verify_ct": verify_ct})
        bench.append({"run": spec.name, "i": i, "warmup": i == 0, "latency_s": latency, "completion_tokens": generated,
                      "tok_per_s": generated / latency, "meta_info": meta})
        t += timedelta(seconds=0.05)  # client think time: the server is idle
    out.append(f"{_ts(t, False)} SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    t += timedelta(seconds=2)
    out.append(f"{_ts(t, False)} Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].")

    env = dict(BASE_ENV)
    if spec.nccl_tuned:
        env.update(TUNED_NCCL)
    env.update(spec.extra_env)
    if layout == "launcher":
        run_dir = directory / (spec.cell or spec.name) / str(spec.launch or 1)
        log_path, bench_path = run_dir / "server.log", run_dir / "bench.jsonl"
    else:
        run_dir = directory
        log_path, bench_path = run_dir / f"{spec.name}.log", run_dir / f"{spec.name}.bench.jsonl"
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path.write_text("\n".join(out) + "\n", encoding="utf-8")
    bench_path.write_text("".join(json.dumps(b) + "\n" for b in bench), encoding="utf-8")
    if layout == "launcher":
        _write_run_json(spec, run_dir, env, ready)
    server_true = accept / step_s
    return {"name": spec.name, "server_tok_s": server_true, "launch_factor": launch_factor, "accept_len": accept,
            "decode_rows": decode_rows, "cycle_rows": cycle_rows, "requests": spec.requests}


def _server_args(line: str, spec: RunSpec) -> str:
    """The template's server_args dump with this run's overrides (disable_cuda_graph, server_arg_overrides)."""
    if "server_args=ServerArgs(" not in line:
        return line
    overrides = dict(spec.server_arg_overrides)
    if spec.disable_cuda_graph:
        overrides["disable_cuda_graph"] = "True"
    for name, value in overrides.items():
        line, n = re.subn(rf"\b{name}=[^,)]*", f"{name}={value}", line, count=1)
        if n == 0:
            raise ValueError(f"server_args has no {name}")
    return line


def _decode_line(t: datetime, n_tokens: int, accept: float | None, rate: float, cuda_graph: bool) -> str:
    spec_part = f"accept len: {accept:.2f}, accept rate: {(accept - 1) / SPEC_STEPS:.2f}, " if accept is not None else ""
    return (f"{_ts(t)} Decode batch, #running-req: 1, #token: {n_tokens}, token usage: 0.00, {spec_part}"
            f"cuda graph: {cuda_graph}, gen throughput (token/s): {rate:.2f}, #queue-req: 0")


def _write_run_json(spec: RunSpec, run_dir: Path, env: dict, ready: datetime) -> None:
    run = {
        "schema": "speclogs.run/1", "speclogs_version": "0.1.0",
        "run_uid": hashlib.sha1(f"{spec.name}:{spec.seed}".encode()).hexdigest()[:32],  # stable across processes
        "run_name": spec.name, "plan_name": "groundtruth", "plan_file": "plans/groundtruth.toml",
        "cell": spec.cell, "launch": spec.launch, "factors": spec.factors, "order_index": spec.seed,
        "argv": ["python3", "-m", "sglang.launch_server", "--model-path", "/tmp/t3", "--tp", "2"]
        + (["--speculative-algorithm", "EAGLE3"] if spec.spec else []),
        "env": env, "env_nccl": {k: v for k, v in env.items() if k.startswith("NCCL_")},
        "env_cuda": {k: v for k, v in env.items() if k.startswith("CUDA_")},
        "profile": spec.spec and spec.profile,
        "versions": {"python": "3.12.3", "sglang": spec.sglang_version, "torch": "2.11.0+cu130", "nccl": "2.28.9", "speclogs": "0.1.0"},
        "gpus": [{"index": i, "name": spec.gpu_name, "driver": "580.159.04", "memory_mib": 143771} for i in range(2)],
        "hostname": "vm",
        "bench": {"kind": "single_stream", "requests": spec.requests, "warmup_requests": 1,
                  "max_new_tokens": spec.max_new_tokens, "prompt_tokens": spec.prompt_tokens},
        "timestamps": {"spawn": spec.start.isoformat(), "health_200": ready.isoformat()},
        "utc_offset": "+00:00", "ready_s": (ready - spec.start).total_seconds(),
        "outcome": "ok", "outcome_detail": "", "exit_code": 0,
        "files": {"server_log": "server.log", "bench": "bench.jsonl"},
    }
    if spec.draft_model is not None:
        run["models"] = {"draft": spec.draft_model}
    (run_dir / "run.json").write_text(json.dumps(run, indent=2), encoding="utf-8")


# The seeds' story: true steady decode throughput per cell (tok/s) and EAGLE-3's acceptance.
SEEDS_RATES = {("baseline", "default"): 62.9, ("baseline", "nccl"): 88.8, ("eagle3", "default"): 73.0, ("eagle3", "nccl"): 94.0}
SEEDS_ACCEPT = 2.1


def write_seeds_story(directory: Path, *, launches: int = 3, layout: str = "launcher", seed: int = 7,
                      requests: int = 8) -> dict:
    """The 2×2 (spec × nccl) with the seeds' numbers. Launch order interleaved. Returns the truth."""
    truth = {"rates": {f"{s}_{n}": r for (s, n), r in SEEDS_RATES.items()}, "accept_len": SEEDS_ACCEPT, "runs": []}
    start = datetime(2026, 11, 30, 9, 0, 0)
    order = 0
    for launch in range(1, launches + 1):
        for (spec_level, nccl_level), rate in SEEDS_RATES.items():
            cell = f"{spec_level}_{nccl_level}"
            name = f"{cell}_{launch}" if layout == "launcher" else (cell if launches == 1 else f"{cell}_{launch}")
            spec = RunSpec(
                name=name, spec=spec_level == "eagle3", nccl_tuned=nccl_level == "nccl", rate_tok_s=rate,
                accept_len=SEEDS_ACCEPT if spec_level == "eagle3" else 1.0, cell=cell, launch=launch,
                factors={"spec": spec_level, "nccl": "tuned" if nccl_level == "nccl" else "default"},
                requests=requests, seed=seed * 1000 + order, start=start + timedelta(minutes=10 * order),
            )
            truth["runs"].append(write_run(spec, directory, layout))
            order += 1
    return truth


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "groundtruth-logs")
    result = write_seeds_story(target)
    (target / "truth.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    sys.stdout.write(f"wrote {len(result['runs'])} launches under {target}\n")
