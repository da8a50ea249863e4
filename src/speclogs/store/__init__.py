"""The DuckDB store: open the database (schema.sql), ingest files into it, run read-only queries.

`ingest_paths` is the library behind `speclogs ingest`: discover the inputs, and for each file, in ONE
transaction: skip it when the same content is already stored (sha256 in `files`), else delete its old rows
(with replace=True), parse it (speclogs.ingest), insert every table's rows, record the file and its line
accounting, and upsert its run. A file that cannot be read or parsed is rolled back and reported in the
summary; nothing raises for a bad input file.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import queue
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path

import duckdb
import polars as pl

from speclogs.errors import InputError, SpeclogsError, StoreError
from speclogs.ingest import (
    DEFAULT_CHUNK_BYTES,
    IngestSummary,
    InputFile,
    ProgressEvent,
    RequestLog,
    discover_inputs,
    engine_note,
    parse_bench_json,
    parse_bench_jsonl,
    parse_log_chunks,
    parse_nccl_probe,
    parse_prometheus_file,
    parse_request_export,
    parse_run_json,
    read_input,
    with_bench_serving_requests,
)
from speclogs.ingest.sources import STDIN_NAME, STREAM_MIN_BYTES

SCHEMA_VERSION = "3"
# Views over narrow tables, one per set of filled columns (see schema.sql); the rest are plain tables.
SHARDED_TABLES = ("prefill_batches", "decode_batches", "http_requests")
# Few-valued text columns of the sharded tables: stored as INTEGER codes into _labels, text again in the views.
LABEL_COLUMNS = ("rank_tags", "graph_kind", "level", "method", "http_version", "status_text")
PROGRESS_MIN_BYTES = 8 << 20
_LOCK_PID = re.compile(r"PID (\d+)")
_POLARS_TO_SQL = {
    pl.Int8: "INTEGER",
    pl.Int16: "INTEGER",
    pl.Int32: "INTEGER",
    pl.Int64: "BIGINT",
    pl.UInt32: "BIGINT",
    pl.Float32: "DOUBLE",
    pl.Float64: "DOUBLE",
    pl.Boolean: "BOOLEAN",
    pl.Utf8: "VARCHAR",
}
NO_SGLANG_WARNING = "no SGLang lines: is this an SGLang log?"


# ----------------------------------------------------------------------------------------------------------------
# connections


def schema_sql() -> str:
    return resources.files("speclogs.store").joinpath("schema.sql").read_text(encoding="utf-8")


VIEWS_SQL = """
CREATE OR REPLACE VIEW line_accounting AS
SELECT f.source_file, f.run_id, f.kind, f.total_lines,
       f.parsed_lines AS parsed, f.continuation_lines AS continuation, f.unparsed_lines AS unparsed,
       (f.parsed_lines + f.continuation_lines + f.unparsed_lines = f.total_lines) AS balanced,
       round(100.0 * f.parsed_lines / nullif(f.total_lines, 0), 2) AS parsed_pct
FROM files f
WHERE f.skipped_reason IS NULL;
"""


def connect(db_path: str | Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the speclogs database (creating the schema when writable). Raises StoreError with a clear reason."""
    path = Path(db_path)
    if read_only and not path.exists():
        raise StoreError(f"no database at {path}", hint="run `speclogs ingest PATH… --db FILE` first, or pass --db")
    try:
        if read_only:
            connection = duckdb.connect(str(path), read_only=True)
        else:  # attached, for the row group size (the file's own catalog is then the default one)
            connection = duckdb.connect()
            quoted = str(path).replace("'", "''")
            connection.execute(f"ATTACH '{quoted}' AS speclogs (ROW_GROUP_SIZE {ROW_GROUP_ROWS})")
            connection.execute("USE speclogs")
    except duckdb.IOException as error:
        raise _store_error(path, error) from error
    except duckdb.Error as error:
        raise StoreError(f"cannot open {path}: {error}", hint="is it a DuckDB file written by speclogs?") from error
    if not read_only:
        try:
            connection.execute("BEGIN TRANSACTION")  # one commit (and one WAL sync) for the whole schema
            _check_version(connection, path)
            connection.execute(schema_sql())
            connection.execute(VIEWS_SQL)
            connection.execute(
                "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING", [SCHEMA_VERSION]
            )
            views = {row[0] for row in connection.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
            for table in SHARDED_TABLES:  # a new file's views (no narrow tables yet); the store keeps them up to date
                if table not in views:
                    connection.execute(_sharded_view_sql(table, {}, {}))
            connection.execute("COMMIT")
        except duckdb.Error as error:
            connection.close()
            raise StoreError(f"cannot create the speclogs schema in {path}: {error}", hint="use a new --db file") from error
        except StoreError:
            connection.close()
            raise
    return connection


def _check_version(connection, path: Path) -> None:
    """A database written by another schema version is not written to (reading it still works)."""
    has_meta = connection.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = 'meta'"
    ).fetchone()[0]
    if not has_meta:
        return
    found = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if found is not None and found[0] != SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written by another speclogs version (schema {found[0]}, this one writes schema {SCHEMA_VERSION})",
            hint="ingest into a new --db file; `speclogs sql` still reads this one",
        )


