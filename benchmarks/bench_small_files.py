"""Small-files benchmark: a directory of 2,000 server logs of 500 lines each against the same bytes as one file.

    PYTHONPATH=src python benchmarks/bench_small_files.py [--files 2000] [--lines-per-file 500] [--runs 3]
    # before/after: runs alternate between this tree and another checkout's src/ (both sides, both inputs)
    PYTHONPATH=src python benchmarks/bench_small_files.py --against /tmp/before/src
    # where the directory's time goes (cProfile of one ingest_paths call, in-process)
    PYTHONPATH=src python benchmarks/bench_small_files.py --profile

The logs come from benchmarks/gen_sglang_log.py with `--run-lines 500`: every server run is 500 lines and starts,
as a real server log does, with its server_args line, so the generated log cuts into 2,000 logs at those lines
(each its own run, with its own random seed, throughput and request ids: no two have the same content, so none is
skipped as a copy). `one/all.log` is their concatenation, the same bytes. Each run ingests the directory, then the
one file, each into a fresh DuckDB file in a fresh process (peak RSS is that ingest's own), checks both hold the same
number of lines, decode, prefill and access rows as the generator's truth.json, and prints seconds, lines/s and the
ratio directory / one file (issue 15's target: ≤ 2×). Prints figures; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import one_run  # noqa: E402  (the same child-process ingest and counts)

GENERATOR = ROOT / "benchmarks" / "gen_sglang_log.py"


def ensure_logs(where: Path, files: int, lines_per_file: int) -> tuple[Path, Path, dict]:
    """(directory of the small logs, the one file, truth.json of the whole), generated when missing."""
    small, one = where / "files", where / "one" / "all.log"
    truth_path = Path(str(one) + ".truth.json")
    if truth_path.exists() and small.is_dir() and len(list(small.iterdir())) == files:
        return small, one, json.loads(truth_path.read_text())
    print(f"generating {files:,} logs of {lines_per_file:,} lines under {where} …", flush=True)
    one.parent.mkdir(parents=True, exist_ok=True)
    small.mkdir(parents=True, exist_ok=True)
    for old in small.iterdir():
        old.unlink()
    subprocess.run([sys.executable, str(GENERATOR), str(one), "-n", str(files * lines_per_file), "--run-lines", str(lines_per_file)],
                   check=True, stdout=subprocess.DEVNULL)
    data = one.read_bytes()
    starts = []
    at = 0 if b"server_args=" in data[: data.find(b"\n")] else -1
    while at >= 0:
        starts.append(at)
        found = data.find(b"server_args=", data.find(b"\n", at) + 1)
        at = data.rfind(b"\n", 0, found) + 1 if found >= 0 else -1
    if len(starts) != files:
        raise SystemExit(f"the generated log has {len(starts)} server starts, not {files}")
    width = len(str(files))
    for number, (start, end) in enumerate(zip(starts, starts[1:] + [len(data)]), 1):
        (small / f"server_{number:0{width}d}.log").write_bytes(data[start:end])
    pieces = b"".join(path.read_bytes() for path in sorted(small.iterdir()))
    if pieces != data:
        raise SystemExit("the small logs are not the one file cut in pieces")
    return small, one, json.loads(truth_path.read_text())


def problems(got: dict, truth: dict, files: int) -> list[str]:
    kinds = truth["kinds"]
    expected = {"lines": truth["lines"], "decode": kinds["decode"], "prefill": kinds["prefill"], "access": kinds["access"],
                "launches": files}
    return [f"{key}: got {got[key]}, truth {value}" for key, value in expected.items() if got[key] != value]


def profile(path: Path, top: int) -> None:
    import cProfile
    import pstats

    from speclogs.store import ingest_paths

    with tempfile.TemporaryDirectory() as tmp:
        profiler = cProfile.Profile()
        profiler.enable()
        ingest_paths([str(path)], Path(tmp) / "profile.duckdb")
        profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--lines-per-file", type=int, default=500)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "speclogs_small_files")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout's src/ directory: runs alternate with it (A/B)")
    parser.add_argument("--profile", action="store_true", help="cProfile one ingest of the directory (in-process) instead")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.child)))
        return
    small, one, truth = ensure_logs(args.dir / f"{args.files}x{args.lines_per_file}", args.files, args.lines_per_file)
    size_mb = one.stat().st_size / 1e6
    if args.profile:
        profile(small, 40)
        return
    print(f"{args.files:,} logs of {args.lines_per_file:,} lines in {small} against {one}: {truth['lines']:,} lines, "
          f"{size_mb:,.1f} MB either way; {os.cpu_count()} CPUs")
    sides = {"this tree": ROOT / "src"}
    if args.against:
        sides[f"against {args.against}"] = args.against
    seconds: dict[tuple[str, str], list[float]] = {}
    for run in range(args.runs):
        for side, src in sides.items():
            for label, path in (("directory", small), ("one file", one)):
                env = dict(os.environ, PYTHONPATH=str(src) + os.pathsep + os.environ.get("PYTHONPATH", ""))
                out = subprocess.run([sys.executable, __file__, "--child", str(path)], env=env, check=True,
                                     capture_output=True, text=True)
                result = json.loads(out.stdout.strip().splitlines()[-1])
                seconds.setdefault((side, label), []).append(result["seconds"])
                wrong = problems(result["got"], truth, args.files)  # a server start per small log, in either
                if label == "directory" and result["got"]["files"] != args.files:
                    skipped = result["summary"]["files_skipped"]
                    wrong.append(f"files: got {result['got']['files']}, wanted {args.files} (skipped: {skipped})")
                print(f"run {run + 1}{f' ({side})' if len(sides) > 1 else ''} {label:9s}: {result['seconds']:6.2f} s  "
                      f"{truth['lines'] / result['seconds']:>9,.0f} lines/s  CPU {result['cpu_s']:.1f} s  "
                      f"peak RSS {result['peak_rss_mb']:,.0f} MB  " + ("truth: OK" if not wrong else "MISMATCH: " + "; ".join(wrong)),
                      flush=True)
    for side in sides:
        small_s, one_s = seconds[(side, "directory")], seconds[(side, "one file")]
        print(f"{side}: directory median {median(small_s):.2f} s (min {min(small_s):.2f}) = {truth['lines'] / median(small_s):,.0f} "
              f"lines/s; one file median {median(one_s):.2f} s (min {min(one_s):.2f}) = {truth['lines'] / median(one_s):,.0f} lines/s; "
              f"directory / one file = {median(small_s) / median(one_s):.2f}× (medians), {min(small_s) / min(one_s):.2f}× (mins)")
    print(f"load average now {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
