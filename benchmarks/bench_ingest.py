"""Ingest benchmark: a 2,000,000-line generated SGLang log into a fresh DuckDB file, end to end, next to a
hand-written polars regex → DuckDB pipeline over the same file.

    PYTHONPATH=src python benchmarks/bench_ingest.py [--lines 2000000] [--log /tmp/sglang_2m.log] [--runs 3]
    # before/after on this noisy machine: runs alternate between this tree and another checkout's src/
    git worktree add /tmp/before <rev> && PYTHONPATH=src python benchmarks/bench_ingest.py --against /tmp/before/src
    # the same log gzipped (LOG.gz, made once): time and peak RSS of a compressed log, e.g. against main
    PYTHONPATH=src python benchmarks/bench_ingest.py --gzip --against /tmp/before/src --no-stages

Generates the log with benchmarks/gen_sglang_log.py when it is missing (plus its .truth.json), then for each run, in
a fresh subprocess (so peak RSS is that run's own), one after the other:
- speclogs: ingest into a new DuckDB file with speclogs.store.ingest_paths (the modules an ingest loads imported
  before the clock starts, as speclogs.store itself imported them at 8dc0c7a), check counts and sums against truth.json;
- hand-written: what a user would write with polars and DuckDB alone (`handwritten()`): scan the lines with
  scan_csv (a separator that never occurs), pull the Decode batch, Prefill batch and uvicorn access lines out with
  one `str.extract_groups` regex each (gated by `str.contains`), cast, CREATE TABLE AS from the Arrow frames; its
  counts and sums are checked too.
It prints lines/s, MB/s, CPU and peak RSS of each run, the medians, and speclogs' time as a multiple of the
hand-written pipeline's (issue 15's target: ≤ 1.0×; speclogs also reads every other line, keeps the ones no grammar
matches, and accounts for each line). Then one staged run in-process prints seconds per stage. Prints figures;
asserts nothing about speed (the machine is shared and noisy: compare medians or mins of alternating runs).
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


# What an ingest imports, imported before the clock starts: speclogs.store loads these only when an ingest begins (a
# `speclogs sql` start does not pay them), 8dc0c7a loaded them with it. The process's whole time, imports included, is
# a separate figure (the CLI's). The grammar loader (and tomllib) load with the first grammar file read, numpy.ma with
# the first Series polars makes from a numpy array (~20 ms together, found by comparing sys.modules before and after
# an ingest: tests/test_bench_scripts.py keeps the list complete).
LOADED_BEFORE = ("speclogs.ingest.pipeline", "speclogs.ingest.sources", "speclogs.store.writer", "speclogs.grammar",
                 "speclogs.ingest.classify", "speclogs.grammar.loader", "numpy.ma")


def one_run(log: Path) -> dict:
    """Runs in a child process: ingest `log` (a file or a directory) end to end into a fresh DuckDB file; its counts
    and sums (compared with truth.json by the caller), seconds, CPU and peak RSS."""
    import importlib

    import duckdb

    from speclogs.store import ingest_paths

    for module in LOADED_BEFORE:  # (a tree without one of them loaded it with speclogs.store)
        try:
            importlib.import_module(module)
        except ImportError:
            pass
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
            "files": q("SELECT count(*) FROM files")[0],
            "launches": q("SELECT count(*) FROM launches")[0],
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
    """What `got` says that truth.json contradicts (only the figures `got` holds)."""
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
    problems = [f"{k}: got {got[k]}, truth {v}" for k, v in expected.items() if k in got and got[k] != v]
    for key in ("sum_gen_throughput", "sum_input_throughput"):
        if key in got and Decimal(got[key]) != Decimal(truth[key]):
            problems.append(f"{key}: got {got[key]}, truth {truth[key]}")
    if "balanced" in got and not got["balanced"]:
        problems.append("line_accounting: parsed + continuation + unparsed != total")
    return problems


# The hand-written pipeline: SGLang 0.5.x's scheduler lines as the generator writes them (the decode line with and
# without speculative decoding's accept len / accept rate), and uvicorn's access line.
_HEAD = r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?: (?P<rank_tags>(?:[A-Z]+\d+ ?)+))?\] "
DECODE_RE = (
    _HEAD + r"Decode batch[.,] #running-req: (?P<running_req>\d+), #token: (?P<num_tokens>\d+), "
    r"token usage: (?P<token_usage>\d+\.\d+), (?:accept len: (?P<accept_len>\d+\.\d+), "
    r"accept rate: (?P<accept_rate>\d+\.\d+), )?cuda graph: (?P<cuda_graph>True|False), "
    r"gen throughput \(token/s\): (?P<gen_throughput_tok_s>\d+\.\d+), #queue-req: (?P<queue_req>\d+)$"
)
PREFILL_RE = (
    _HEAD + r"Prefill batch[.,] #new-seq: (?P<new_seqs>\d+), #new-token: (?P<new_tokens>\d+), "
    r"#cached-token: (?P<cached_tokens>\d+), token usage: (?P<token_usage>\d+\.\d+), "
    r"#running-req: (?P<running_req>\d+), #queue-req: (?P<queue_req>\d+), "
    r"input throughput \(token/s\): (?P<input_throughput_tok_s>\d+\.\d+), cuda graph: (?P<cuda_graph>True|False)$"
)
ACCESS_RE = (
    _HEAD + r'INFO: +(?P<client_ip>[0-9a-fA-F.:]+):(?P<client_port>\d+) - "(?P<method>[A-Z]+) (?P<path>\S+) '
    r'HTTP/(?P<http_version>[\d.]+)" (?P<status>\d{3}) (?P<status_text>.*)$'
)
HANDWRITTEN = {  # table: (gate, regex, {column: dtype}) — the columns not named stay text
    "decode_batches": ("Decode batch", DECODE_RE, {
        "running_req": "int", "num_tokens": "int", "token_usage": "float", "accept_len": "float", "accept_rate": "float",
        "cuda_graph": "bool", "gen_throughput_tok_s": "float", "queue_req": "int"}),
    "prefill_batches": ("Prefill batch", PREFILL_RE, {
        "new_seqs": "int", "new_tokens": "int", "cached_tokens": "int", "token_usage": "float", "running_req": "int",
        "queue_req": "int", "input_throughput_tok_s": "float", "cuda_graph": "bool"}),
    "http_requests": (' HTTP/', ACCESS_RE, {"client_port": "int", "status": "int"}),
}


def handwritten(log: Path, db: Path) -> None:
    """The straightforward polars + DuckDB pipeline a user would write for the three busiest line kinds."""
    import duckdb
    import polars as pl

    cast = {"int": lambda c: pl.col(c).cast(pl.Int64), "float": lambda c: pl.col(c).cast(pl.Float64),
            "bool": lambda c: pl.col(c) == "True"}
    lines = (pl.scan_csv(log, has_header=False, separator="\x01", quote_char=None, new_columns=["line"],
                         infer_schema=False)
             .with_row_index("line_no", offset=1))
    queries = []
    for gate, regex, types in HANDWRITTEN.values():
        queries.append(
            lines.filter(pl.col("line").str.contains(gate, literal=True))
            .select("line_no", pl.col("line").str.extract_groups(regex).alias("m"))
            .unnest("m")
            .filter(pl.col("ts").is_not_null())
            .with_columns(pl.col("ts").str.to_datetime("%Y-%m-%d %H:%M:%S"), *(cast[kind](c) for c, kind in types.items()))
        )
    frames = pl.collect_all(queries)  # one scan of the file for the three tables, in parallel
    con = duckdb.connect(str(db))
    for table, frame in zip(HANDWRITTEN, frames):
        con.register("frame", frame.__arrow_c_stream__())
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM frame")
        con.unregister("frame")
    con.close()


def handwritten_run(log: Path) -> dict:
    """Runs in a child process: the hand-written pipeline into a fresh DuckDB file, then its counts and sums."""
    import duckdb

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "handwritten.duckdb"
        usage_before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        handwritten(log, db)
        seconds = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_SELF)
        con = duckdb.connect(str(db), read_only=True)
        q = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        got = {
            "decode": q("SELECT count(*) FROM decode_batches"),
            "prefill": q("SELECT count(*) FROM prefill_batches"),
            "access": q("SELECT count(*) FROM http_requests"),
            "n_accept_len": q("SELECT count(accept_len) FROM decode_batches"),
            "sum_gen_throughput": str(q("SELECT sum(gen_throughput_tok_s::DECIMAL(18,2)) FROM decode_batches")),
            "sum_input_throughput": str(q("SELECT sum(input_throughput_tok_s::DECIMAL(18,2)) FROM prefill_batches")),
            "sum_num_token": q("SELECT sum(num_tokens) FROM decode_batches"),
            "sum_new_token": q("SELECT sum(new_tokens) FROM prefill_batches"),
            "sum_status": q("SELECT sum(status) FROM http_requests"),
        }
        con.close()
        db_mb = db.stat().st_size / 1e6
    cpu_s = (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime)
    return {"seconds": seconds, "cpu_s": cpu_s, "peak_rss_mb": usage.ru_maxrss / 1024, "db_mb": db_mb, "got": got}


def staged(log: Path) -> dict[str, float]:
    """Seconds per stage of the big-log path, one stage after the other on the main thread (the ingest overlaps them:
    two chunks classified at once while a thread inserts), chunk by chunk as speclogs.ingest.pipeline does:
    read (LogStream: read, sha256, UTF-8 check) → lines + classify + assemble (the steps of pipeline._parse_chunk) →
    requests (read_request_lines reads --log-requests lines, RequestLog pairs them) → insert (store.writer's
    _Pending through the Layout, committed every SEGMENT_ROWS rows). Left out: the files, runs and launches rows
    (a few statements) and the progress display."""
    from speclogs.grammar import load_grammars
    from speclogs.ingest.classify import classify, compile_engine
    from speclogs.ingest.lines import build_lines
    from speclogs.ingest.pipeline import DEFAULT_CHUNK_BYTES, _assemble_chunk
    from speclogs.ingest.records import ChunkFiles, number_launches
    from speclogs.ingest.requests import RequestLog, read_request_lines
    from speclogs.ingest.sources import LogStream
    from speclogs.store.database import connect
    from speclogs.store.layout import Layout
    from speclogs.store.writer import SEGMENT_ROWS, _Pending

    stages = dict.fromkeys(("grammars", "read", "lines", "classify", "assemble", "requests", "insert"), 0.0)
    t = time.perf_counter()
    engine = compile_engine(load_grammars())
    stages["grammars"] = time.perf_counter() - t
    t = time.perf_counter()
    stream = LogStream(log, log.stat().st_size)
    chunks = list(stream.chunks(DEFAULT_CHUNK_BYTES))
    stream.result()
    stages["read"] = time.perf_counter() - t
    requests = RequestLog()
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(Path(tmp) / "staged.duckdb")
        con.execute("SET disabled_compression_methods = 'rle'")  # as ingest_paths does
        pending = _Pending(Layout(con), "bench", str(log))
        con.execute("BEGIN TRANSACTION")
        first_line_no, launches = 1, 0
        while chunks:
            chunk = chunks.pop(0)
            t = time.perf_counter()
            lines = build_lines(chunk, engine.wrappers, first_line_no)
            stages["lines"] += time.perf_counter() - t
            t = time.perf_counter()
            claims = classify(engine, lines.frame)
            stages["classify"] += time.perf_counter() - t
            t = time.perf_counter()
            result = number_launches(_assemble_chunk(engine, lines, claims, ChunkFiles((1,), (lines.raw.height,), numbered=False)),
                                     launches)
            stages["assemble"] += time.perf_counter() - t
            t = time.perf_counter()
            requests.add(read_request_lines(result.tables.get("server_events")))
            stages["requests"] += time.perf_counter() - t
            t = time.perf_counter()
            for table, frame in result.tables.items():
                if frame.height:
                    pending.add(table, frame)
                if pending.received >= SEGMENT_ROWS:
                    pending.flush()
                    con.execute("COMMIT")
                    con.execute("BEGIN TRANSACTION")
                    pending.received = 0
            stages["insert"] += time.perf_counter() - t
            first_line_no += lines.raw.height
            launches += len(result.files[0].launch_starts)
            del chunk, lines, claims, result
        t = time.perf_counter()
        frame = requests.frame()
        stages["requests"] += time.perf_counter() - t
        t = time.perf_counter()
        if frame is not None:
            pending.add("requests", frame)
        pending.flush(whole=False)
        con.execute("COMMIT")
        stages["insert"] += time.perf_counter() - t
        con.close()
    return stages


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


HANDWRITTEN_NAME = "hand-written polars → DuckDB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--log", type=Path, default=Path("/tmp/sglang_2m.log"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", choices=("speclogs", "handwritten"), help=argparse.SUPPRESS)
    parser.add_argument("--no-stages", action="store_true", help="leave out the staged run")
    parser.add_argument("--no-handwritten", action="store_true", help="leave out the hand-written polars pipeline")
    parser.add_argument("--against", type=Path, help="another checkout's src/ directory: runs alternate with it (A/B)")
    parser.add_argument("--gzip", action="store_true", help="ingest LOG.gz (gzip -6 of LOG, made when missing) instead of LOG")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.log) if args.child == "speclogs" else handwritten_run(args.log)))
        return
    truth_path = ensure_log(args.log, args.lines)
    truth = json.loads(truth_path.read_text())
    size_mb = args.log.stat().st_size / 1e6
    ingested = ensure_gzip(args.log) if args.gzip else args.log
    packed = f", ingested as {ingested} ({ingested.stat().st_size / 1e6:,.1f} MB)" if args.gzip else ""
    print(f"log: {args.log} — {truth['lines']:,} lines, {size_mb:,.1f} MB{packed}; {os.cpu_count()} CPUs")
    variants = {"this tree": ("speclogs", ROOT / "src", {})}
    if args.against:
        variants[f"against {args.against}"] = ("speclogs", args.against, {})
    if not args.no_handwritten:
        variants[HANDWRITTEN_NAME] = ("handwritten", ROOT / "src", {})
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for run in range(args.runs):
        for name, (child, src, extra_env) in variants.items():
            env = dict(os.environ, PYTHONPATH=str(src) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra_env)
            out = subprocess.run(
                [sys.executable, __file__, "--child", child, "--log", str(ingested if child == "speclogs" else args.log)],
                env=env, check=True, capture_output=True, text=True,
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
                + ("truth: OK" if not problems else "truth MISMATCH: " + "; ".join(problems)),
                flush=True,
            )
    for name, runs in results.items():
        seconds = [r["seconds"] for r in runs]
        best, middle = min(seconds), median(seconds)
        print(
            f"{name + ': ' if len(variants) > 1 else ''}min {best:.2f} s = {truth['lines'] / best:,.0f} lines/s "
            f"({size_mb / best:,.1f} MB/s); "
            f"median {middle:.2f} s = {truth['lines'] / middle:,.0f} lines/s; min CPU {min(r['cpu_s'] for r in runs):.1f} s; "
            f"max peak RSS {max(r['peak_rss_mb'] for r in runs):,.0f} MB"
        )
    this = [r["seconds"] for r in results["this tree"]]
    for name, runs in list(results.items())[1:]:
        other = [r["seconds"] for r in runs]
        if name == HANDWRITTEN_NAME:
            print(f"this tree takes {median(this) / median(other):.2f}× the time of the {name} pipeline (ratio of medians; "
                  f"{min(this) / min(other):.2f}× of mins; target ≤ 1.0×)")
        else:
            print(f"this tree is {median(other) / median(this):.2f}× as fast as {name} (ratio of medians)")
    load = os.getloadavg()[0]
    print(f"load average now {load:.2f} on {os.cpu_count()} CPUs (other processes share the machine when this is above ~1)")
    print("checked against truth.json: " + ", ".join(f"{k}={v}" for k, v in results["this tree"][0]["got"].items()))
    if not args.no_stages:
        stages = staged(args.log)
        print("stages (in-process, one after the other): " + ", ".join(f"{k} {v:.2f} s" for k, v in stages.items())
              + f"; sum {sum(stages.values()):.2f} s")


if __name__ == "__main__":
    main()