def _sharded_view_sql(table: str, shards: dict[str, Sequence[str]], labels: dict[str, list[str]]) -> str:
    """The view of a sharded table: its contract base (columns and types, no rows) and every narrow table
    (name → its columns), by name, label codes turned back into their text, with run_id and source_file from
    their file_key."""
    parts = [f'SELECT * FROM "_{table}"']
    for shard, columns in sorted(shards.items()):
        coded = [name for name in columns if name in LABEL_COLUMNS]
        texts = ", ".join(f'{_sql_text_list(labels.get(name, []))}["{name}" + 1] AS "{name}"' for name in coded)
        parts.append(f'SELECT *{f" REPLACE ({texts})" if coded else ""} FROM "{shard}"')
    return (
        f'CREATE OR REPLACE VIEW "{table}" AS SELECT k.run_id, k.source_file, u.* EXCLUDE (file_key, run_id, source_file) '
        f"FROM ({' UNION ALL BY NAME '.join(parts)}) AS u LEFT JOIN _file_keys AS k USING (file_key)"
    )


def _sql_text_list(values: Sequence[str]) -> str:
    """A VARCHAR list literal (codes index it from 0, SQL lists from 1)."""
    items = ", ".join("'" + value.replace("'", "''") + "'" for value in values)
    return f"([{items}]::VARCHAR[])"


def _store_error(path: Path, error: duckdb.Error) -> StoreError:
    message = str(error)
    if "lock" in message.lower():
        found = _LOCK_PID.search(message)
        pid = found.group(1) if found else "unknown"
        return StoreError(
            f"{path} is being written by another process (pid {pid}?)",
            hint="wait for it to finish (each file is one transaction), or use another --db file",
        )
    return StoreError(f"cannot open {path}: {message}", hint="check the path and its permissions")


# ----------------------------------------------------------------------------------------------------------------
# queries


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]
    types: tuple[str, ...]
    rows: tuple[tuple, ...]

    def to_csv(self) -> str:
        import csv
        import io

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(["" if v is None else v for v in row] for row in self.rows)
        return buffer.getvalue()

    def to_json(self) -> str:
        records = [dict(zip(self.columns, row)) for row in self.rows]
        return json.dumps(records, default=str, indent=2)


def run_query(db_path: str | Path, sql: str) -> QueryResult:
    """Run SQL read-only against the database. Raises StoreError on a SQL error (with DuckDB's message)."""
    connection = connect(db_path, read_only=True)
    try:
        try:
            cursor = connection.execute(sql)
        except duckdb.Error as error:
            raise StoreError(f"SQL error: {error}", hint="see docs/sql.md for the tables and columns") from error
        if cursor.description is None:
            return QueryResult(columns=(), types=(), rows=())
        columns = tuple(d[0] for d in cursor.description)
        types = tuple(str(d[1]) for d in cursor.description)
        rows = tuple(tuple(row) for row in cursor.fetchall())
        return QueryResult(columns=columns, types=types, rows=rows)
    finally:
        connection.close()


# ----------------------------------------------------------------------------------------------------------------
# ingest


@dataclass
class _Tally:
    files_total: int
    bytes_total: int
    ingested: int = 0
    unchanged: int = 0
    bytes_done: int = 0
    lines_total: int = 0
    lines_parsed: int = 0
    lines_continuation: int = 0
    lines_unparsed: int = 0
    rows: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    skipped_examples: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    drift: Counter = field(default_factory=Counter)
    runs: set = field(default_factory=set)

    def skip(self, reason: str, where: str) -> None:
        self.skipped[reason] += 1
        self.skipped_examples.setdefault(reason, where)

    def add(self, prepared: "_Prepared") -> None:
        counts = prepared.counts
        self.ingested += 1
        self.runs.add(prepared.item.run.run_name)
        self.lines_total += counts.total
        self.lines_parsed += counts.parsed
        self.lines_continuation += counts.continuation
        self.lines_unparsed += counts.unparsed
        self.rows.update(counts.rows)
        self.drift.update(counts.drift)
        for warning in counts.warnings:
            self.warnings.append(f"{prepared.source_file}: {warning}")


# Small files are parsed first and written together, many per transaction (a failing batch is rolled back
# and written again one file per transaction); a file is never half-written either way. Big logs stream
# chunk by chunk into their own transaction.
STREAM_QUEUE_FRAMES = 12  # about one parsed chunk in flight (a chunk gives a handful of table frames)
# DuckDB's row group, a quarter of its default: a streamed file's last partial row group per table is written
# at COMMIT, on one core once parsing has ended (0.36 s of a 4.2 s ingest with 122,880 rows, 0.07 s with these)
ROW_GROUP_ROWS = 30_720
INSERT_BATCH_ROWS = 4 * ROW_GROUP_ROWS  # a table's rows are inserted once this many gathered, in whole row groups
BATCH_BYTES = 32 << 20
BATCH_FILES = 400


def _cyclic_gc_paused(function):
    """Python's cyclic GC walks every live object each time it runs: during an ingest, which holds the grammars'
    pyparsing elements and many frames, that was ~0.3 s of a 5 s ingest, most of it at the end on one core. The
    ingest's objects are freed by reference counting, so the cyclic GC is off while it runs (and back after)."""

    @functools.wraps(function)
    def paused(*args, **kwargs):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return paused


