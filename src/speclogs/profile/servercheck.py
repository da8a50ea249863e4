"""`python -m speclogs.profile.servercheck --log server.log [--every N]`

Checks what the profiler wrote into a real server's log (a run of `speclogs launch` with `profile = true`): one
`active` line and no `disabled` one, well-formed `spec_cycle` lines from TP rank 0 at multiples of N whose phases add
up, and the median wall time per cycle beside the one the `Decode batch` lines imply. Prints a JSON summary and
`servercheck: OK` (exit 0) or `servercheck: FAILED …` (exit 1). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

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
    numbers = [int(m["cycle"]) for m in cycles]
    active = [s for s in status if (m := STATUS_RE.search(s)) and m["status"] == "active"]
    unsummed = [m for m in cycles if abs(sum(float(m[p]) for p in PHASES[:4]) - float(m["cycle_ms"])) > 0.0015]
    problems = [problem for failed, problem in (
        (len(active) != 1, f"expected one `speclogs profiler: active` line, found {len(active)}"),
        (any("disabled" in s for s in status), "a `speclogs profiler: disabled` line is present"),
        (not cycles, "no `speclogs spec_cycle` line"),
        (malformed, f"{len(malformed)} malformed spec_cycle line(s)"),
        (numbers != sorted(numbers) or any(n % every for n in numbers), f"cycle numbers are not increasing multiples of {every}"),
        (any("TP" in m["prefix"] and "TP0" not in m["prefix"] for m in cycles), "spec_cycle lines from a TP rank other than 0"),
        (unsummed, f"phases do not add up to cycle_ms: {unsummed[0].string.strip()}" if unsummed else ""),
    ) if failed]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speclogs.profile.servercheck", description=__doc__.split("\n\n")[1])
    parser.add_argument("--log", required=True, help="a profiled server's log")
    parser.add_argument("--every", type=int, default=16, help="the --every the server was profiled with")
    args = parser.parse_args(argv)
    check = check_profiler_log(Path(args.log).read_text(errors="replace"), every=args.every)
    print(json.dumps(check, indent=1))
    print("servercheck: OK" if not check["problems"] else f"servercheck: FAILED ({'; '.join(check['problems'])})")
    return 0 if not check["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
