"""The floor under `bench_ingest.py`: CPU seconds of only the work no design of this engine can skip, on the same
2,000,000-line log, one step after the other on one core.

    PYTHONPATH=src python benchmarks/bench_floor.py [--log /tmp/sglang_2m.log] [--runs 3]

Steps (polars on one thread, DuckDB on one thread, so CPU seconds add up):
  read     the file's bytes, split into lines (polars read_csv, as the ingest does)
  prefix   the bundled prefix regex over every line (ts, rank tags; where the message starts), and the messages cut out
  extract  for the three busiest patterns (decode, prefill, uvicorn access: 98 % of the lines), their gate and their
           capture regex on the lines the gate lets through, and the casts of the values to typed columns
  insert   those typed rows (with ts and line_no) into a new DuckDB file, in row groups, as the ingest does

Nothing else the ingest does is counted (line accounting, odd lines, ANSI/tqdm, rank columns, the other ~140
patterns, near misses, launches, unparsed rows, hashing). The sum over 2 cores is the best wall time this
polars + DuckDB design could reach on this machine now; it prints that as lines/s next to the 500k goal.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["POLARS_MAX_THREADS"] = "1"  # before polars is imported: CPU seconds of one core, comparable step by step

import duckdb  # noqa: E402
import polars as pl  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import ensure_log  # noqa: E402
from speclogs.grammar import cast_expr, load_grammars  # noqa: E402
from speclogs.ingest.classify import classify, compile_engine  # noqa: E402
from speclogs.ingest.lines import build_lines, read_lines  # noqa: E402
from speclogs.store.writer import ROW_GROUP_ROWS  # noqa: E402

HOT_TABLES = ("decode_batches", "prefill_batches", "http_requests")


def busiest_patterns(engine, data: bytes) -> list:
    """Per hot table, the pattern that claims most lines of the log's first 16 MiB (what the ingest would use)."""
    head = data[: data.find(b"\n", 16 << 20) + 1]
    claims = classify(engine, build_lines(head, engine.wrappers).frame)
    chosen = []
    for table in HOT_TABLES:
        names = [c.name for c in engine.patterns if c.pattern.table == table and c.name in claims.frames]
        chosen.append(engine.pattern(max(names, key=lambda name: claims.frames[name].height)))
    return chosen


def typed(compiled, values: pl.DataFrame) -> pl.DataFrame:
    """The captured strings cast as the ingest casts them."""
    return values.select(cast_expr(pl.col(f.name), f.type).alias(f.name) for f in compiled.pattern.fields if f.name in values.columns)


def one_run(data: bytes, engine, patterns: list) -> dict[str, float]:
    cpu: dict[str, float] = {}
    t = time.process_time()
    text = read_lines(data)
    cpu["read"] = time.process_time() - t

    t = time.process_time()
    groups = text.str.extract_groups(engine.prefix_regex).struct.unnest()
    prefixed = groups.get_column("_pfx").is_not_null()
    line_no = pl.int_range(1, text.len() + 1, eager=True).filter(prefixed)
    ts = groups.get_column("ts").filter(prefixed).str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False)
    message = text.filter(prefixed).str.slice(groups.get_column("_pfx").filter(prefixed).str.len_chars())
    cpu["prefix"] = time.process_time() - t

    t = time.process_time()
    frames = {}
    for compiled in patterns:
        gate = message.str.contains(compiled.pattern.gate, literal=True)
        extracted = message.filter(gate).str.extract_groups(compiled.hit_regex)
        hit = extracted.struct.field("_hit").is_not_null()
        values = typed(compiled, extracted.filter(hit).struct.unnest())
        frames[compiled.pattern.table] = values.with_columns(line_no.filter(gate).filter(hit).alias("line_no"),
                                                            ts.filter(gate).filter(hit).alias("ts"))
    cpu["extract"] = time.process_time() - t

    with tempfile.TemporaryDirectory() as tmp:
        con = duckdb.connect(str(Path(tmp) / "floor.duckdb"))
        con.execute("SET threads = 1")
        t = time.process_time()
        con.execute("BEGIN TRANSACTION")
        for table, frame in frames.items():
            con.register("_rows", frame.slice(0, 0).__arrow_c_stream__())
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM _rows")
            for start in range(0, frame.height, ROW_GROUP_ROWS):
                con.register("_rows", frame.slice(start, ROW_GROUP_ROWS).__arrow_c_stream__())
                con.execute(f"INSERT INTO {table} SELECT * FROM _rows")
        con.execute("COMMIT")
        cpu["insert"] = time.process_time() - t
        con.close()
    cpu["rows"] = sum(frame.height for frame in frames.values())
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log", type=Path, default=Path("/tmp/sglang_2m.log"))
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    ensure_log(args.log, args.lines)
    engine = compile_engine(load_grammars())
    data = args.log.read_bytes()
    patterns = busiest_patterns(engine, data)
    lines = data.count(b"\n")
    print(f"log: {args.log} — {lines:,} lines, {len(data) / 1e6:.1f} MB; patterns: {', '.join(c.name for c in patterns)}")
    runs = [one_run(data, engine, patterns) for _ in range(args.runs)]
    steps = ("read", "prefix", "extract", "insert")
    best = {step: min(run[step] for run in runs) for step in steps}
    total = sum(best.values())
    for step in steps:
        print(f"{step:8s} {best[step]:6.2f} s CPU (min of {args.runs}; all: {', '.join(f'{run[step]:.2f}' for run in runs)})")
    print(f"typed rows inserted: {runs[0]['rows']:,}")
    floor_s = total / 2
    print(f"sum {total:.2f} s CPU → on 2 cores at best {floor_s:.2f} s wall = {lines / floor_s:,.0f} lines/s "
          f"(goal 500,000 lines/s = {lines / 500_000:.2f} s wall = {2 * lines / 500_000:.2f} s CPU for everything)")


if __name__ == "__main__":
    main()