@_cyclic_gc_paused
def ingest_paths(
    paths: Sequence[str | Path],
    db_path: str | Path,
    *,
    replace: bool = False,
    run_name: str | None = None,
    on_progress: Callable[[ProgressEvent], None] | None = None,
    grammar_paths: Sequence[Path] = (),
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> IngestSummary:
    """Ingest files/directories/'-' into the DuckDB file `db_path`; returns what happened (IngestSummary).

    replace=True re-ingests files already stored (their rows are deleted first); without it a file whose
    content is already stored is skipped as unchanged, and a file whose content changed is skipped with a
    hint to use replace.
    Raises InputError for a named path that does not exist, StoreError when the database is locked by
    another writer, GrammarError for a broken user grammar.
    """
    started = time.perf_counter()
    discovery = discover_inputs([str(p) for p in paths], run_name=run_name)
    if not discovery.files and not discovery.skipped:
        raise InputError("nothing to ingest", hint="pass log files, directories, .gz files or '-' for stdin")
    engine = None
    if any(f.kind == "log" for f in discovery.files):
        from speclogs.grammar import load_grammars
        from speclogs.ingest.classify import compile_engine

        engine = compile_engine(load_grammars(grammar_paths))
    tally = _Tally(files_total=len(discovery.files), bytes_total=sum(f.size_bytes for f in discovery.files))
    for reason, count in discovery.skipped.items():
        tally.skipped[reason] += count
        tally.skipped_examples.setdefault(reason, discovery.skipped_examples.get(reason, ""))
    show = tally.bytes_total >= PROGRESS_MIN_BYTES or tally.files_total > 50
    connection = connect(db_path)
    try:
        # RLE's analysis pass costs ~15 % of the insert CPU; bit-packing and dictionaries store these columns as small
        connection.execute("SET disabled_compression_methods = 'rle'")
        writer = _Writer(connection, tally)
        stored: dict[str, set[str]] = {}
        for source, sha in connection.execute("SELECT source_file, sha256 FROM files").fetchall():
            stored.setdefault(source, set()).add(sha)
        for index, item in enumerate(discovery.files):
            if on_progress is not None:
                on_progress(ProgressEvent(_short(item.source_file), tally.bytes_done, tally.bytes_total, index, tally.files_total, show))
            if on_progress is not None:
                done_before = tally.bytes_done
                writer.on_chunk = lambda fraction, item=item, done_before=done_before, index=index: on_progress(
                    ProgressEvent(_short(item.source_file), done_before + int(fraction * item.size_bytes),
                                  tally.bytes_total, index, tally.files_total, show)
                )
            _ingest_one(writer, item, engine, stored, replace=replace, chunk_bytes=chunk_bytes)
            tally.bytes_done += item.size_bytes
        writer.flush()
        if on_progress is not None:
            on_progress(ProgressEvent("done", tally.bytes_total, tally.bytes_total, tally.files_total, tally.files_total, show))
    finally:
        connection.close()
    seconds = time.perf_counter() - started
    return IngestSummary(
        db_path=str(db_path),
        files_found=tally.files_total,
        files_ingested=tally.ingested,
        files_unchanged=tally.unchanged,
        skipped=dict(tally.skipped),
        skipped_examples=dict(tally.skipped_examples),
        lines_total=tally.lines_total,
        lines_parsed=tally.lines_parsed,
        lines_continuation=tally.lines_continuation,
        lines_unparsed=tally.lines_unparsed,
        rows_per_table=dict(sorted(tally.rows.items())),
        bytes_read=tally.bytes_done,
        seconds=seconds,
        warnings=tuple(tally.warnings),
        drift=dict(tally.drift),
        runs=tuple(sorted(tally.runs)),
    )


def _short(source_file: str) -> str:
    return source_file if len(source_file) <= 60 else "…" + source_file[-59:]


_FAILURES = (duckdb.Error, pl.exceptions.PolarsError, SpeclogsError, ValueError, OSError)


def _ingest_one(writer: "_Writer", item: InputFile, engine, stored: dict[str, set[str]], *, replace: bool, chunk_bytes: int) -> None:
    tally = writer.tally
    raw = read_input(item)
    source_file = item.source_file
    if item.path is None and raw.sha256:
        source_file = f"{STDIN_NAME[:-1]}:{raw.sha256[:12]}>"
    for warning in raw.warnings:
        tally.warnings.append(f"{source_file}: {warning}")
    if raw.skipped_reason is not None:
        tally.skip(raw.skipped_reason, source_file)
        return
    known = stored.get(source_file)
    if known and not replace:  # (a new big file's hash is still being computed: it is not needed here)
        if raw.sha256 in known:
            tally.unchanged += 1
            tally.skip("unchanged, skipped (already ingested; --replace re-ingests)", source_file)
        else:
            tally.skip("content changed since it was ingested (use --replace to re-ingest)", source_file)
        return
    prepared = _Prepared(item=item, source_file=source_file, raw=raw, replaces=bool(known), counts=_FileCounts(kind=item.kind))
    if item.kind == "log" and (raw.stream is not None or len(raw.data) >= STREAM_MIN_BYTES):
        writer.flush()
        writer.write_streaming(prepared, engine, chunk_bytes=chunk_bytes)
        stored.setdefault(source_file, set()).add(raw.sha256)
        return
    stored.setdefault(source_file, set()).add(raw.sha256)
    started = time.perf_counter()
    try:
        _parse_file(prepared, engine, prepared.keep, chunk_bytes=chunk_bytes)
    except _FAILURES as error:
        tally.skip(f"failed ({type(error).__name__}: {_first_line(error)})", source_file)
        return
    prepared.seconds = time.perf_counter() - started
    writer.add(prepared)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else ""


@dataclass
class _FileCounts:
    kind: str
    total: int = 0
    parsed: int = 0
    continuation: int = 0
    unparsed: int = 0
    rows: Counter = field(default_factory=Counter)
    drift: Counter = field(default_factory=Counter)
    warnings: list = field(default_factory=list)


@dataclass
class _Prepared:
    """One file on its way into the database: its rows (when held in memory), counts and run facts."""

    item: InputFile
    source_file: str
    raw: object
    replaces: bool
    counts: _FileCounts
    frames: list = field(default_factory=list)  # (table, frame)
    facts: dict = field(default_factory=dict)
    launch_rows: list = field(default_factory=list)
    seconds: float = 0.0

    def keep(self, table: str, frame: pl.DataFrame) -> None:
        if frame.height:
            self.frames.append((table, frame))
            self.counts.rows[table] += frame.height


def _parse_file(prepared: _Prepared, engine, emit, *, chunk_bytes: int, on_chunk=None) -> None:
    """Parse one file, handing every table frame to `emit(table, frame)`; fills counts, facts, launch rows."""
    item, raw, counts = prepared.item, prepared.raw, prepared.counts
    if item.kind == "log":
        launch_starts: list[int] = []
        launch_facts: list[tuple[int, str, object]] = []
        drift_examples = []
        prefixed = 0
        requests = RequestLog()
        for chunk in parse_log_chunks(raw.stream or raw.data, engine, chunk_bytes=chunk_bytes):
            for table, frame in chunk.tables.items():
                emit(table, frame)
            if "server_events" in chunk.tables:
                requests.add(chunk.tables["server_events"])
            counts.total += chunk.total_lines
            counts.parsed += chunk.parsed_lines
            counts.continuation += chunk.continuation_lines
            counts.unparsed += chunk.unparsed_lines
            counts.drift.update(chunk.near_miss_counts)
            drift_examples.extend(chunk.near_misses)
            launch_starts.extend(chunk.launch_starts)
            launch_facts.extend(chunk.launch_facts)
            prefixed += chunk.prefixed_pieces
            if on_chunk is not None:
                on_chunk(chunk.byte_end)
            for key, value in chunk.run_facts.items():
                prepared.facts.setdefault(key, value)
        request_rows = requests.frame()
        if request_rows is not None:
            emit("requests", request_rows)
        if drift_examples:
            emit("parse_drift", _drift_frame(drift_examples, launch_starts))
            for name, count in sorted(counts.drift.items()):
                first = next(m for m in drift_examples if m.pattern == name)
                counts.warnings.append(
                    f"{count:,} line(s) look like '{name}' but do not match it (first: line {first.line_no}: {first.error})"
                )
        if raw.stream is not None:  # what reading found comes first, as for a file read whole
            counts.warnings[:0] = raw.stream.warnings()
        note = engine_note(engine, item.size_bytes)
        if note is not None:
            counts.warnings.append(note)
        if counts.total and prefixed == 0:
            counts.warnings.append(NO_SGLANG_WARNING)
        prepared.launch_rows = _launch_rows(item.run.run_id, prepared.source_file, launch_starts, launch_facts, counts.total)
        return
    text = raw.data.decode("utf-8")
    if item.kind == "run_json":
        result = parse_run_json(text)
    elif item.kind == "bench_json":
        result = parse_bench_json(text)
    elif item.kind == "nccl_probe":
        result = parse_nccl_probe(text, prepared.source_file)
    elif item.kind == "prometheus":
        result = parse_prometheus_file(text, item.path)
    elif item.kind == "request_export":
        result = parse_request_export(text)
    else:
        result = with_bench_serving_requests(parse_bench_jsonl(text, kind=item.kind))
    for table, frame in result.tables.items():
        emit(table, frame)
    counts.total = result.total_lines
    counts.parsed = result.parsed_lines
    counts.unparsed = result.unparsed_lines
    counts.warnings.extend(result.warnings)
    prepared.facts.update(result.run_facts)


class _Writer:
    """Writes prepared files: batches of small ones in one transaction, big logs streamed in their own."""

    def __init__(self, connection, tally: _Tally) -> None:
        self.connection = connection
        self.columns = _TableColumns(connection)
        self.tally = tally
        self.batch: list[_Prepared] = []
        self.batch_bytes = 0
        self.on_chunk = None  # called with the fraction of a streamed file done (progress)

    def add(self, prepared: _Prepared) -> None:
        self.batch.append(prepared)
        self.batch_bytes += len(prepared.raw.data)
        if self.batch_bytes >= BATCH_BYTES or len(self.batch) >= BATCH_FILES:
            self.flush()

    def flush(self) -> None:
        batch, self.batch, self.batch_bytes = self.batch, [], 0
        if not batch:
            return
        try:
            self._transaction(batch)
        except _FAILURES:
            if len(batch) == 1:
                self._failed(batch[0])
                return
            for prepared in batch:  # find the culprit: one transaction per file
                try:
                    self._transaction([prepared])
                except _FAILURES:
                    self._failed(prepared)
                else:
                    self.tally.add(prepared)
            return
        for prepared in batch:
            self.tally.add(prepared)

    def _failed(self, prepared: _Prepared) -> None:
        error = sys.exc_info()[1]
        self.tally.skip(f"failed and rolled back ({type(error).__name__}: {_first_line(error)})", prepared.source_file)

    def _transaction(self, batch: list[_Prepared]) -> None:
        connection = self.connection
        connection.execute("BEGIN TRANSACTION")
        try:
            for prepared in batch:
                if prepared.replaces:
                    _delete_file_rows(connection, self.columns, prepared.source_file)
            by_table: dict[str, list[pl.DataFrame]] = {}
            for prepared in batch:
                for table, frame in prepared.frames:
                    by_table.setdefault(table, []).append(_with_keys(frame, self.columns, table, prepared.item.run.run_id, prepared.source_file))
            for table, frames in by_table.items():
                frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
                _insert(connection, self.columns, table, frame)
            self._finish(batch)
            connection.execute("COMMIT")
        except _FAILURES:
            connection.execute("ROLLBACK")
            self.columns.reload()
            raise

    def _finish(self, batch: list[_Prepared]) -> None:
        """The files rows, launches rows and runs of a batch (one statement each)."""
        connection = self.connection
        launch_rows = [row for prepared in batch for row in prepared.launch_rows]
        if launch_rows:
            _insert(connection, self.columns, "launches", pl.DataFrame(launch_rows, schema=_LAUNCH_TYPES, orient="row"))
        _insert(connection, self.columns, "files", pl.DataFrame([_file_row(p) for p in batch], schema=_FILE_TYPES, orient="row"))
        _upsert_runs(connection, batch)

    def write_streaming(self, prepared: _Prepared, engine, *, chunk_bytes: int) -> None:
        """A big log, in one transaction: a parser thread turns chunks into frames while this thread inserts the
        previous ones (polars and DuckDB both release the GIL, so the two overlap on two cores)."""
        connection = self.connection
        run_id, source_file = prepared.item.run.run_id, prepared.source_file
        started = time.perf_counter()
        frames: queue.Queue = queue.Queue(maxsize=STREAM_QUEUE_FRAMES)
        stop = threading.Event()
        failures: list[BaseException] = []

        def emit(table: str, frame: pl.DataFrame) -> None:
            if stop.is_set():
                raise _Stopped()
            frames.put((table, frame))

        def chunk_done(byte_end: int) -> None:
            raw = prepared.raw
            frames.put((_PROGRESS, byte_end / max(1, raw.size_bytes if raw.stream is not None else len(raw.data))))

        def produce() -> None:
            try:
                _parse_file(prepared, engine, emit, chunk_bytes=chunk_bytes, on_chunk=chunk_done)
            except _Stopped:
                pass
            except _FAILURES as error:
                failures.append(error)
            finally:
                frames.put(None)

        parser = threading.Thread(target=produce, name="speclogs-parse", daemon=True)
        connection.execute("BEGIN TRANSACTION")
        try:
            if prepared.replaces:
                _delete_file_rows(connection, self.columns, source_file)
            parser.start()
            pending = _PendingRows(connection, self.columns, run_id, source_file)
            while (item := frames.get()) is not None:
                table, frame = item
                if table is _PROGRESS:
                    if self.on_chunk is not None:
                        self.on_chunk(frame)
                    continue
                if frame.height:
                    pending.add(table, frame)
                    prepared.counts.rows[table] += frame.height
            parser.join()
            pending.flush_all()
            if failures:
                raise failures[0]
            prepared.seconds = time.perf_counter() - started
            self._finish([prepared])
            connection.execute("COMMIT")
        except _FAILURES as error:
            stop.set()
            while parser.is_alive() or not frames.empty():  # let the parser see `stop` and finish
                try:
                    frames.get(timeout=0.1)
                except queue.Empty:
                    pass
            connection.execute("ROLLBACK")
            self.columns.reload()
            self.tally.skip(f"failed and rolled back ({type(error).__name__}: {_first_line(error)})", source_file)
            return
        self.tally.add(prepared)


_PROGRESS = object()  # queue marker: (marker, fraction of the file parsed)


class _Stopped(Exception):
    """Raised inside the parser thread when the writer gave up on the file."""


class _PendingRows:
    """A streamed file's rows, inserted per table in whole row groups once INSERT_BATCH_ROWS have gathered;
    the rest at the end.

    DuckDB writes full row groups straight to the file during the transaction; appends of partial row
    groups leave work that COMMIT has to merge and write again (measured: a third more CPU). Inserting as
    soon as whole row groups are there keeps that work on the insert thread while parsing goes on, instead
    of at the end, when nothing else runs."""

    def __init__(self, connection, columns: "_TableColumns", run_id: str, source_file: str) -> None:
        self.connection = connection
        self.columns = columns
        self.run_id = run_id
        self.source_file = source_file
        self.frames: dict[str, list[pl.DataFrame]] = {}
        self.rows: Counter = Counter()

    def add(self, table: str, frame: pl.DataFrame) -> None:
        self.frames.setdefault(table, []).append(frame)
        self.rows[table] += frame.height
        if self.rows[table] >= INSERT_BATCH_ROWS:
            frame = self._take(table)
            whole = frame.height - frame.height % ROW_GROUP_ROWS
            self._insert(table, frame.slice(0, whole))
            if whole < frame.height:
                self.frames[table] = [frame.slice(whole)]
                self.rows[table] = frame.height - whole

    def flush_all(self) -> None:
        for table in list(self.frames):
            self._insert(table, self._take(table))

    def _take(self, table: str) -> pl.DataFrame:
        frames = self.frames.pop(table)
        self.rows[table] = 0
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")

    def _insert(self, table: str, frame: pl.DataFrame) -> None:
        _insert(self.connection, self.columns, table, frame, _keys(self.columns, table, self.run_id, self.source_file))


def _keys(columns: "_TableColumns", table: str, run_id: str, source_file: str) -> dict[str, object]:
    """The key columns every row of `table` gets from its file: a file_key for the sharded tables."""
    if table in SHARDED_TABLES:
        return {"file_key": columns.file_key(source_file, run_id)}
    if table in ("nccl_probe", "nccl_probe_files"):
        return {"source_file": source_file}
    return {"source_file": source_file, "run_id": run_id}


def _with_keys(frame: pl.DataFrame, columns: "_TableColumns", table: str, run_id: str, source_file: str) -> pl.DataFrame:
    """The key columns on every row (strings dictionary-encoded: one per file, not per row)."""
    return frame.with_columns(
        pl.lit(value, dtype=pl.Int32 if isinstance(value, int) else pl.Categorical).alias(name)
        for name, value in _keys(columns, table, run_id, source_file).items()
    )


def _drift_frame(examples, launch_starts: list[int]) -> pl.DataFrame:
    frame = pl.DataFrame(
        [(m.line_no, m.pattern, m.error, m.text[:8192]) for m in examples],
        schema={"line_no": pl.Int64, "pattern": pl.Utf8, "error": pl.Utf8, "text": pl.Utf8},
        orient="row",
    )
    starts = pl.Series(sorted(launch_starts), dtype=pl.Int64)
    launch = starts.search_sorted(frame["line_no"], side="right").cast(pl.Int32).clip(lower_bound=1) if len(starts) else pl.Series([1] * frame.height, dtype=pl.Int32)
    return frame.with_columns(launch.alias("launch_no"))


class _TableColumns:
    """Column names per physical table, cached; creates tables (and the narrow tables of sharded ones) and adds
    columns the grammars fill but schema.sql lacks."""

    def __init__(self, connection) -> None:
        self._connection = connection
        self.reload()

    def reload(self) -> None:
        """Read the tables again (after a rollback undid some that were created)."""
        self._columns: dict[str, dict[str, str]] = {}
        rows = self._connection.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' "
            "AND table_name IN (SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main') ORDER BY table_name, column_index"
        ).fetchall()
        for table, column, data_type in rows:
            self._columns.setdefault(table, {})[column] = data_type
        self._file_keys = {
            (source_file, run_id): key
            for key, source_file, run_id in self._connection.execute("SELECT file_key, source_file, run_id FROM _file_keys").fetchall()
        }
        self._labels: dict[str, dict[str, int]] = {}  # column → text → code (codes 0, 1, … in insertion order)
        for column, value in self._connection.execute("SELECT column_name, value FROM _labels ORDER BY column_name, code").fetchall():
            known = self._labels.setdefault(column, {})
            known[value] = len(known)

    def create_views(self, tables: Sequence[str] = SHARDED_TABLES) -> None:
        """(Re)create the views of sharded tables over their narrow tables, with the label texts known now."""
        labels = {column: list(known) for column, known in self._labels.items()}
        for table in tables:
            shards = {name: list(columns) for name, columns in self._columns.items() if name.startswith(f"_{table}_")}
            self._connection.execute(_sharded_view_sql(table, shards, labels))

    def encode_labels(self, frame: pl.DataFrame) -> pl.DataFrame:
        """`frame` with its label columns (LABEL_COLUMNS) as INTEGER codes; new texts get the next codes, and the
        views learn them."""
        codes, new = [], []
        for name in LABEL_COLUMNS:
            if name in frame.columns and frame.schema[name] == pl.String:
                codes.append(self._codes(name, frame.get_column(name), new))
        if new:
            self._connection.executemany("INSERT INTO _labels VALUES (?, ?, ?)", new)
            self.create_views()
        return frame.with_columns(codes) if codes else frame

    def _codes(self, name: str, texts: pl.Series, new: list) -> pl.Series:
        """The codes of `texts`; texts seen for the first time get the next codes and go into `new` (rows of _labels)."""
        known = self._labels.setdefault(name, {})

        def code(value: str) -> int:
            if value not in known:
                new.append((name, len(known), value))
                known[value] = len(known)
            return known[value]

        if texts.null_count() == 0 and (texts == texts[0]).all():  # the usual case: one text in a frame
            return pl.repeat(code(texts[0]), texts.len(), dtype=pl.Int32, eager=True).alias(name)
        for value in texts.unique().drop_nulls().to_list():
            code(value)
        return texts.cast(pl.Enum(list(known))).to_physical().cast(pl.Int32)

    def file_key(self, source_file: str, run_id: str) -> int:
        """The small integer the sharded tables' rows of one file carry (allocated on first use)."""
        key = self._file_keys.get((source_file, run_id))
        if key is None:
            key = max(self._file_keys.values(), default=0) + 1
            self._connection.execute("INSERT INTO _file_keys VALUES (?, ?, ?)", [key, source_file, run_id])
            self._file_keys[(source_file, run_id)] = key
        return key

    def of(self, table: str) -> dict[str, str]:
        return self._columns[table]

    def tables_with(self, column: str) -> list[str]:
        return [t for t, cols in self._columns.items() if column in cols and t != "_file_keys"]

    def target(self, table: str, frame: pl.DataFrame, keys: dict[str, object]) -> str:
        """The physical table `frame`'s rows go to (created when new): the table itself, or for a sharded
        table the narrow one holding exactly the columns `frame` fills (contract types for contract columns)."""
        if table not in SHARDED_TABLES:
            self.ensure(table, frame, keys)
            return table
        base = self._columns[f"_{table}"]
        nulls = frame.null_count().row(0)
        filled = [name for name, null_count in zip(frame.columns, nulls) if null_count < frame.height]
        wanted = {name: "INTEGER" if name in LABEL_COLUMNS else base.get(name) or _sql_type(frame.schema[name]) for name in filled} | {
            name: _key_type(value) for name, value in keys.items()
        }
        digest = hashlib.sha1(repr(sorted(wanted.items())).encode()).hexdigest()[:8]
        shard = f"_{table}_{digest}"
        if shard not in self._columns:
            definitions = ", ".join(f'"{name}" {sql_type}' for name, sql_type in wanted.items())
            self._connection.execute(f'CREATE TABLE IF NOT EXISTS "{shard}" ({definitions})')
            self._columns[shard] = wanted
            self.create_views([table])
        return shard

    def ensure(self, table: str, frame: pl.DataFrame, keys: dict[str, object]) -> None:
        wanted = {name: _sql_type(dtype) for name, dtype in frame.schema.items()} | {name: _key_type(value) for name, value in keys.items()}
        known = self._columns.get(table)
        if known is None:
            definitions = ", ".join(f'"{name}" {sql_type}' for name, sql_type in wanted.items())
            self._connection.execute(f'CREATE TABLE IF NOT EXISTS "{table}" ({definitions})')
            self._columns[table] = wanted
            return
        for name, sql_type in wanted.items():
            if name not in known:
                self._connection.execute(f'ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS "{name}" {sql_type}')
                known[name] = sql_type


