"""Lake benchmark: 200 generated SGLang logs of 10,000 lines (2M lines) ingested into a lake in one process vs on a
local Ray cluster (and into the DuckDB file, for reference); then a typical report over 100 runs, and a SQL
aggregate over all 200, on the lake vs the DuckDB file.

    PYTHONPATH=src python benchmarks/bench_lake.py [--files 200] [--lines 10000] [--dir /tmp/speclogs-lake-bench]
                                                   [--runs 2] [--ray-cpus 2]

Logs are generated once into --dir with benchmarks/gen_sglang_log.py (run_000.log …, seeds 0 …). Each ingest runs
in a fresh subprocess into a new target, the variants alternating (A B C A B C …) so that the machine's noise falls
on all of them alike; every figure of every run is printed, then the minimum per variant. The Ray variant starts its
cluster first and times it apart ('cluster start'); the ingest time then includes the two rounds of tasks and the
commit. Query timings alternate the same way, on connections opened once. Prints figures; asserts only that the
lake and the DuckDB file hold the same number of rows.
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

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "benchmarks" / "gen_sglang_log.py"
VARIANTS = ("lake, 1 process", "lake, Ray local", "DuckDB file")
ARMS = ["a=run_0[0-4]?", "b=run_0[5-9]?"]   # runs 000–049 vs 050–099: a report over 100 runs
SMALL_ARMS = ["a=run_00?", "b=run_01?"]      # fewer than 100 files: runs 000–009 vs 010–019
AGGREGATE = ("SELECT r.run_name, median(d.gen_throughput_tok_s), avg(d.accept_len), count(*) FROM decode_batches d "
             "JOIN runs r USING (run_id) GROUP BY 1 ORDER BY 1")


def ensure_logs(folder: Path, files: int, lines: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"run_{index:03d}.log" for index in range(files)]
    missing = [(index, path) for index, path in enumerate(paths) if not path.exists()]
    if missing:
        print(f"generating {len(missing)} logs of {lines:,} lines in {folder} …", flush=True)
    for index, path in missing:
        subprocess.run([sys.executable, str(GENERATOR), str(path), "-n", str(lines), "--seed", str(index)], check=True,
                       stdout=subprocess.DEVNULL)
        Path(str(path) + ".truth.json").unlink(missing_ok=True)
    return paths


def child(variant: str, source: str, target: str, ray_cpus: int) -> None:
    """One ingest, in this (fresh) process; prints its figures as one JSON line."""
    figures: dict = {"variant": variant}
    if variant == "lake, Ray local":
        import ray

        started = time.perf_counter()
        ray.init(address="local", num_cpus=ray_cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        figures["cluster_start_s"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    if variant == "DuckDB file":
        from speclogs.store import ingest_paths

        summary = ingest_paths([source], target)
    else:
        from speclogs.store.lake import ingest_lake

        summary = ingest_lake([source], target, ray="auto" if variant == "lake, Ray local" else None)
    figures["ingest_s"] = round(time.perf_counter() - started, 2)
    figures["lines"] = summary.account.total_lines
    figures["files"] = summary.files_ingested
    figures["lines_per_s"] = round(summary.account.total_lines / figures["ingest_s"])
    import resource

    figures["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    figures["bytes_on_disk"] = sum(p.stat().st_size for p in Path(target).rglob("*") if p.is_file()) if Path(target).is_dir() \
        else Path(target).stat().st_size
    print(json.dumps(figures), flush=True)


def time_queries(db: Path, lake: Path, runs: int, arms: list[str]) -> None:
    from speclogs.analysis import compare_runs
    from speclogs.store import connect
    from speclogs.store.lake import connect_lake

    connections = {"DuckDB file": connect(db, read_only=True), "lake": connect_lake(lake)}
    rows = {name: c.execute("SELECT count(*) FROM decode_batches").fetchone()[0] for name, c in connections.items()}
    assert rows["DuckDB file"] == rows["lake"], rows
    timings: dict[tuple[str, str], list[float]] = {}
    for _ in range(runs + 1):  # the first round warms the page cache and is not counted
        for name, connection in connections.items():
            started = time.perf_counter()
            comparison = compare_runs(connection, arms, {}, 0.95)
            timings.setdefault((f"report ({' vs '.join(arms)})", name), []).append(time.perf_counter() - started)
            started = time.perf_counter()
            connection.execute(AGGREGATE).fetchall()
            timings.setdefault(("SQL: median/avg per run, all runs", name), []).append(time.perf_counter() - started)
    assert comparison.comparisons
    print(f"\nqueries ({rows['lake']:,} decode rows; first round not counted)")
    for (what, name), values in timings.items():
        counted = values[1:]
        print(f"  {what:<36} {name:<12} " + "  ".join(f"{v:.3f}" for v in counted) + f"   min {min(counted):.3f} s")
    for connection in connections.values():
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "speclogs-lake-bench")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--ray-cpus", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "SOURCE", "TARGET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.ray_cpus)
        return
    logs = ensure_logs(args.dir / "logs", args.files, args.lines)
    size = sum(path.stat().st_size for path in logs)
    print(f"{len(logs)} logs, {args.lines:,} lines each, {size / 1e6:,.0f} MB; {os.cpu_count()} CPUs; "
          f"Ray local with {args.ray_cpus} CPUs")
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        kept = {}
        for run in range(args.runs):
            for variant in VARIANTS:
                target = Path(work) / f"{run}-{variant.replace(' ', '_').replace(',', '')}"
                target = target.with_suffix(".duckdb") if variant == "DuckDB file" else target
                env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
                done = subprocess.run([sys.executable, __file__, "--ray-cpus", str(args.ray_cpus), "--child", variant,
                                       str(args.dir / "logs"), str(target)], capture_output=True, text=True, env=env)
                if done.returncode != 0:
                    raise SystemExit(f"{variant} failed:\n{done.stderr[-3000:]}")
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                results.setdefault(variant, []).append(figures)
                print(f"  run {run + 1} {variant:<16} " + ", ".join(f"{k} {v}" for k, v in figures.items() if k != "variant"),
                      flush=True)
                kept[variant] = target
        print("\ningest, min over runs")
        for variant, runs in results.items():
            best = min(runs, key=lambda f: f["ingest_s"])
            extra = f" (+ cluster start {best['cluster_start_s']} s)" if "cluster_start_s" in best else ""
            print(f"  {variant:<16} {best['ingest_s']:6.2f} s{extra}  {best['lines_per_s']:>9,} lines/s  "
                  f"{best['bytes_on_disk'] / 1e6:6.1f} MB on disk  peak RSS {best['peak_rss_mb']} MB")
        time_queries(kept["DuckDB file"], kept["lake, 1 process"], args.runs, ARMS if args.files >= 100 else SMALL_ARMS)


if __name__ == "__main__":
    main()
