"""Scale benchmark: how ingest time and memory grow with the number of files and the size of the database, each
figure next to its anchor (DuckDB SQL over a glob, `find -newer`, the one-file time).

    python benchmarks/bench_scale.py [--lines 2000000] [--runs 3] [--work /tmp/speclogs_scale] [--big 15]
    python benchmarks/bench_scale.py --against /tmp/before/src     # A/B: every measurement alternates the two trees

One generated log (benchmarks/gen_sglang_log.py) is cut, with `split`, into 8 rank files, 2,000 files and 20,000 files
of the same lines; copies of it concatenated make the 10M- and 30M-line logs (`--big` copies). Each ingest runs the CLI
(`python -m speclogs ingest … --format json`) in a fresh process into a fresh DuckDB file and is timed with its own
peak RSS (os.wait4). It prints:
- files: seconds for 1 / 8 / 2,000 / 20,000 files and each as a multiple of the one-file time, next to DuckDB SQL
  reading the same files by glob and extracting the Decode batch fields with one regex;
- re-ingest: the second ingest of the unchanged 2M-line file and 20,000-file folder, next to `find DIR -newer STAMP`;
- growth: one new 2,000-line file into the database that holds the big log;
- memory: peak RSS of the 2M, 10M and big-log ingests, and of the 2M log read from stdin.
Prints figures; asserts nothing (the machine may be shared: compare alternating runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DECODE_REGEX = (r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\] Decode batch[.,] #running-req: (\d+), #token: (\d+), "
                r"token usage: ([\d.]+),.*gen throughput \(token/s\): ([\d.]+)")


def timed(command: list[str], env: dict, stdin_path: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one child process; a failure stops the benchmark with its stderr."""
    started = time.perf_counter()
    with open(stdin_path, "rb") if stdin_path else open(os.devnull, "rb") as stdin:
        child = subprocess.Popen(command, env=env, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        stderr = child.stderr.read().decode(errors="replace")
        child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(command)}\n{stderr[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def ingest(src: Path, path: str, db: Path, stdin_path: Path | None = None) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(src))
    return timed([sys.executable, "-m", "speclogs", "ingest", path, "--db", str(db), "--format", "json"], env, stdin_path)


def duckdb_glob(pattern: str, db: Path) -> tuple[float, float]:
    """The anchor: what a user writes with DuckDB alone to get the Decode batch numbers out of the same files."""
    code = f"""
import duckdb
con = duckdb.connect({str(db)!r})
con.execute('''CREATE TABLE decode AS SELECT regexp_extract(line, {DECODE_REGEX!r}, ['ts', 'running', 'tokens', 'usage',
    'gen']) AS m FROM read_csv({pattern!r}, columns={{'line': 'VARCHAR'}}, delim='\\x01', quote='', escape='', header=false)
    WHERE contains(line, 'Decode batch')''')
"""
    return timed([sys.executable, "-c", code], dict(os.environ))


def find_newer(folder: Path, stamp: Path) -> tuple[float, float]:
    return timed(["find", str(folder), "-newer", str(stamp)], dict(os.environ))


def prepare(work: Path, lines: int, big: int) -> dict[str, Path]:
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"log_{lines}.log"
    if not log.exists():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gen_sglang_log.py"), str(log), "-n", str(lines)],
                       check=True, stdout=subprocess.DEVNULL)
    paths = {"1": log}
    for name, how in (("8", ["-n", "l/8"]), ("2000", ["-l", str(lines // 2000)]), ("20000", ["-l", str(lines // 20000)])):
        folder = work / f"split_{name}"
        if not folder.exists():
            folder.mkdir()
            subprocess.run(["split", *how, "-a", "5", "-d", "--additional-suffix=.log", str(log), str(folder / "part_")],
                           check=True)
        paths[name] = folder
    for copies in (5, big):
        many = work / f"log_x{copies}.log"
        if not many.exists():
            with open(many, "wb") as out:
                for _ in range(copies):
                    with open(log, "rb") as part:
                        shutil.copyfileobj(part, out, 1 << 24)
        paths[f"x{copies}"] = many
    new = work / "new_2000.log"
    if not new.exists():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gen_sglang_log.py"), str(new), "-n", "2000",
                        "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    paths["new"] = new
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--big", type=int, default=15, help="copies of the log in the big log (15: 30M lines)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "speclogs_scale")
    parser.add_argument("--against", type=Path, help="another checkout's src/ directory: runs alternate with it (A/B)")
    parser.add_argument("--only", nargs="*", default=["files", "reingest", "growth", "memory"])
    args = parser.parse_args()
    trees = {"this": ROOT / "src"} | ({"other": args.against.resolve()} if args.against else {})
    paths = prepare(args.work, args.lines, args.big)
    scratch = Path(tempfile.mkdtemp(prefix="bench_scale_", dir=args.work))
    results: dict[tuple[str, str], list[float]] = {}

    def note(tree: str, what: str, value: float) -> None:
        results.setdefault((tree, what), []).append(value)

    for run in range(args.runs):
        for tree, src in trees.items():
            if "files" in args.only:
                for name in ("1", "8", "2000", "20000"):
                    db = scratch / f"{tree}_{name}_{run}.duckdb"
                    seconds, _ = ingest(src, str(paths[name]), db)
                    note(tree, f"files {name}", seconds)
                    if name == "20000" and "reingest" in args.only:
                        note(tree, "reingest 20000 files", ingest(src, str(paths[name]), db)[0])
                    db.unlink()
                    if tree == "this":
                        pattern = str(paths[name] / "*.log") if name != "1" else str(paths[name])
                        glob_db = scratch / f"glob_{name}.duckdb"
                        note("duckdb", f"files {name}", duckdb_glob(pattern, glob_db)[0])
                        glob_db.unlink()
            if "reingest" in args.only:
                db = scratch / f"{tree}_re_{run}.duckdb"
                ingest(src, str(paths["1"]), db)
                note(tree, "reingest 2M file", ingest(src, str(paths["1"]), db)[0])
                db.unlink()
                if tree == "this":
                    stamp = scratch / "stamp"
                    stamp.touch()
                    note("find", "reingest 20000 files", find_newer(paths["20000"], stamp)[0])
            if "memory" in args.only:
                for name in ("1", "x5"):
                    db = scratch / f"{tree}_mem_{name}.duckdb"
                    note(tree, f"rss {name}", ingest(src, str(paths[name]), db)[1])
                    db.unlink()
                db = scratch / f"{tree}_stdin.duckdb"
                note(tree, "rss stdin", ingest(src, "-", db, stdin_path=paths["1"])[1])
                db.unlink()
        if "growth" in args.only and run == 0:
            for tree, src in trees.items():
                db = scratch / f"{tree}_big.duckdb"
                seconds, rss = ingest(src, str(paths[f"x{args.big}"]), db)
                note(tree, f"big ingest x{args.big}", seconds)
                note(tree, f"rss x{args.big}", rss)
                for copy in range(args.runs):
                    new = scratch / f"new_{copy}.log"
                    shutil.copy(paths["new"], new)
                    with open(new, "a") as out:  # a distinct file each time, or it is skipped as already ingested
                        out.write(f"[2026-02-26 23:59:59] speclogs bench copy {copy}\n")
                    note(tree, "new 2000-line file into big db", ingest(src, str(new), db)[0])
                db.unlink()
        print(f"run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)

    print(f"{'tree':8} {'measurement':36} {'median':>9} {'min':>9}  values")
    for (tree, what), values in sorted(results.items(), key=lambda item: (item[0][1], item[0][0])):
        print(f"{tree:8} {what:36} {statistics.median(values):9.3f} {min(values):9.3f}  "
              + " ".join(f"{v:.3f}" for v in values))
    for tree in trees:
        one = results.get((tree, "files 1"))
        if one:
            ratios = {name: statistics.median(results[(tree, f"files {name}")]) / statistics.median(one)
                      for name in ("8", "2000", "20000")}
            print(f"{tree}: files / one file: " + ", ".join(f"{k}: {v:.2f}x" for k, v in ratios.items()))
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