def _key_type(value: object) -> str:
    return "INTEGER" if isinstance(value, int) else "VARCHAR"


def _sql_type(dtype: pl.DataType) -> str:
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMP"
    for polars_type, sql in _POLARS_TO_SQL.items():
        if dtype == polars_type:
            return sql
    return "VARCHAR"


def _insert(connection, columns: "_TableColumns", table: str, frame: pl.DataFrame, keys: dict[str, object] | None = None) -> int:
    """One INSERT of `frame`'s columns (the table's others stay NULL); `keys` are constant columns (VARCHAR, or
    INTEGER for a file_key) that DuckDB fills itself (cheaper than a column per row through Arrow)."""
    if frame.height == 0:
        return 0
    keys = keys or {}
    if table in SHARDED_TABLES:
        frame = columns.encode_labels(frame)
    table = columns.target(table, frame, keys)
    stored = columns.of(table)
    unfilled = [name for name in frame.columns if name not in stored]  # a narrow table holds the filled columns only
    if unfilled:
        frame = frame.drop(unfilled)
    constants = "".join(f', ?::{_key_type(value)} AS "{name}"' for name, value in keys.items())
    connection.register("_speclogs_frame", frame.to_arrow(compat_level=pl.CompatLevel.newest()))  # string_view: zero-copy
    try:
        connection.execute(f'INSERT INTO "{table}" BY NAME SELECT *{constants} FROM _speclogs_frame', list(keys.values()))
    finally:
        connection.unregister("_speclogs_frame")
    return frame.height


