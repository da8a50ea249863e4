"""Narrow vs wide storage of the batch tables: the same parsed frames of a generated log inserted into a fresh
database both ways, runs alternating in one process.

    PYTHONPATH=src python benchmarks/bench_layout.py [--log /tmp/sglang_2m.log] [--runs 3]

narrow: the store's Layout as it is (decode_batches, prefill_batches, http_requests are views over per-shape tables
with file keys and label codes). wide: the same Layout with no sharded tables, the three views replaced by plain
tables of the contract's columns (run_id and source_file as text, labels as text). The log is parsed once; only
the insert (store.writer._PendingRows, committed every SEGMENT_ROWS rows) is timed, then one read query.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import bench_ingest


def parsed_frames(log: Path) -> list[tuple[str, object]]:
    from speclogs.grammar import load_grammars
    from speclogs.ingest.classify import classify, compile_engine
    from speclogs.ingest.lines import build_lines, count_lines
    from speclogs.ingest.pipeline import DEFAULT_CHUNK_BYTES, _assemble_chunk
    from speclogs.ingest.records import ChunkFiles, number_launches
    from speclogs.ingest.sources import LogStream

    engine = compile_engine(load_grammars())
    stream = LogStream(log, log.stat().st_size)
    frames, first_line_no, launches = [], 1, 0
    for chunk in stream.chunks(DEFAULT_CHUNK_BYTES):
        lines = build_lines(chunk, first_line_no, count_lines(chunk))
        result = number_launches(_assemble_chunk(engine, lines, classify(engine, lines.frame),
                                                 ChunkFiles((1,), (lines.total_lines,), numbered=False)), launches)
        frames += [(table, frame) for table, frame in result.tables.items() if frame.height]
        first_line_no += lines.total_lines
        launches += len(result.files[0].launch_starts)
    stream.result()
    return frames


def insert(frames, wide: bool, db: Path) -> tuple[float, float, float]:
    from speclogs.store import layout
    from speclogs.store.database import connect
    from speclogs.store.writer import SEGMENT_ROWS, _PendingRows

    sharded = layout.SHARDED_TABLES
    con = connect(db)
    con.execute("SET disabled_compression_methods = 'rle'")
    if wide and os.environ.get("WIDE_SQL"):
        con.execute(os.environ["WIDE_SQL"])
    if wide:
        layout.SHARDED_TABLES = ()
        for table in sharded:
            con.execute(f"DROP VIEW {table}")
            con.execute(f"CREATE TABLE {table} AS SELECT * EXCLUDE (file_key) FROM _{table} LIMIT 0")
    try:
        started = time.perf_counter()
        pending = _PendingRows(layout.Layout(con), "bench", "/tmp/bench.log")
        con.execute("BEGIN TRANSACTION")
        for table, frame in frames:
            pending.add(table, frame)
            if pending.received >= SEGMENT_ROWS:
                pending.flush_whole()
                con.execute("COMMIT")
                con.execute("BEGIN TRANSACTION")
                pending.received = 0
        pending.flush_all()
        con.execute("COMMIT")
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        con.execute("SELECT run_id, source_file, rank_tags, graph_kind, count(*), avg(gen_throughput_tok_s), avg(accept_len) "
                    "FROM decode_batches GROUP BY ALL").fetchall()
        query_s = time.perf_counter() - started
    finally:
        layout.SHARDED_TABLES = sharded
        con.close()
    return seconds, query_s, db.stat().st_size / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, default=Path("/tmp/sglang_2m.log"))
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    bench_ingest.ensure_log(args.log, args.lines)
    frames = parsed_frames(args.log)
    figures: dict[str, list] = {"narrow": [], "wide": []}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name in ("narrow", "wide") if run % 2 == 0 else ("wide", "narrow"):
                db = Path(tmp) / f"{name}{run}.duckdb"
                figures[name].append(insert(frames, name == "wide", db))
                db.unlink()
                print(f"run {run} {name:6}: insert {figures[name][-1][0]:.2f} s, query {figures[name][-1][1] * 1000:.0f} ms, "
                      f"file {figures[name][-1][2]:.0f} MB", flush=True)
    for name, rows in figures.items():
        print(f"{name:6} median insert {bench_ingest.median([r[0] for r in rows]):.2f} s, "
              f"query {bench_ingest.median([r[1] for r in rows]) * 1000:.0f} ms, file {rows[-1][2]:.0f} MB")


if __name__ == "__main__":
    main()
