"""Benchmarks run against a ready server: the seeds' single-stream method and optional sglang.bench_serving.

Standard library only (urllib; runs on the GPU box).
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from speclogs.errors import LaunchError
from speclogs.launcher.plan import BenchServingSpec, BenchSpec
from speclogs.launcher.process import open_direct


class BenchFailed(LaunchError):
    """A benchmark request failed or timed out (outcome bench_failed)."""


@dataclass(frozen=True)
class BenchSummary:
    requests_done: int
    median_tok_s: float | None


def prompt_payloads(spec: BenchSpec) -> list[dict]:
    """The request bodies, deterministic for a seed: random input_ids < vocab_size, or the text prompts cycled."""
    rng = random.Random(spec.seed)
    sampling = {"max_new_tokens": spec.max_new_tokens, "temperature": spec.temperature, "ignore_eos": True}
    payloads = []
    for index in range(spec.requests):
        if spec.prompts:
            payloads.append({"text": spec.prompts[index % len(spec.prompts)], "sampling_params": dict(sampling)})
        else:
            ids = [rng.randrange(3, spec.vocab_size) for _ in range(spec.prompt_tokens)]
            payloads.append({"input_ids": ids, "sampling_params": dict(sampling)})
    return payloads


def run_single_stream(base_url: str, spec: BenchSpec, run_name: str, out_path: Path,
                      on_request: Callable[[dict], None] | None = None) -> BenchSummary:
    """Send the requests one after another to /generate; one JSON line per request in `out_path` (flushed each).

    Raises BenchFailed on an HTTP error, a timeout or an unreadable answer; OSError (e.g. ENOSPC) from writing propagates.
    """
    measured: list[float] = []
    done = 0
    with open(out_path, "w", encoding="utf-8") as out:
        for index, payload in enumerate(prompt_payloads(spec)):
            record = _generate(base_url, payload, spec.request_timeout_s, index)
            record = {"run": run_name, "i": index, "warmup": index < spec.warmup_requests, **record}
            out.write(json.dumps(record) + "\n")
            out.flush()
            done += 1
            if not record["warmup"] and record["tok_per_s"] is not None:
                measured.append(record["tok_per_s"])
            if on_request is not None:
                on_request(record)
    median = statistics.median(measured) if measured else None
    return BenchSummary(requests_done=done, median_tok_s=median)


def _generate(base_url: str, payload: dict, timeout_s: float, index: int) -> dict:
    body = json.dumps(payload).encode()
    request = urllib.request.Request(f"{base_url}/generate", data=body, headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with open_direct(request, timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", errors="replace")
        raise BenchFailed(f"request {index}: POST /generate answered HTTP {exc.code}: {detail}",
                          hint="see server.log for the server's side") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise BenchFailed(f"request {index}: POST /generate timed out after {timeout_s:g} s",
                              hint="raise [bench] request_timeout_s or check the server") from exc
        raise BenchFailed(f"request {index}: POST /generate failed: {reason}", hint="did the server die? see server.log") from exc
    latency_s = time.perf_counter() - started
    try:
        answer = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BenchFailed(f"request {index}: /generate answer is not JSON: {raw[:200]!r}", hint="see server.log") from exc
    if isinstance(answer, list):  # batch-shaped answer
        answer = answer[0] if answer else {}
    if not isinstance(answer, dict):
        raise BenchFailed(f"request {index}: /generate answer is not an object: {raw[:200]!r}", hint="see server.log")
    meta = answer.get("meta_info") or {}
    completion = meta.get("completion_tokens")
    if completion is None and isinstance(answer.get("output_ids"), list):
        completion = len(answer["output_ids"])
    tok_per_s = completion / latency_s if completion and latency_s > 0 else None
    return {"latency_s": latency_s, "completion_tokens": completion, "tok_per_s": tok_per_s, "meta_info": meta}


def run_bench_serving(python: str, env: dict[str, str], host: str, port: int, spec: BenchServingSpec,
                      out_dir: Path) -> tuple[int, str]:
    """`python -m sglang.bench_serving --backend sglang …` → bench_serving.jsonl + bench_serving.log. Returns (rc, detail)."""
    output = out_dir / "bench_serving.jsonl"
    argv = [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", host, "--port", str(port),
            "--output-file", str(output), *spec.args]
    with open(out_dir / "bench_serving.log", "wb") as log:
        try:
            result = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            return -1, f"bench_serving timed out after {spec.timeout_s:g} s"
        except OSError as exc:
            return -1, f"bench_serving could not start: {exc}"
    return result.returncode, "" if result.returncode == 0 else f"bench_serving exited {result.returncode}"