def _delete_file_rows(connection, columns: _TableColumns, source_file: str) -> None:
    for table in columns.tables_with("source_file"):
        connection.execute(f'DELETE FROM "{table}" WHERE source_file = ?', [source_file])
    for table in columns.tables_with("file_key"):
        connection.execute(
            f'DELETE FROM "{table}" WHERE file_key IN (SELECT file_key FROM _file_keys WHERE source_file = ?)', [source_file]
        )


_FILE_TYPES = {
    "source_file": pl.Utf8, "sha256": pl.Utf8, "run_id": pl.Utf8, "size_bytes": pl.Int64, "total_lines": pl.Int64,
    "parsed_lines": pl.Int64, "continuation_lines": pl.Int64, "unparsed_lines": pl.Int64, "ingested_at": pl.Datetime("us"),
    "kind": pl.Utf8, "invalid_utf8": pl.Int64, "nul_bytes": pl.Int64, "warnings": pl.Utf8, "parse_seconds": pl.Float64,
}


def _file_row(prepared: _Prepared) -> list:
    raw, counts = prepared.raw, prepared.counts
    warnings = list(raw.warnings) + counts.warnings
    return [
        prepared.source_file,
        raw.sha256,
        prepared.item.run.run_id,
        raw.size_bytes,
        counts.total,
        counts.parsed,
        counts.continuation,
        counts.unparsed,
        datetime.now(),
        counts.kind,
        raw.stream.invalid_utf8 if raw.stream is not None else raw.invalid_utf8,
        raw.stream.nul_bytes if raw.stream is not None else raw.nul_bytes,
        json.dumps(warnings) if warnings else None,
        round(prepared.seconds, 6),
    ]


