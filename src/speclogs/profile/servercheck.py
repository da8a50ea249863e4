"""`python -m speclogs.profile.servercheck --log server.log -- <sglang launch command…>`

One-shot proof on the GPU box that the profiler works inside a real SGLang server: starts the command profiled, waits
for `/health` 200, sends a few `/generate` requests (token ids, so `--skip-tokenizer-init` servers work), stops it with
SIGTERM, then checks what the profiler wrote into the log. Prints a JSON summary and `servercheck: OK` or `FAILED …`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from speclogs.doctor import arg_value

SPEC_CYCLE_RE = re.compile(
    r"\[(?P<prefix>[^\]]*)\] speclogs spec_cycle cycle=(?P<cycle>\d+) bs=(?P<bs>\d+) "
    r"draft_ms=(?P<draft_ms>\d+\.\d{3}) verify_ms=(?P<verify_ms>\d+\.\d{3}) "
    r"extend_ms=(?P<extend_ms>\d+\.\d{3}) other_ms=(?P<other_ms>\d+\.\d{3}) "
    r"(?:gap_ms=(?P<gap_ms>\d+\.\d{3}) )?cycle_ms=(?P<cycle_ms>\d+\.\d{3}) accepted=(?P<accepted>\d+) proposed=(?P<proposed>\d+)$"
)
DECODE_RE = re.compile(
    r"Decode batch.*?#running-req: (?P<running>\d+).*?accept len: (?P<accept_len>[\d.]+)"
    r".*?gen throughput \(token/s\): (?P<tok_s>[\d.]+)"
)
STATUS_RE = re.compile(r"\[(?P<prefix>[^\]]*)\] speclogs profiler: (?P<status>active|disabled)(?P<rest>.*)$")
PHASES = ("draft_ms", "verify_ms", "extend_ms", "other_ms", "cycle_ms")


def check_profiler_log(text: str, *, every: int) -> dict:
    """Check a server log's `speclogs` lines: one active line, well-formed cycles, sums, order; `problems` says
    what is wrong."""
    status, cycles, malformed = [], [], []
    for line in text.splitlines():
        if "speclogs spec_cycle" in line:
            match = SPEC_CYCLE_RE.search(line)
            (cycles if match else malformed).append(match or line)
        elif "speclogs profiler:" in line:
            status.append(line.strip())
    problems = []
    active = [s for s in status if (m := STATUS_RE.search(s)) and m["status"] == "active"]
    if len(active) != 1:
        problems.append(f"expected one `speclogs profiler: active` line, found {len(active)}")
    if any("disabled" in s for s in status):
        problems.append("a `speclogs profiler: disabled` line is present")
    if not cycles:
        problems.append("no `speclogs spec_cycle` line")
    if malformed:
        problems.append(f"{len(malformed)} malformed spec_cycle line(s)")
    numbers = [int(m["cycle"]) for m in cycles]
    if numbers != sorted(numbers) or any(n % every for n in numbers):
        problems.append(f"cycle numbers are not increasing multiples of {every}")
    if any("TP" in m["prefix"] and "TP0" not in m["prefix"] for m in cycles):
        problems.append("spec_cycle lines from a TP rank other than 0")
    unsummed = [m for m in cycles if abs(sum(float(m[p]) for p in PHASES[:4]) - float(m["cycle_ms"])) > 0.0015]
    if unsummed:
        problems.append(f"phases do not add up to cycle_ms: {unsummed[0].string.strip()}")
    median = {p: statistics.median(float(m[p]) for m in cycles) for p in PHASES} if cycles else {}
    with_gap = [m for m in cycles if m["gap_ms"] is not None]  # lines of the first profiler version lack gap_ms
    if with_gap:
        median["gap_ms"] = statistics.median(float(m["gap_ms"]) for m in with_gap)
    implied = [  # bs × accept len / gen throughput of the Decode batch lines
        int(d["running"]) * float(d["accept_len"]) / float(d["tok_s"]) * 1000.0
        for d in map(DECODE_RE.search, text.splitlines())
        if d and float(d["tok_s"]) > 0 and int(d["running"]) > 0
    ]
    total_cycle = sum(float(m["cycle_ms"]) for m in cycles)
    return {
        "status_lines": status,
        "cycle_lines": len(cycles),
        "malformed_lines": malformed[:5],
        "median_ms": median,
        "verify_share": sum(float(m["verify_ms"]) for m in cycles) / total_cycle if total_cycle else None,
        "accepted_tokens": sum(int(m["accepted"]) for m in cycles),
        "proposed_tokens": sum(int(m["proposed"]) for m in cycles),
        "problems": problems,
        "gap_lines": len(with_gap),
        "median_wall_ms": statistics.median(float(m["gap_ms"]) + float(m["cycle_ms"]) for m in with_gap) if with_gap else None,
        "implied_cycle_ms": round(statistics.median(implied), 3) if implied else None,
    }


def _get_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return None


def _generate(base_url: str, max_new_tokens: int) -> dict:
    """One request's completion tokens, client tok/s and SGLang's speculative counts."""
    started = time.perf_counter()
    body = json.dumps(
        {"input_ids": list(range(1, 65)), "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}}
    ).encode()
    request = urllib.request.Request(f"{base_url}/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        meta = json.loads(response.read()).get("meta_info", {})
    tokens = meta.get("completion_tokens")
    return {
        "completion_tokens": tokens,
        "tok_s": round((tokens or 0) / (time.perf_counter() - started), 1),
        "spec_accept_length": meta.get("spec_accept_length"),
        "spec_verify_ct": meta.get("spec_verify_ct"),
    }


def run_server_check(args: argparse.Namespace) -> tuple[dict, list[str]]:
    command = list(args.command)
    host = arg_value(command, "--host") or "127.0.0.1"
    port = arg_value(command, "--port") or "30000"
    base_url = f"http://{host}:{port}"
    log_path = Path(args.log)
    wrapped = [sys.executable, "-m", "speclogs.profile", "--every", str(args.every), "--", *command]
    problems: list[str] = []
    summary: dict = {"command": wrapped, "log": str(log_path)}
    with log_path.open("w") as log:
        server = subprocess.Popen(wrapped, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        started = time.monotonic()
        try:
            while _get_status(f"{base_url}/health") != 200:
                if server.poll() is not None:
                    problems.append(f"server exited with {server.returncode} before /health answered 200")
                    break
                if time.monotonic() - started > args.health_timeout_s:
                    problems.append(f"/health not 200 after {args.health_timeout_s} s")
                    break
                time.sleep(1)
            summary["health_s"] = round(time.monotonic() - started, 1)
            if not problems:
                summary["requests"] = [_generate(base_url, args.max_new_tokens) for _ in range(args.requests)]
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
                try:
                    server.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, signal.SIGKILL)
                    server.wait()
    summary["profiler"] = check_profiler_log(log_path.read_text(errors="replace"), every=args.every)
    return summary, problems + summary["profiler"]["problems"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speclogs.profile.servercheck", description=__doc__.split("\n\n")[1])
    parser.add_argument("--log", required=True, help="where the server's stdout+stderr go")
    parser.add_argument("--every", type=int, default=16)
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--health-timeout-s", type=float, default=600)
    parser.add_argument("--check-only", action="store_true", help="only check an existing --log")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.check_only:
        summary = {"profiler": check_profiler_log(Path(args.log).read_text(errors="replace"), every=args.every)}
        problems = summary["profiler"]["problems"]
    elif not args.command:
        parser.error("give the sglang launch command after --")
    else:
        summary, problems = run_server_check(args)
    print(json.dumps(summary, indent=1))
    print("servercheck: OK" if not problems else f"servercheck: FAILED ({'; '.join(problems)})")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
