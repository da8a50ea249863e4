"""Benchmark: `speclogs report --compare A B --format json` on two generated SGLang logs (default 10 M lines each,
≈ 7 M decode rows per run), wall time and peak RSS of the whole command. Goal (issue 15.4): < 5 s, < 2 GB.

Builds the database the way a user does (benchmarks/gen_sglang_log.py, then `speclogs ingest --run-name A|B`; a few
minutes at 10 M lines — --db keeps it for the next call), then runs the report --repeat times in a fresh process each,
alternating between the --src checkouts (A/B on a noisy machine: the same load for both), checks they print the same
JSON, and prints per checkout the best and median wall time, CPU time and peak RSS. Runs from a clean clone:

    python benchmarks/bench_report.py [--lines 10000000] [--db FILE] [--repeat 3] [--src before=/other/checkout/src]

Measured (2 shared cores; 10 M + 10 M lines, 13,992,583 decode rows; `--repeat 3 --src after=src --src before=…`):
    load average 1.5:  before (main: per-row launch strings, sorted)  wall best 25.2 s, median 26.0 s, CPU 32.8 s,
                                                                      peak RSS 6,114 MB
                       after (integer launch keys, launch chunks)     wall best 4.30 s, median 4.46 s, CPU 5.67 s,
                                                                      peak RSS 1,721 MB
    load average ≈ 3.5 (another job's tests on one core): before 32–42 s, 6.1–6.5 GB; after 5.4–6.6 s, 1.7–1.8 GB.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def build(db: Path, lines: int, work: Path, src: Path) -> float:
    """Generate two logs (seeds 1 and 2) and ingest them as runs A and B; returns the seconds it took."""
    started = time.perf_counter()
    for name, seed in (("A", 1), ("B", 2)):
        log = work / f"{name}.log"
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gen_sglang_log.py"), str(log), "--lines", str(lines),
                        "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, "-m", "speclogs", "ingest", str(log), "--run-name", name, "--db", str(db)],
                       check=True, env=_env(src), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log.unlink()
    return time.perf_counter() - started


def measure(db: Path, src: Path, out: Path) -> tuple[float, float, float]:
    """One `speclogs report --compare A B --format json` in a fresh process: (wall s, CPU s, peak RSS MB)."""
    with out.open("wb") as stdout:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "speclogs", "report", "--db", str(db), "--compare", "A", "B",
                                    "--format", "json"], env=_env(src), stdout=stdout, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        wall_s = time.perf_counter() - started
    stderr = process.stderr.read().decode() if process.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"report failed with {src}:\n{stderr}")
    return wall_s, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # ru_maxrss: KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=10_000_000, help="lines per generated log (default 10 M)")
    parser.add_argument("--db", type=Path, default=None, help="keep the database here; reused when it exists")
    parser.add_argument("--repeat", type=int, default=3, help="report runs per checkout (default 3)")
    parser.add_argument("--src", action="append", default=[], metavar="LABEL=DIR",
                        help="a checkout's src/ to measure (repeatable, alternated); default: this one's")
    parser.add_argument("--target-s", type=float, default=5.0)
    parser.add_argument("--target-mb", type=float, default=2048.0)
    args = parser.parse_args()
    sources = [(label, Path(path).resolve()) for label, _, path in (s.partition("=") for s in args.src)] or [
        ("this", ROOT / "src")]

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db = args.db or work / "bench.duckdb"
        build_note = f"database {db} reused"
        if not db.exists():
            build_note = f"database built in {build(db, args.lines, work, sources[0][1]):.0f} s ({2 * args.lines:,} lines)"
        figures: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in sources}
        digests: dict[str, set[str]] = {label: set() for label, _ in sources}
        for _ in range(args.repeat):
            for label, src in sources:  # alternate: both see the same machine load
                out = work / f"{label}.json"
                figures[label].append(measure(db, src, out))
                digests[label].add(hashlib.sha256(out.read_bytes()).hexdigest())
        rows = int(subprocess.run([sys.executable, "-m", "speclogs", "sql", "SELECT count(*) FROM decode_batches",
                                   "--db", str(db), "--format", "csv"], env=_env(sources[0][1]), check=True,
                                  capture_output=True, text=True).stdout.split()[-1])
    sys.stdout.write(f"speclogs report --compare A B --format json: {rows:,} decode rows; {build_note}; "
                     f"load average {os.getloadavg()[0]:.1f}\n")
    for label, src in sources:
        walls = [f[0] for f in figures[label]]
        sys.stdout.write(
            f"  {label:>8}: wall best {min(walls):.2f} s, median {statistics.median(walls):.2f} s; "
            f"CPU median {statistics.median(f[1] for f in figures[label]):.2f} s; "
            f"peak RSS max {max(f[2] for f in figures[label]):,.0f} MB  ({src})\n")
    same = len(set().union(*digests.values())) == 1
    sys.stdout.write("  JSON output identical across runs and checkouts\n" if same else
                     "  JSON output DIFFERS between runs or checkouts\n")
    first = figures[sources[0][0]]
    ok = min(f[0] for f in first) < args.target_s and max(f[2] for f in first) < args.target_mb
    sys.stdout.write(f"  {sources[0][0]}: {'meets' if ok else 'misses'} the goal "
                     f"(< {args.target_s:g} s, < {args.target_mb:,.0f} MB)\n")
    return 0 if ok and same else 1


if __name__ == "__main__":
    raise SystemExit(main())
