"""The lake: every contract table as hive-partitioned Parquet in a folder — the one module that writes and reads it.

A DuckDB file suits one machine; a lake suits a fleet: many writers over time (one at a time), many readers (DuckDB,
polars, Spark, Trino, ClickHouse) that need nothing of speclogs. Layout (docs/sql.md, "The lake", is the contract):

    DIR/speclogs_lake.json                       format, schema version (written once, checked on every open)
    DIR/<table>/sglang=<version>/day=<YYYY-MM-DD>/part-<commit>-<writer>-<n>.parquet
    DIR/_manifest/<commit>.json                  one per ingest: the files it took in (with sha256) and its parts
    DIR/_staging/<commit>/…                      parts of an ingest still running (no reader looks there)
    DIR/_lock                                    the writer's lock (host, pid, since)

Every part holds the contract columns of its table (schema.sql, as the DuckDB file's tables and views show them:
the same names, order and types; JSON columns as UTF-8 text), in that order, so all parts of a table share one
schema. `runs` parts carry one more column, `lake_commit`: a run touched by several ingests has a row per ingest
(its facts folded as the DuckDB file's writer folds them), and the current row is the latest one.

An ingest writes its parts into `_staging/<commit>/`, then writes its manifest (the commit point), then moves the
parts into place. The next writer finishes a commit whose manifest exists (moves what is left) and removes staging
folders that have none, so a crash never leaves half an ingest visible for longer than until the next ingest.
Nothing is ever rewritten: the lake is append-only, and ingesting the same content again adds no file.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

import speclogs
from speclogs.errors import SpeclogsError, StoreError
from speclogs.ingest.pipeline import DEFAULT_CHUNK_BYTES, Batch, IngestInterrupted, ParsedFile, Tally, first_line, run_pipeline
from speclogs.ingest.records import redacted
from speclogs.ingest.sources import InputFile, discover_inputs
from speclogs.ingest.summary import IngestSummary, ProgressEvent
from speclogs.runrecord import read_run_json
from speclogs.schema import columns
from speclogs.store.database import SCHEMA_VERSION, VIEWS_SQL, no_extensions_connection, schema_views_sql
from speclogs.store.layout import POLARS_TYPES, SOURCE_ONLY_TABLES
from speclogs.store.writer import FILE_TYPES, LAUNCH_TYPES, RUN_TYPES, batch_run_rows, file_row

LAKE_FORMAT = "speclogs.lake/1"
LAKE_FILE = "speclogs_lake.json"
MANIFEST_DIR = "_manifest"
STAGING_DIR = "_staging"
LOCK_FILE = "_lock"
PARTITION_KEYS = ("sglang", "day")  # hive partition columns: not contract columns (runs has sglang_version)
UNKNOWN = "unknown"
COMMIT_COLUMN = "lake_commit"
# A writer gathers rows per (table, partition); once it holds this much in all (Arrow size), its biggest buffer is
# written as a part: with zstd, parts of up to ~15 MB on disk (a size every engine reads well), not one per log, and
# a writer's memory stays bounded (2M lines in one process: 0.5 GB peak RSS; 0.9 GB without the bound and compaction).
BUFFER_BYTES = 96 << 20
ROW_GROUP_ROWS = 122_880  # DuckDB's own row group: readers split work along row groups
FAILURES = (pl.exceptions.PolarsError, SpeclogsError, ValueError, OSError)
_PARTITION_TEXT = re.compile(r"[^A-Za-z0-9._+-]")


# ----------------------------------------------------------------------------------------------------------------
# the contract: what each table looks like to a user of the DuckDB file


def contract_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """table → ((column, DuckDB type), …) of every table a user queries in a speclogs DuckDB file (speclogs.schema).
    `line_accounting` and `meta` are views the lake computes, not tables it stores."""
    return {table: tuple(known.items()) for table, known in sorted(columns().items()) if not table.startswith("_") and table != "meta"}


def polars_schema(table: str) -> dict[str, pl.DataType]:
    return {name: POLARS_TYPES[sql_type] for name, sql_type in contract_columns()[table]}


# ----------------------------------------------------------------------------------------------------------------
# writing: the pipeline's sink


@dataclass
class SinkResult:
    """What one writer staged for a commit: its parts, the files it took in, its runs rows per batch (in order)."""

    parts: list[dict] = field(default_factory=list)       # {"path" (relative to the lake), "table", "rows", "bytes"}
    files: list[dict] = field(default_factory=list)       # manifest entries: source_file, sha256, run_id, kind, rows
    run_batches: list[dict] = field(default_factory=list)  # [{run_id: runs row}] per batch, as writer.batch_run_rows
    run_partitions: dict = field(default_factory=dict)    # run_id → (sglang, day) of its first file
    notes: list[str] = field(default_factory=list)


class LakeSink:
    """The pipeline's sink (speclogs.ingest.pipeline.Sink) for a lake: rows go to Parquet parts in the staging
    folder of one commit. `writer` names this writer's parts apart from other writers' of the same commit (Ray
    tasks). `finish()` writes what is still buffered and returns the SinkResult for `commit`."""

    def __init__(self, lake_dir: Path, commit_id: str, writer: str, stored: dict[str, dict[str, int]]) -> None:
        self.lake_dir = Path(lake_dir)
        self.commit_id = commit_id
        self.writer = writer
        self._stored = stored
        self.result = SinkResult()
        self._buffers: dict[tuple[str, tuple[str, str]], list[pl.DataFrame]] = {}
        self._sizes: dict[tuple[str, tuple[str, str]], int] = {}
        self._written = 0
        self._partitions: dict[str, tuple[str, str]] = {}

    def stored(self) -> list[tuple[str, str, int]]:
        return [(source, sha, size) for source, shas in self._stored.items() for sha, size in shas.items()]

    def write_batch(self, batch: Batch, tally: Tally) -> None:
        try:
            frames = self._contract_frames(batch)
        except FAILURES:
            if len(batch.files) == 1:
                _failed(batch.files[0], tally)
                return
            for index, parsed in enumerate(batch.files):  # only the file that fails is left out
                one = batch.of(index)
                try:
                    frames = self._contract_frames(one)
                except FAILURES:
                    _failed(parsed, tally)
                    continue
                self._take(frames, one.files, tally)
            return
        self._take(frames, batch.files, tally)

    def write_stream(self, parsed: ParsedFile, produce, tally: Tally) -> None:
        """A big log: its rows are gathered apart from the other files' (written in parts of their own as they grow),
        so that when it fails nothing of it is kept."""
        own = LakeSink(self.lake_dir, self.commit_id, f"{self.writer}s{self._written}", self._stored)
        own._partitions = self._partitions
        own._written = 0
        started = time.perf_counter()
        single = Batch([parsed], {})

        def emit(table: str, frame: pl.DataFrame) -> None:
            for key, rows in own._contract_frames(Batch([parsed], {table: frame})):
                own._add(key, rows)

        try:
            produce(emit)
        except FAILURES as error:
            for part in own.result.parts:
                (self.lake_dir / part["path"]).unlink(missing_ok=True)
            tally.fail(f"failed and left out ({type(error).__name__}: {first_line(error)})", parsed.source_file)
            return
        parsed.seconds = time.perf_counter() - started
        self.result.parts.extend(own.result.parts)
        self.result.notes.extend(note for note in own.result.notes if note not in self.result.notes)
        for key, frames in own._buffers.items():  # what is left joins this writer's buffers
            for frame in frames:
                self._add(key, frame)
        self._written += 1
        self._take([], single.files, tally)

    def finish(self) -> SinkResult:
        for key in list(self._buffers):
            self._flush(key)
        return self.result

    # ------------------------------------------------------------------------------------------------------------

    def _take(self, frames: list, files: list[ParsedFile], tally: Tally) -> None:
        """Buffer a batch's rows and its files' own rows (files, launches) and runs facts; count the files in."""
        for key, rows in frames:
            self._add(key, rows)
        partition_of = {parsed.source_file: self.partition(parsed.item) for parsed in files}
        for parsed in files:
            partition = partition_of[parsed.source_file]
            if parsed.launch_rows:
                launches = pl.DataFrame(parsed.launch_rows, schema=LAUNCH_TYPES, orient="row")
                self._add(("launches", partition), _typed("launches", launches, self.result.notes))
            files_row = pl.DataFrame([file_row(parsed)], schema=FILE_TYPES, orient="row")
            self._add(("files", partition), _typed("files", files_row, self.result.notes))
            self.result.files.append({
                "source_file": parsed.source_file, "sha256": parsed.raw.sha256, "run_id": parsed.item.run.run_id,
                "kind": parsed.item.kind, "size_bytes": parsed.raw.size_bytes, "rows": dict(sorted(parsed.counts.rows.items())),
            })
            self.result.run_partitions.setdefault(parsed.item.run.run_id, partition)
            tally.add(parsed)
        if files:
            self.result.run_batches.append(batch_run_rows(files))

    def _contract_frames(self, batch: Batch) -> list[tuple[tuple[str, tuple[str, str]], pl.DataFrame]]:
        """The batch's rows as contract frames, one per (table, partition): key columns from each row's file."""
        files = batch.files
        partitions = [self.partition(parsed.item) for parsed in files]
        out = []
        for table, frame in batch.tables.items():
            if frame.height == 0:
                continue
            index = frame.get_column("file")
            keyed = frame.with_columns(
                pl.Series("source_file", [p.source_file for p in files], dtype=pl.Utf8).gather(index),
                *([] if table in SOURCE_ONLY_TABLES else
                  [pl.Series("run_id", [p.item.run.run_id for p in files], dtype=pl.Utf8).gather(index)]),
            )
            distinct = sorted(set(partitions))
            if len(distinct) == 1:
                out.append(((table, distinct[0]), _typed(table, keyed.drop("file"), self.result.notes)))
                continue
            codes = pl.Series("_partition", [distinct.index(p) for p in partitions], dtype=pl.Int32).gather(index)
            keyed = keyed.with_columns(codes)
            for code, partition in enumerate(distinct):
                own = keyed.filter(pl.col("_partition") == code).drop("_partition", "file")
                if own.height:
                    out.append(((table, partition), _typed(table, own, self.result.notes)))
        return out

    def _add(self, key: tuple[str, tuple[str, str]], frame: pl.DataFrame) -> None:
        if frame.height == 0:
            return
        # a copy with its own compact buffers: a parsed frame's text columns are views into the whole chunk's text,
        # which buffering them would keep alive (measured: 0.3 GB more peak RSS for 2M lines)
        frame = pl.from_arrow(frame.to_arrow(compat_level=pl.CompatLevel.oldest()))
        self._buffers.setdefault(key, []).append(frame)
        self._sizes[key] = self._sizes.get(key, 0) + frame.estimated_size()
        if sum(self._sizes.values()) >= BUFFER_BYTES:
            self._flush(max(self._sizes, key=self._sizes.__getitem__))

    def _flush(self, key: tuple[str, tuple[str, str]]) -> None:
        frames = self._buffers.pop(key, [])
        self._sizes.pop(key, None)
        if not frames:
            return
        table, (version, day) = key
        frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed", rechunk=False)
        frame = redacted(table, _conform(table, frame))
        relative = Path(table) / f"sglang={version}" / f"day={day}" / f"part-{self.commit_id}-{self.writer}-{self._written}.parquet"
        self._written += 1
        path = self.lake_dir / STAGING_DIR / self.commit_id / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(path, compression="zstd", statistics=True, row_group_size=ROW_GROUP_ROWS)
        self.result.parts.append({"path": str(Path(STAGING_DIR) / self.commit_id / relative), "table": table,
                                  "rows": frame.height, "bytes": path.stat().st_size})

    def partition(self, item: InputFile) -> tuple[str, str]:
        """(sglang, day) of a file: the run's SGLang version and start day from its run.json (a launcher launch),
        else 'unknown' and the day the file was last modified (stdin: today)."""
        run = item.run
        cached = self._partitions.get(run.run_id)
        if cached is not None:
            return cached
        version, day = UNKNOWN, None
        record = read_run_json(run.source_dir) if run.launch_index is not None and run.source_dir else None
        if record is not None:
            if record.sglang_version:
                version = _PARTITION_TEXT.sub("_", record.sglang_version)
            spawn = record.timestamps.get("spawn")
            if isinstance(spawn, str) and re.match(r"\d{4}-\d{2}-\d{2}", spawn):
                day = spawn[:10]
        if day is None:
            try:
                day = dt.date.fromtimestamp(item.path.stat().st_mtime).isoformat() if item.path is not None else None
            except OSError:
                day = None
            day = day or dt.date.today().isoformat()
        partition = (version, day)
        if run.launch_index is not None:
            self._partitions[run.run_id] = partition  # a launch's files share its run.json
        return partition


def _failed(parsed: ParsedFile, tally: Tally) -> None:
    import sys

    error = sys.exc_info()[1]
    tally.fail(f"failed and left out ({type(error).__name__}: {first_line(error)})", parsed.source_file)


def _typed(table: str, frame: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """`frame`'s contract columns cast to their contract types (what cannot be cast fails here, with its file); the
    columns it does not fill stay out until the part is written (a full-width frame of NULLs costs memory: 8 bytes a
    row per empty numeric column). Columns and tables a user's grammar adds are said in `notes`."""
    contract = contract_columns().get(table)
    if contract is None:
        _note(notes, f"table {table} is not in the speclogs schema: written to the lake for a grammar of yours")
        return frame
    types = {name: POLARS_TYPES[sql_type] for name, sql_type in contract}
    for name in frame.columns:
        if name not in types:
            _note(notes, f"column {table}.{name} is not in the speclogs schema: a grammar of yours fills it")
    return frame.with_columns(pl.col(name).cast(types[name]) for name in frame.columns if name in types)


