"""Re-ingest of unchanged inputs: one big log and a directory of many small files, each ingested once into its own
fresh database, then ingested again (nothing changed) a few times through the CLI, wall time each.

    PYTHONPATH=src python benchmarks/bench_reingest.py LOG DIR [--runs 3] [--src OTHER/src]

LOG e.g. /tmp/sglang_2m.log (benchmarks/gen_sglang_log.py), DIR e.g. the same log split into 20,000 files
(`split -l 100 -a 5 -d --additional-suffix=.log LOG DIR/part_`). `--src` runs another checkout's code (before/after).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def ingest(path: Path, db: Path, env: dict, *extra: str) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "speclogs", "ingest", str(path), "--db", str(db), "--json", *extra],
                          env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ingest failed: {done.stderr}")
    return seconds, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", type=Path, nargs="+")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(args.src))
    with tempfile.TemporaryDirectory() as tmp:
        for index, path in enumerate(args.paths):
            db = Path(tmp) / f"{index}.duckdb"
            first, summary = ingest(path, db, env)
            print(f"{path}: first ingest {first:.2f} s ({summary['files_ingested']:,} files)", flush=True)
            times = []
            for _ in range(args.runs):
                seconds, summary = ingest(path, db, env)
                times.append(seconds)
            print(f"{path}: unchanged re-ingest {', '.join(f'{t:.2f}' for t in times)} s (CLI wall; in-call "
                  f"{summary['seconds']:.2f} s; {summary['files_unchanged']:,} unchanged)", flush=True)


if __name__ == "__main__":
    main()