_RUN_FACT_COLUMNS = (
    "cell", "factors", "launch_index", "sglang_version", "model_path", "speculative_algorithm", "tp_size",
    "hostname", "gpu_name", "env", "argv", "run_json", "outcome",
)


_RUN_TYPES = {
    "run_id": pl.Utf8, "run_name": pl.Utf8, "source_dir": pl.Utf8, "cell": pl.Utf8, "factors": pl.Utf8,
    "launch_index": pl.Int32, "sglang_version": pl.Utf8, "model_path": pl.Utf8, "speculative_algorithm": pl.Utf8,
    "tp_size": pl.Int32, "hostname": pl.Utf8, "gpu_name": pl.Utf8, "env": pl.Utf8, "argv": pl.Utf8,
    "run_json": pl.Utf8, "outcome": pl.Utf8, "ingested_at": pl.Datetime("us"),
}


def _upsert_runs(connection, batch: list[_Prepared]) -> None:
    """One statement for the batch: new runs are inserted, known ones keep what the new files do not say."""
    merged: dict[str, dict] = {}
    now = datetime.now()
    for prepared in batch:
        run = prepared.item.run
        row = merged.setdefault(
            run.run_id,
            {"run_id": run.run_id, "run_name": run.run_name, "source_dir": run.source_dir, "cell": run.cell,
             "launch_index": run.launch_index, "ingested_at": now},
        )
        for column in _RUN_FACT_COLUMNS:
            value = prepared.facts.get(column)
            if value is not None and row.get(column) is None:
                row[column] = value
    frame = pl.DataFrame([{c: r.get(c) for c in _RUN_TYPES} for r in merged.values()], schema=_RUN_TYPES, orient="row")
    frame = frame.with_row_index("_position")
    updates = ", ".join(f"{c} = COALESCE(n.{c}, runs.{c})" for c in _RUN_TYPES if c != "run_id")
    connection.register("_speclogs_runs", frame.to_arrow())
    try:
        # known runs keep what the new files do not say; new runs are appended in the order they were met
        connection.execute(f"UPDATE runs SET {updates} FROM _speclogs_runs AS n WHERE runs.run_id = n.run_id")
        connection.execute(
            "INSERT INTO runs BY NAME SELECT * EXCLUDE (_position) FROM _speclogs_runs "
            "WHERE run_id NOT IN (SELECT run_id FROM runs) ORDER BY _position"
        )
    finally:
        connection.unregister("_speclogs_runs")