def _conform(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with its table's contract columns, in contract order and types (NULL where it has none), then any
    column a user's grammar added."""
    contract = contract_columns().get(table)
    if contract is None:
        return frame
    names = {name for name, _ in contract}
    columns = [(pl.col(name).cast(POLARS_TYPES[sql_type]) if name in frame.columns
                else pl.lit(None, dtype=POLARS_TYPES[sql_type])).alias(name) for name, sql_type in contract]
    return frame.select(columns + [name for name in frame.columns if name not in names])


def _note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)


def _read_json(path: Path) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


# ----------------------------------------------------------------------------------------------------------------
# one writer at a time; committing


def new_commit_id() -> str:
    """Sortable by time: c20261201T112233123456-1a2b3c4d."""
    return "c" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f") + "-" + uuid.uuid4().hex[:8]


class LakeWriter:
    """The lake opened for writing: its lock held, an interrupted commit finished or undone. A context manager."""

    def __init__(self, lake_dir: str | Path) -> None:
        self.lake_dir = Path(lake_dir).resolve()
        self._locked = False

    def __enter__(self) -> "LakeWriter":
        _check_or_create(self.lake_dir)
        self._lock()
        try:
            self._recover()
        except OSError as error:
            self._unlock()
            raise StoreError(f"cannot recover the lake {self.lake_dir}: {error}", hint="check its permissions") from error
        return self

    def __exit__(self, *exc) -> None:
        self._unlock()

    def _lock(self) -> None:
        path = self.lake_dir / LOCK_FILE
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": dt.datetime.now().isoformat(timespec="seconds")}
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                other = _read_json(path)
                if other.get("host") == holder["host"] and isinstance(other.get("pid"), int) and not _alive(other["pid"]):
                    path.unlink(missing_ok=True)  # left by a writer of this host that is gone
                    continue
                raise StoreError(
                    f"the lake {self.lake_dir} is being written by {other.get('host', '?')} pid {other.get('pid', '?')} "
                    f"(since {other.get('since', '?')})",
                    hint=f"wait for it to finish; if that process is gone, remove {path}",
                ) from None
            with os.fdopen(fd, "w") as handle:
                json.dump(holder, handle)
            self._locked = True
            return

    def _unlock(self) -> None:
        if self._locked:
            (self.lake_dir / LOCK_FILE).unlink(missing_ok=True)
            self._locked = False

    def _recover(self) -> None:
        """Finish the commits whose manifest is written (move their parts in), remove staging without a manifest."""
        staging = self.lake_dir / STAGING_DIR
        if not staging.is_dir():
            return
        for folder in sorted(staging.iterdir()):
            manifest = _read_json(self.lake_dir / MANIFEST_DIR / f"{folder.name}.json")
            if manifest:
                _move_parts(self.lake_dir, manifest)
            shutil.rmtree(folder, ignore_errors=True)

    def stored(self) -> dict[str, dict[str, int]]:
        """source_file → {sha256: size_bytes} of the contents the lake holds for it (from the manifests)."""
        stored: dict[str, dict[str, int]] = {}
        for manifest in manifests(self.lake_dir):
            for entry in manifest.get("files", []):
                stored.setdefault(entry["source_file"], {})[entry["sha256"]] = int(entry.get("size_bytes") or 0)
        return stored

    def commit(self, commit_id: str, results: Sequence[SinkResult], writer: dict) -> dict:
        """Make what `results` staged part of the lake: the touched runs' new rows, the manifest, the parts in place.
        Returns the manifest."""
        parts = [part for result in results for part in result.parts]
        files = [entry for result in results for entry in result.files]
        parts.extend(self._write_runs(commit_id, results))
        manifest = {
            "format": LAKE_FORMAT, "commit": commit_id, "committed_at": dt.datetime.now().isoformat(timespec="seconds"),
            "speclogs_version": speclogs.__version__, "schema_version": SCHEMA_VERSION, "writer": writer,
            "files": files,
            "parts": [{**part, "path": str(Path(part["path"]).relative_to(Path(STAGING_DIR) / commit_id))} for part in parts],
        }
        if not files and not parts:
            shutil.rmtree(self.lake_dir / STAGING_DIR / commit_id, ignore_errors=True)
            return manifest
        folder = self.lake_dir / MANIFEST_DIR
        folder.mkdir(exist_ok=True)
        _write_json_atomic(folder / f"{commit_id}.json", manifest)  # the commit point
        _move_parts(self.lake_dir, manifest)
        shutil.rmtree(self.lake_dir / STAGING_DIR / commit_id, ignore_errors=True)
        return manifest

    def _write_runs(self, commit_id: str, results: Sequence[SinkResult]) -> list[dict]:
        """One runs row per run the commit touched: the lake's current row, then each batch's row in order, a fact
        of a later batch replacing an earlier one (as the DuckDB file's writer does: COALESCE(new, old))."""
        batches = [batch for result in results for batch in result.run_batches]
        if not batches:
            return []
        touched = {run_id for batch in batches for run_id in batch}
        current = {row["run_id"]: row for row in _current_runs(self.lake_dir, touched)}
        for batch in batches:
            for run_id, new in batch.items():
                old = current.get(run_id, {})
                current[run_id] = {column: new.get(column) if new.get(column) is not None else old.get(column) for column in RUN_TYPES}
        partitions: dict[str, tuple[str, str]] = {}
        for result in results:
            for run_id, partition in result.run_partitions.items():
                partitions.setdefault(run_id, partition)
        order = list(dict.fromkeys(run_id for batch in batches for run_id in batch))
        sink = LakeSink(self.lake_dir, commit_id, "runs", {})
        for run_id in order:
            row = pl.DataFrame([current[run_id]], schema=RUN_TYPES, orient="row")
            frame = _typed("runs", row, []).with_columns(pl.lit(commit_id).alias(COMMIT_COLUMN))
            sink._add(("runs", partitions.get(run_id, (UNKNOWN, dt.date.today().isoformat()))), frame)
        return sink.finish().parts


