"""Benchmarks against a ready server, each in its window: the seeds' single-stream method, sglang.bench_serving.

A window is one benchmark's measured span. With `--enable-metrics` the launcher scrapes `GET /metrics` as it opens
(`before`), every `every_s` seconds (`during`) and as it closes (`after`), into `metrics-<window>-<phase>[-NNN].prom`,
so counter deltas between a window's scrapes belong to that window only. A failed scrape is recorded, never fatal.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from speclogs.errors import LaunchError
from speclogs.launcher import runinfo
from speclogs.launcher.plan import BenchServingSpec, BenchSpec
from speclogs.launcher.process import DIRECT

METRICS_FLAG = "--enable-metrics"


class BenchFailed(LaunchError):
    """A benchmark request failed or timed out (outcome bench_failed)."""


def prompt_payloads(spec: BenchSpec) -> list[dict]:
    """The request bodies, deterministic for a seed: random input_ids < vocab_size, or the text prompts cycled."""
    rng = random.Random(spec.seed)
    sampling = {"max_new_tokens": spec.max_new_tokens, "temperature": spec.temperature, "ignore_eos": True}
    if spec.prompts:
        return [{"text": spec.prompts[i % len(spec.prompts)], "sampling_params": dict(sampling)} for i in range(spec.requests)]
    return [{"input_ids": [rng.randrange(3, spec.vocab_size) for _ in range(spec.prompt_tokens)],
             "sampling_params": dict(sampling)} for _ in range(spec.requests)]


def run_single_stream(base_url: str, spec: BenchSpec, run_name: str, out_path: Path,
                      on_request: Callable[[dict], None]) -> tuple[int, float | None]:
    """The requests one after another to /generate, one JSON line each in `out_path` (flushed each); returns (requests
    done, median tok/s of the measured ones). BenchFailed on an HTTP error, a timeout or an unreadable answer."""
    measured: list[float] = []
    with open(out_path, "w", encoding="utf-8") as out:
        for index, payload in enumerate(prompt_payloads(spec)):
            row = {"run": run_name, "i": index, "warmup": index < spec.warmup_requests,
                   **_generate(base_url, payload, spec.request_timeout_s, index)}
            out.write(json.dumps(row) + "\n")
            out.flush()
            if not row["warmup"] and row["tok_per_s"] is not None:
                measured.append(row["tok_per_s"])
            on_request(row)
    return spec.requests, statistics.median(measured) if measured else None


def _generate(base_url: str, payload: dict, timeout_s: float, index: int) -> dict:
    request = urllib.request.Request(f"{base_url}/generate", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with DIRECT.open(request, timeout=timeout_s) as response:
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
        answer = answer[0] if isinstance(answer, list) and answer else answer   # a batch-shaped answer
        meta = answer.get("meta_info") or {}
    except (json.JSONDecodeError, AttributeError) as exc:
        raise BenchFailed(f"request {index}: /generate answer is not a JSON object: {raw[:200]!r}", hint="see server.log") from exc
    completion = meta.get("completion_tokens")
    if completion is None and isinstance(answer.get("output_ids"), list):
        completion = len(answer["output_ids"])
    tok_per_s = completion / latency_s if completion and latency_s > 0 else None
    return {"latency_s": latency_s, "completion_tokens": completion, "tok_per_s": tok_per_s, "meta_info": meta}


def run_bench_serving(python: str, env: dict[str, str], host: str, port: int, spec: BenchServingSpec,
                      out_dir: Path) -> tuple[int, str]:
    """`python -m sglang.bench_serving --backend sglang …` → bench_serving.jsonl + bench_serving.log. Returns (rc, detail)."""
    argv = [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", host, "--port", str(port),
            "--output-file", str(out_dir / "bench_serving.jsonl"), *spec.args]
    with open(out_dir / "bench_serving.log", "wb") as log:
        try:
            code = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=spec.timeout_s).returncode
        except subprocess.TimeoutExpired:
            return -1, f"bench_serving timed out after {spec.timeout_s:g} s"
        except OSError as exc:
            return -1, f"bench_serving could not start: {exc}"
    return code, "" if code == 0 else f"bench_serving exited {code}"


class Windows:
    """The benchmark windows of one launch (run.json `windows`), and their scrapes when `scrape` is true."""

    def __init__(self, base_url: str, run_dir: Path, *, scrape: bool, every_s: float, timeout_s: float,
                 say: Callable[[str], None]) -> None:
        self.base_url, self.run_dir, self.scrape, self.every_s, self.timeout_s, self.say = (
            base_url, run_dir, scrape, every_s, timeout_s, say)
        self.records: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._open: dict | None = None

    def open(self, name: str) -> None:   # closing one still open
        self.close()
        self._open = {"name": name, "start": runinfo.now_iso(), "start_unix": time.time(), "end": None, "end_unix": None,
                      "scrapes": []}
        self.records.append(self._open)
        if self.scrape:
            self._take(self._open, "before")
            if self.every_s > 0:
                self._stop.clear()
                self._thread = threading.Thread(target=self._during, args=(self._open,), name="speclogs-scrape", daemon=True)
                self._thread.start()

    def close(self) -> None:
        window, self._open = self._open, None
        if window is None:
            return
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.scrape:
            self._take(window, "after")
        window["end"], window["end_unix"] = runinfo.now_iso(), time.time()

    def files(self) -> list[str]:   # after close(), when no `during` thread runs
        return [s["file"] for w in self.records for s in w["scrapes"] if s["file"]]

    def _during(self, window: dict) -> None:
        index = 1
        while not self._stop.wait(self.every_s):
            self._take(window, "during", index)
            index += 1

    def _take(self, window: dict, phase: str, index: int | None = None) -> None:
        name = f"metrics-{window['name']}-{phase}" + (f"-{index:03d}" if index is not None else "") + ".prom"
        entry = {"phase": phase, "ts": runinfo.now_iso(), "unix": time.time(), "file": None, "status": None,
                 "bytes": None, "error": None}
        try:
            with DIRECT.open(f"{self.base_url}/metrics", timeout=self.timeout_s) as response:
                body = response.read()
                entry["status"] = response.status
            (self.run_dir / name).write_bytes(body)
            entry["file"], entry["bytes"] = name, len(body)
        except urllib.error.HTTPError as exc:
            entry["status"], entry["error"] = exc.code, f"GET /metrics answered HTTP {exc.code}"
        except (urllib.error.URLError, ValueError) as exc:
            entry["error"] = f"GET /metrics failed: {getattr(exc, 'reason', exc)}"
        except OSError as exc:   # a failed write too: a full disk shows in the launch's own writes, the scrape records it
            entry["error"] = f"GET /metrics failed: {exc}" if entry["status"] is None else f"cannot write {name}: {exc.strerror}"
        if entry["error"] is not None:
            self.say(f"metrics scrape {window['name']}/{phase}: {entry['error']} (recorded; the launch goes on)")
        window["scrapes"].append(entry)
