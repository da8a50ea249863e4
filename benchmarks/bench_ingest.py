"""Ingest benchmark: a 2,000,000-line generated SGLang log into a fresh DuckDB file, end to end.

    PYTHONPATH=src python benchmarks/bench_ingest.py [--lines 2000000] [--log /tmp/sglang_2m.log] [--runs 3]
    # before/after on this noisy machine: runs alternate between this tree and another checkout's src/
    git worktree add /tmp/before <rev> && PYTHONPATH=src python benchmarks/bench_ingest.py --against /tmp/before/src
    # the native matcher against the polars-only engine (SPECLOGS_NATIVE=0), runs alternating
    PYTHONPATH=src python benchmarks/bench_ingest.py --polars-too
    # the same log gzipped (LOG.gz, made once): time and peak RSS of a compressed log, e.g. against main
    PYTHONPATH=src python benchmarks/bench_ingest.py --gzip --against /tmp/before/src --no-stages

Generates the log with benchmarks/gen_sglang_log.py when it is missing (plus its .truth.json), then
for each run, in a fresh subprocess (so peak RSS is that run's own): ingest into a new DuckDB file with
speclogs.store.ingest_paths, check counts and sums against truth.json, and print lines/s, MB/s, peak RSS.
Then one staged run in-process prints seconds per stage (read, lines, classify, assemble, insert).
Prints figures; asserts nothing about speed (the machine is shared and noisy: compare min of runs).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "benchmarks" / "gen_sglang_log.py"


def ensure_log(path: Path, lines: int) -> Path:
    truth = Path(str(path) + ".truth.json")
    if path.exists() and truth.exists():
        return truth
    print(f"generating {path} ({lines:,} lines) …", flush=True)
    subprocess.run([sys.executable, str(GENERATOR), str(path), "-n", str(lines)], check=True)
    return truth


def ensure_gzip(log: Path) -> Path:
    packed = Path(str(log) + ".gz")
    if not packed.exists():
        print(f"compressing {log} → {packed} (gzip -6) …", flush=True)
        partial = packed.with_suffix(".gz.partial")
        with open(log, "rb") as source, gzip.open(partial, "wb", compresslevel=6) as target:
            shutil.copyfileobj(source, target, 1 << 20)
        partial.rename(packed)
    return packed


def one_run(log: Path) -> dict:
    """Runs in a child process: ingest end to end into a fresh DuckDB file, then check against truth."""
    import duckdb

    from speclogs.store import ingest_paths

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        usage_before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        summary = ingest_paths([str(log)], db)
        seconds = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime)
        peak_mb = usage.ru_maxrss / 1024
        con = duckdb.connect(str(db), read_only=True)
        q = lambda sql: con.execute(sql).fetchone()  # noqa: E731
        got = {
            "lines": q("SELECT sum(total_lines) FROM files")[0],
            "decode": q("SELECT count(*) FROM decode_batches")[0],
            "prefill": q("SELECT count(*) FROM prefill_batches")[0],
            "access": q("SELECT count(*) FROM http_requests")[0],
            "continuation": q("SELECT sum(continuation_lines) FROM files")[0],
            "n_accept_len": q("SELECT count(accept_len) FROM decode_batches")[0],
            "sum_gen_throughput": str(q("SELECT sum(gen_throughput_tok_s::DECIMAL(18,2)) FROM decode_batches")[0]),
            "sum_input_throughput": str(q("SELECT sum(input_throughput_tok_s::DECIMAL(18,2)) FROM prefill_batches")[0]),
            "sum_num_token": q("SELECT sum(num_tokens) FROM decode_batches")[0],
            "sum_new_token": q("SELECT sum(new_tokens) FROM prefill_batches")[0],
            "sum_status": q("SELECT sum(status) FROM http_requests")[0],
            "errors": q("SELECT count(*) FROM errors")[0],
            "unparsed": q("SELECT sum(unparsed_lines) FROM files")[0],
            "balanced": q("SELECT bool_and(balanced) FROM line_accounting")[0],
        }
        con.close()
        db_mb = db.stat().st_size / 1e6
    return {"seconds": seconds, "cpu_s": cpu_s, "peak_rss_mb": peak_mb, "db_mb": db_mb, "got": got, "summary": summary.to_dict()}


def check(got: dict, truth: dict) -> list[str]:
    kinds = truth["kinds"]
    expected = {
        "lines": truth["lines"],
        "decode": kinds["decode"],
        "prefill": kinds["prefill"],
        "access": kinds["access"],
        "continuation": kinds["continuation"],
        "n_accept_len": truth["n_accept_len"],
        "sum_num_token": truth["sum_num_token"],
        "sum_new_token": truth["sum_new_token"],
        "sum_status": truth["sum_status"],
    }
    problems = [f"{k}: got {got[k]}, truth {v}" for k, v in expected.items() if got[k] != v]
    for key in ("sum_gen_throughput", "sum_input_throughput"):
        if Decimal(got[key]) != Decimal(truth[key]):
            problems.append(f"{key}: got {got[key]}, truth {truth[key]}")
    if not got["balanced"]:
        problems.append("line_accounting: parsed + continuation + unparsed != total")
    return problems


def staged(log: Path) -> dict[str, float]:
    """Seconds per stage of the fast path on the whole file, one stage after the other (in-process, no overlap)."""
    from speclogs.ingest.logfile import DEFAULT_CHUNK_BYTES, _assemble, chunk_bounds

    from speclogs.grammar import load_grammars
    from speclogs.ingest.classify import classify, compile_engine
    from speclogs.ingest.lines import build_lines
    from speclogs.ingest.sources import make_valid_text
    from speclogs.store import _PendingRows, _TableColumns, connect

    stages = dict.fromkeys(("grammars", "read", "lines", "classify", "assemble", "insert"), 0.0)
    t = time.perf_counter()
    engine = compile_engine(load_grammars())
    stages["grammars"] = time.perf_counter() - t
    t = time.perf_counter()
    data, _, _ = make_valid_text(log.read_bytes())
    stages["read"] = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(Path(tmp) / "s.duckdb")
        pending = _PendingRows(con, _TableColumns(con), "bench", str(log))
        con.execute("BEGIN TRANSACTION")
        first, launches = 1, 0
        view = memoryview(data)
        for start, end in chunk_bounds(data, DEFAULT_CHUNK_BYTES):
            t = time.perf_counter()
            lines = build_lines(view[start:end], first)
            stages["lines"] += time.perf_counter() - t
            t = time.perf_counter()
            claims = classify(engine, lines.frame)
            stages["classify"] += time.perf_counter() - t
            t = time.perf_counter()
            chunk = _assemble(engine, lines, claims, launches)
            stages["assemble"] += time.perf_counter() - t
            t = time.perf_counter()
            for table, frame in chunk.tables.items():
                if frame.height:
                    pending.add(table, frame)
            stages["insert"] += time.perf_counter() - t
            first += lines.total_lines
            launches += len(chunk.launch_starts)
        t = time.perf_counter()
        pending.flush_all()
        con.execute("COMMIT")
        stages["insert"] += time.perf_counter() - t
        con.close()
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--log", type=Path, default=Path("/tmp/sglang_2m.log"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-stages", action="store_true")
    parser.add_argument("--against", type=Path, help="another checkout's src/ directory: runs alternate with it (A/B)")
    parser.add_argument("--polars-too", action="store_true", help="alternate with runs of the polars-only engine (SPECLOGS_NATIVE=0)")
    parser.add_argument("--gzip", action="store_true", help="ingest LOG.gz (gzip -6 of LOG, made when missing) instead of LOG")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.log)))
        return
    truth_path = ensure_log(args.log, args.lines)
    truth = json.loads(truth_path.read_text())
    size_mb = args.log.stat().st_size / 1e6
    ingested = ensure_gzip(args.log) if args.gzip else args.log
    from speclogs.ingest import native

    engine = native.unavailable_reason() or "native matcher"
    packed = f", ingested as {ingested} ({ingested.stat().st_size / 1e6:,.1f} MB)" if args.gzip else ""
    print(f"log: {args.log} — {truth['lines']:,} lines, {size_mb:,.1f} MB{packed}; {os.cpu_count()} CPUs; engine: {engine}")
    variants = {"this tree": (ROOT / "src", {})}
    if args.against:
        variants[f"against {args.against}"] = (args.against, {})
    if args.polars_too:
        variants["polars only"] = (ROOT / "src", {native.ENV_SWITCH: "0"})
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for run in range(args.runs):
        for name, (src, extra_env) in variants.items():
            env = dict(os.environ, PYTHONPATH=str(src) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra_env)
            out = subprocess.run(
                [sys.executable, __file__, "--child", "--log", str(ingested)], env=env, check=True, capture_output=True, text=True
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            results[name].append(result)
            problems = check(result["got"], truth)
            lines_s = truth["lines"] / result["seconds"]
            print(
                f"run {run + 1}{f' ({name})' if len(variants) > 1 else ''}: {result['seconds']:.2f} s  {lines_s:,.0f} lines/s  "
                f"{size_mb / result['seconds']:,.1f} MB/s  CPU {result['cpu_s']:.1f} s ({result['cpu_s'] / result['seconds']:.2f} cores)  "
                f"peak RSS {result['peak_rss_mb']:,.0f} MB ({result['peak_rss_mb'] / size_mb:.1f}× file)  "
                f"DuckDB file {result['db_mb']:,.0f} MB  "
                + ("truth: OK" if not problems else "truth MISMATCH: " + "; ".join(problems))
            )
    for name, runs in results.items():
        seconds = sorted(r["seconds"] for r in runs)
        best, median = seconds[0], seconds[len(seconds) // 2]
        print(
            f"{name + ': ' if len(variants) > 1 else ''}min {best:.2f} s = {truth['lines'] / best:,.0f} lines/s "
            f"({size_mb / best:,.1f} MB/s); "
            f"median {median:.2f} s = {truth['lines'] / median:,.0f} lines/s; min CPU {min(r['cpu_s'] for r in runs):.1f} s; "
            f"max peak RSS {max(r['peak_rss_mb'] for r in runs):,.0f} MB"
        )
    this = sorted(r["seconds"] for r in results["this tree"])
    for name, runs in list(results.items())[1:]:
        other = sorted(r["seconds"] for r in runs)
        print(f"this tree is {other[len(other) // 2] / this[len(this) // 2]:.2f}× as fast as {name} (ratio of medians)")
    load = os.getloadavg()[0]
    print(f"load average now {load:.2f} on {os.cpu_count()} CPUs (other processes share the machine when this is above ~1)")
    print("checked against truth.json: " + ", ".join(f"{k}={v}" for k, v in results["this tree"][0]["got"].items()))
    if not args.no_stages:
        stages = staged(args.log)
        print("stages (in-process, fast path): " + ", ".join(f"{k} {v:.2f} s" for k, v in stages.items()))


if __name__ == "__main__":
    main()