_LAUNCH_TYPES = {
    "run_id": pl.Utf8, "source_file": pl.Utf8, "launch_no": pl.Int32, "first_line": pl.Int64, "last_line": pl.Int64,
    "start_ts": pl.Datetime("us"), "ready_ts": pl.Datetime("us"), "first_health_200_ts": pl.Datetime("us"),
    "cuda_graph_end_ts": pl.Datetime("us"), "shutdown_ts": pl.Datetime("us"),
}


def _launch_rows(run_id, source_file, starts, facts, total_lines: int) -> list[tuple]:
    """One launches row per server start: its line range and the timestamps of its milestones."""
    if total_lines == 0:
        return []
    starts = sorted(starts)
    bounds = [1] + starts[1:]  # lines before the first server_args belong to launch 1
    first_ts: dict[tuple[int, str], object] = {}
    last_ts: dict[tuple[int, str], object] = {}
    for launch_no, fact, ts in facts:
        key = (launch_no, fact)
        if key not in first_ts or ts < first_ts[key]:
            first_ts[key] = ts
        if key not in last_ts or ts > last_ts[key]:
            last_ts[key] = ts
    rows = []
    for index, first in enumerate(bounds):
        launch_no = index + 1
        last = bounds[index + 1] - 1 if index + 1 < len(bounds) else total_lines
        health = first_ts.get((launch_no, "health_200"))
        ready = first_ts.get((launch_no, "ready")) or health
        rows.append(
            (
                run_id, source_file, launch_no, first, last,
                first_ts.get((launch_no, "server_args")), ready, health,
                last_ts.get((launch_no, "cuda_graph_end")), first_ts.get((launch_no, "sigterm")),
            )
        )
    return rows