def _current_runs(lake_dir: Path, run_ids: set[str]) -> list[dict]:
    if not run_ids or not _parts(lake_dir, "runs"):
        return []
    connection = connect_lake(lake_dir)
    try:
        cursor = connection.execute("SELECT * FROM runs WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [sorted(run_ids)])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]
    finally:
        connection.close()


def _move_parts(lake_dir: Path, manifest: dict) -> None:
    staged = lake_dir / STAGING_DIR / manifest["commit"]
    for part in manifest["parts"]:
        source, target = staged / part["path"], lake_dir / part["path"]
        if source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)


def _write_json_atomic(path: Path, document: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_or_create(lake_dir: Path) -> None:
    """The lake's format file: created in a new (or empty) folder, checked in an existing lake."""
    marker = lake_dir / LAKE_FILE
    if marker.exists():
        _check_format(lake_dir)
        return
    if lake_dir.exists() and any(lake_dir.iterdir()):
        raise StoreError(f"{lake_dir} is not a speclogs lake (no {LAKE_FILE}) and not empty",
                         hint="give --lake a new or empty folder")
    try:
        lake_dir.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(marker, {"format": LAKE_FORMAT, "schema_version": SCHEMA_VERSION,
                                    "partitioning": list(PARTITION_KEYS), "created_by": f"speclogs {speclogs.__version__}"})
    except OSError as error:
        raise StoreError(f"cannot create the lake {lake_dir}: {error.strerror}", hint="check the path and its permissions") from error


def _check_format(lake_dir: Path) -> dict:
    marker = _read_json(lake_dir / LAKE_FILE)
    if not marker:
        raise StoreError(f"no speclogs lake at {lake_dir} ({LAKE_FILE} missing or unreadable)",
                         hint="run `speclogs ingest PATH… --lake DIR` first")
    if marker.get("format") != LAKE_FORMAT or marker.get("schema_version") != SCHEMA_VERSION:
        raise StoreError(f"{lake_dir} is a lake of another speclogs version ({marker.get('format')}, schema "
                         f"{marker.get('schema_version')}; this one writes {LAKE_FORMAT}, schema {SCHEMA_VERSION})",
                         hint="ingest into a new --lake folder; its Parquet files stay readable by any engine")
    return marker


def manifests(lake_dir: str | Path) -> list[dict]:
    """The committed manifests, oldest first."""
    folder = Path(lake_dir) / MANIFEST_DIR
    if not folder.is_dir():
        return []
    return [_read_json(path) for path in sorted(folder.glob("*.json"))]


# ----------------------------------------------------------------------------------------------------------------
# reading: DuckDB views with the contract's names


def _parts(lake_dir: Path, table: str) -> list[Path]:
    return sorted((Path(lake_dir) / table).glob("*=*/*=*/*.parquet"))


def table_glob(lake_dir: str | Path, table: str) -> str:
    """The glob of a table's parts: what `read_parquet(…, hive_partitioning = true)` or Spark is given."""
    return str(Path(lake_dir).resolve() / table / "*" / "*" / "*.parquet")


def connect_lake(lake_dir: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection whose views have the contract's names, columns and types over the lake's
    Parquet (what `speclogs sql --lake` and `speclogs report --lake` query). Raises StoreError without a lake."""
    lake_dir = Path(lake_dir).resolve()
    if not lake_dir.is_dir():
        raise StoreError(f"no lake at {lake_dir}", hint="run `speclogs ingest PATH… --lake DIR` first, or pass --lake")
    _check_format(lake_dir)
    connection = no_extensions_connection()
    try:
        for table, columns in contract_columns().items():
            connection.execute(_view_sql(lake_dir, table, columns))
        known = set(contract_columns())
        for folder in sorted(p for p in lake_dir.iterdir() if p.is_dir() and not p.name.startswith("_")):
            if folder.name not in known and _parts(lake_dir, folder.name):  # a table of a user's grammar
                glob = _sql_text(table_glob(lake_dir, folder.name))
                connection.execute(f'CREATE VIEW "{folder.name}" AS SELECT * FROM '
                                   f"read_parquet({glob}, union_by_name = true, hive_partitioning = false)")
        connection.execute(VIEWS_SQL)
        connection.execute(schema_views_sql())
        connection.execute(f"CREATE VIEW meta AS SELECT 'schema_version' AS key, '{SCHEMA_VERSION}' AS value")
    except duckdb.Error as error:
        connection.close()
        raise StoreError(f"cannot read the lake {lake_dir}: {error}", hint="is every Parquet file a speclogs part?") from error
    return connection


def _view_sql(lake_dir: Path, table: str, columns: tuple[tuple[str, str], ...]) -> str:
    casts = ", ".join(f'CAST("{name}" AS {sql_type}) AS "{name}"' for name, sql_type in columns)
    if not _parts(lake_dir, table):
        return _empty_view_sql(table, columns)
    source = f"read_parquet({_sql_text(table_glob(lake_dir, table))}, union_by_name = true, hive_partitioning = false)"
    names = ", ".join(f'"{name}"' for name, _ in columns)
    if table == "runs":
        return (f'CREATE VIEW runs AS SELECT {casts} FROM {source} '
                f"QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY {COMMIT_COLUMN} DESC) = 1")
    extra = f", * EXCLUDE ({names})"
    return f'CREATE VIEW "{table}" AS SELECT {casts}{extra} FROM {source}'


def _empty_view_sql(table: str, columns: tuple[tuple[str, str], ...]) -> str:
    typed = ", ".join(f'CAST(NULL AS {sql_type}) AS "{name}"' for name, sql_type in columns)
    return f'CREATE VIEW "{table}" AS SELECT {typed} WHERE false'


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# ----------------------------------------------------------------------------------------------------------------
# `speclogs ingest … --lake DIR` in one process


def ingest_lake(
    paths: Sequence[str | Path],
    lake_dir: str | Path,
    *,
    run_name: str | None = None,
    on_progress: Callable[[ProgressEvent], None] | None = None,
    grammar_paths: Sequence[Path] = (),
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ray: str | None = None,
    num_cpus: int | None = None,
) -> IngestSummary:
    """Ingest files/directories/'-' into the lake at `lake_dir` (created when new): the same pipeline as
    `ingest_paths`, its rows written as Parquet parts, committed at the end. Content the lake holds is skipped;
    a changed file is skipped with a note (a lake is append-only: nothing is replaced). With `ray` ('local',
    'auto' or a cluster's address) the files are parsed by tasks on that Ray cluster (speclogs.store.fanout)."""
    if ray is not None:
        from speclogs.store.fanout import ingest_lake_ray

        return ingest_lake_ray(paths, lake_dir, ray, run_name=run_name, on_progress=on_progress,
                               grammar_paths=grammar_paths, chunk_bytes=chunk_bytes, num_cpus=num_cpus)
    started = time.perf_counter()
    lake_dir = Path(lake_dir).resolve()
    discovery = discover_inputs([str(p) for p in paths], run_name=run_name, known_runs=stored_run_names(lake_dir))
    with LakeWriter(lake_dir) as lake:
        commit_id = new_commit_id()
        sink = LakeSink(lake_dir, commit_id, "w0", lake.stored())
        try:
            tally = run_pipeline(discovery, sink, engine_factory(tuple(grammar_paths)), on_progress=on_progress,
                                 chunk_bytes=chunk_bytes)
            result = sink.finish()
            lake.commit(commit_id, [result], {"engine": "single process", "host": socket.gethostname()})
        except KeyboardInterrupt:
            shutil.rmtree(lake_dir / STAGING_DIR / commit_id, ignore_errors=True)
            raise IngestInterrupted("interrupted: nothing of this call is in the lake (it commits once, at the end); "
                                    "the lake is as it was") from None
        except BaseException:
            shutil.rmtree(lake_dir / STAGING_DIR / commit_id, ignore_errors=True)
            raise
    tally.warnings.extend(result.notes)
    return tally.summary(str(lake_dir), time.perf_counter() - started)


def engine_factory(grammar_paths: tuple[Path, ...]):
    def engine():
        from speclogs.grammar import load_grammars
        from speclogs.ingest.classify import compile_engine

        return compile_engine(load_grammars(grammar_paths))

    return engine


def stored_run_names(lake_dir: Path) -> dict[str, str]:
    """run_id → run_name of the runs a lake holds (none when there is no lake yet)."""
    if not (lake_dir / LAKE_FILE).exists() or not _parts(lake_dir, "runs"):
        return {}
    connection = connect_lake(lake_dir)
    try:
        return dict(connection.execute("SELECT run_id, run_name FROM runs").fetchall())
    finally:
        connection.close()
