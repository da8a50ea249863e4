"""The lake: every contract table as a Delta Lake table in a folder (docs/fleet.md, "The lake", is the contract).

Each table holds its contract columns (JSON as text); a column added to the schema later is merged into the Delta
table by the first ingest that fills it, and readers give an older lake's rows NULL there. Delta commits one table at
a time, so an ingest's commit point is its last commit, to `files`, whose metadata records the version of every table
it completes (`speclogs.versions`): speclogs' readers open each table at that version, and the next ingest first
restores every table to it, taking back what a killed ingest appended. `runs` is merged (one row a run).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from speclogs.errors import SpeclogsError, StoreError
from speclogs.ingest.pipeline import DEFAULT_CHUNK_BYTES, Batch, IngestInterrupted, ParsedFile, Tally, first_line, run_pipeline
from speclogs.ingest.records import redacted
from speclogs.ingest.sources import discover_inputs
from speclogs.ingest.summary import IngestSummary, ProgressEvent
from speclogs.schema import columns
from speclogs.store import compile_grammars
from speclogs.store.database import SCHEMA_VERSION, VIEWS_SQL, no_extensions_connection, schema_views_sql
from speclogs.store.layout import POLARS_TYPES, with_keys
from speclogs.store.writer import FILE_TYPES, LAUNCH_TYPES, RUN_TYPES, batch_run_rows, file_row

VERSIONS_KEY = "speclogs.versions"
# A writer gathers rows per table; once it holds this much in all (Arrow size), its biggest buffer is appended as
# one Delta commit: data files of a size every engine reads well, and a writer's memory stays bounded.
BUFFER_BYTES = 96 << 20
FAILURES = (pl.exceptions.PolarsError, SpeclogsError, ValueError, OSError)


def contract_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """table → ((column, DuckDB type), …) of every table a user queries in a speclogs DuckDB file (speclogs.schema).
    `line_accounting` and `meta` are views the lake computes, not tables it stores."""
    return {table: tuple(known.items()) for table, known in sorted(columns().items()) if not table.startswith("_") and table != "meta"}


def _deltalake():
    try:
        import deltalake
    except ImportError as error:
        raise StoreError("--lake needs deltalake, which is not installed here",
                         hint="pip install 'speclogs[fleet]' (or pip install deltalake)") from error
    return deltalake


# ----------------------------------------------------------------------------------------------------------------
# where rows go: Delta tables (one process, or the Ray driver), or a list a Ray task hands back


class DeltaTables:
    """Appends to the lake's Delta tables; `mark()`/`undo(mark)` take back what was appended since the mark."""

    def __init__(self, lake_dir: Path) -> None:
        self.lake_dir = lake_dir

    def append(self, table: str, frame: pl.DataFrame, metadata: dict[str, str] | None = None) -> None:
        dl = _deltalake()
        frame = redacted(table, frame)  # the one door into the lake: nothing secret goes through it
        dl.write_deltalake(self.lake_dir / table, frame.to_arrow(), mode="append", schema_mode="merge",
                           writer_properties=dl.WriterProperties(compression="ZSTD"),
                           commit_properties=dl.CommitProperties(custom_metadata=metadata) if metadata else None)

    def mark(self) -> dict[str, int]:
        return table_versions(self.lake_dir)

    def undo(self, mark: dict[str, int]) -> None:
        restore(self.lake_dir, mark)

    def rollback(self) -> None:
        """Take back what was appended since the last commit."""
        restore(self.lake_dir, committed_versions(self.lake_dir))


class Collected:
    """What a Ray task parsed, kept in memory for the driver to append (one writer)."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, pl.DataFrame]] = []

    def append(self, table: str, frame: pl.DataFrame) -> None:
        self.frames.append((table, frame))

    def mark(self) -> int:
        return len(self.frames)

    def undo(self, mark: int) -> None:
        del self.frames[mark:]


# ----------------------------------------------------------------------------------------------------------------
# writing: the pipeline's sink


@dataclass
class SinkResult:
    """What a sink took in besides the rows it appended: the files' rows, its runs rows per batch, notes."""

    files: list[dict] = field(default_factory=list)        # `files` rows (writer.file_row): appended at the commit
    run_batches: list[dict] = field(default_factory=list)  # [{run_id: runs row}] per batch, as writer.batch_run_rows
    notes: list[str] = field(default_factory=list)


class LakeSink:
    """The pipeline's sink (speclogs.ingest.pipeline.Sink) for a lake: rows buffered per table, appended to `out`
    (DeltaTables or Collected) as the buffers grow and at `finish()`, which returns the SinkResult to commit."""

    def __init__(self, out, stored: dict[str, dict[str, int]]) -> None:
        self.out = out
        self._stored = stored
        self.result = SinkResult()
        self._buffers: dict[str, list[pl.DataFrame]] = {}
        self._sizes: dict[str, int] = {}

    def stored(self) -> list[tuple[str, str, int]]:
        return [(source, sha, size) for source, shas in self._stored.items() for sha, size in shas.items()]

    def write_batch(self, batch: Batch, tally: Tally) -> None:
        try:
            frames = self._contract_frames(batch)
        except FAILURES:
            if len(batch.files) == 1:
                _failed(batch.files[0], tally)
                return
            for index in range(len(batch.files)):  # only the file that fails is left out
                one = batch.of(index)
                try:
                    frames = self._contract_frames(one)
                except FAILURES:
                    _failed(one.files[0], tally)
                    continue
                self._take(frames, one.files, tally)
            return
        self._take(frames, batch.files, tally)

    def write_stream(self, parsed: ParsedFile, produce, tally: Tally) -> None:
        """A big log: its rows are gathered apart from the other files' (appended as they grow), so that when it fails
        nothing of it is kept."""
        own = LakeSink(self.out, self._stored)
        mark = self.out.mark()
        started = time.perf_counter()

        def emit(table: str, frame: pl.DataFrame) -> None:
            for name, rows in own._contract_frames(Batch([parsed], {table: frame})):
                own._add(name, rows)

        try:
            produce(emit)
        except FAILURES:
            self.out.undo(mark)
            _failed(parsed, tally)
            return
        parsed.seconds = time.perf_counter() - started
        self.result.notes.extend(note for note in own.result.notes if note not in self.result.notes)
        for name, frames in own._buffers.items():  # what is left joins this writer's buffers
            for frame in frames:
                self._add(name, frame)
        self._take([], [parsed], tally)

    def finish(self) -> SinkResult:
        for name in list(self._buffers):
            self._flush(name)
        return self.result

    def _take(self, frames: list, files: list[ParsedFile], tally: Tally) -> None:
        """Buffer a batch's rows and its files' launches; keep its files rows and runs facts for the commit."""
        for name, rows in frames:
            self._add(name, rows)
        for parsed in files:
            if parsed.launch_rows:
                launches = pl.DataFrame(parsed.launch_rows, schema=LAUNCH_TYPES, orient="row")
                self._add("launches", _typed("launches", launches, self.result.notes))
            self.result.files.append(file_row(parsed))
            tally.add(parsed)
        if files:
            self.result.run_batches.append(batch_run_rows(files))

    def _contract_frames(self, batch: Batch) -> list[tuple[str, pl.DataFrame]]:
        """The batch's rows as contract frames, one per table: key columns from each row's file."""
        files = batch.files
        out = []
        for table, frame in batch.tables.items():
            if frame.height == 0:
                continue
            keyed = with_keys(table, frame, [(p.item.run.run_id, p.source_file) for p in files])
            keyed = keyed.with_columns(pl.col(pl.Categorical).cast(pl.Utf8))  # Delta Lake: plain strings
            out.append((table, _typed(table, keyed, self.result.notes)))
        return out

    def _add(self, table: str, frame: pl.DataFrame) -> None:
        if frame.height == 0:
            return
        # a copy with its own compact buffers: a parsed frame's text columns are views into the whole chunk's text,
        # which buffering them would keep alive
        frame = pl.from_arrow(frame.to_arrow(compat_level=pl.CompatLevel.oldest()))
        self._buffers.setdefault(table, []).append(frame)
        self._sizes[table] = self._sizes.get(table, 0) + frame.estimated_size()
        if sum(self._sizes.values()) >= BUFFER_BYTES:
            self._flush(max(self._sizes, key=self._sizes.__getitem__))

    def _flush(self, table: str) -> None:
        frames = self._buffers.pop(table, [])
        self._sizes.pop(table, None)
        if frames:
            frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed", rechunk=False)
            self.out.append(table, _conform(table, frame))


def _failed(parsed: ParsedFile, tally: Tally) -> None:
    error = sys.exc_info()[1]
    tally.fail(f"failed and left out ({type(error).__name__}: {first_line(error)})", parsed.source_file)


def _typed(table: str, frame: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """`frame`'s contract columns cast to their contract types (what cannot be cast fails here, with its file).
    Columns and tables a user's grammar adds are said in `notes`."""
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
    column a user's grammar added: every commit of a table has one schema, and a new column merges in."""
    contract = contract_columns().get(table)
    if contract is None:
        return frame
    names = {name for name, _ in contract}
    typed = [(pl.col(name).cast(POLARS_TYPES[sql_type]) if name in frame.columns
              else pl.lit(None, dtype=POLARS_TYPES[sql_type])).alias(name) for name, sql_type in contract]
    return frame.select(typed + [name for name in frame.columns if name not in names])


def _note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)


# ----------------------------------------------------------------------------------------------------------------
# versions, recovery, the commit


def table_names(lake_dir: Path) -> list[str]:
    """The Delta tables in the lake folder."""
    if not lake_dir.is_dir():
        return []
    return sorted(p.name for p in lake_dir.iterdir() if (p / "_delta_log").is_dir())


def table_versions(lake_dir: Path) -> dict[str, int]:
    dl = _deltalake()
    return {name: dl.DeltaTable(lake_dir / name).version() for name in table_names(lake_dir)}


def committed_versions(lake_dir: str | Path) -> dict[str, int]:
    """table → the version of it that the last completed ingest committed ({} before the first)."""
    dl = _deltalake()
    files = Path(lake_dir) / "files"
    if not (files / "_delta_log").is_dir():
        return {}
    last = dl.DeltaTable(files).history(1)  # only a commit point writes `files`
    return {name: int(version) for name, version in json.loads(last[0].get(VERSIONS_KEY, "{}")).items()}


def restore(lake_dir: Path, versions: dict[str, int]) -> None:
    """Every table back to its version in `versions` (a table it lacks: emptied) — what an interrupted ingest or a
    failed big log appended is taken back, as new commits (the Delta log keeps the history)."""
    dl = _deltalake()
    for name in table_names(lake_dir):
        table = dl.DeltaTable(lake_dir / name)
        if name not in versions:
            if table.version() >= 0 and table.file_uris():
                table.delete()
        elif table.version() > versions[name]:
            table.restore(versions[name])


def open_for_writing(lake_dir: Path) -> DeltaTables:
    """The lake (created when new) with what an interrupted ingest left taken back. Raises StoreError for a folder
    that is neither empty nor a lake."""
    if lake_dir.exists() and any(lake_dir.iterdir()) and not table_names(lake_dir):
        raise StoreError(f"{lake_dir} is not a speclogs lake (no Delta tables) and not empty",
                         hint="give --lake a new or empty folder")
    try:
        lake_dir.mkdir(parents=True, exist_ok=True)
        restore(lake_dir, committed_versions(lake_dir))
    except OSError as error:
        raise StoreError(f"cannot open the lake {lake_dir}: {error}", hint="check the path and its permissions") from error
    return DeltaTables(lake_dir)


def stored_files(lake_dir: Path) -> dict[str, dict[str, int]]:
    """source_file → {sha256: size_bytes} of the contents the lake holds."""
    frame = read_table(lake_dir, "files")
    stored: dict[str, dict[str, int]] = {}
    if frame is not None:
        for source, sha, size in frame.select("source_file", "sha256", "size_bytes").collect().iter_rows():
            stored.setdefault(source, {})[sha] = int(size or 0)
    return stored


def commit(out: DeltaTables, results: Sequence[SinkResult]) -> None:
    """Complete an ingest whose rows are appended: merge the runs rows it touched, then append its files rows with
    every table's version (the commit point)."""
    files = [row for result in results for row in result.files]
    if not files:
        return
    _merge_runs(out.lake_dir, [batch for result in results for batch in result.run_batches])
    versions = table_versions(out.lake_dir)
    versions["files"] = versions.get("files", -1) + 1
    out.append("files", _conform("files", pl.DataFrame(files, schema=FILE_TYPES, orient="row")),
               {VERSIONS_KEY: json.dumps(versions, sort_keys=True)})


def _merge_runs(lake_dir: Path, batches: list[dict]) -> None:
    """One runs row per run: the lake's row, then each batch's in order, a fact of a later batch replacing an
    earlier one (as the DuckDB file's writer does: COALESCE(new, old))."""
    dl = _deltalake()
    current = {}
    existing = read_table(lake_dir, "runs")
    touched = list(dict.fromkeys(run_id for batch in batches for run_id in batch))  # the DuckDB file's row order
    if existing is not None:
        current = {row["run_id"]: row for row in existing.filter(pl.col("run_id").is_in(touched)).collect().to_dicts()}
    for batch in batches:
        for run_id, new in batch.items():
            old = current.get(run_id, {})
            current[run_id] = {column: new.get(column) if new.get(column) is not None else old.get(column) for column in RUN_TYPES}
    frame = redacted("runs", _conform("runs", pl.DataFrame([current[run_id] for run_id in touched], schema=RUN_TYPES, orient="row")))
    if existing is None:
        dl.write_deltalake(lake_dir / "runs", frame.to_arrow(), mode="append")
        return
    (dl.DeltaTable(lake_dir / "runs").merge(frame.to_arrow(), predicate="t.run_id = s.run_id", source_alias="s",
                                            target_alias="t", merge_schema=True)
     .when_matched_update_all().when_not_matched_insert_all().execute())


# ----------------------------------------------------------------------------------------------------------------
# reading


def read_table(lake_dir: str | Path, table: str) -> pl.LazyFrame | None:
    """A table as the last completed ingest committed it (polars), None when the lake has none."""
    version = committed_versions(lake_dir).get(table)
    return None if version is None else pl.scan_delta(str(Path(lake_dir) / table), version=version)


def table_files(lake_dir: str | Path, table: str) -> list[str]:
    """The Parquet files of a table as committed: what Spark (or any Parquet reader) is given."""
    dl = _deltalake()
    version = committed_versions(lake_dir).get(table)
    return [] if version is None else dl.DeltaTable(Path(lake_dir) / table, version=version).file_uris()


def connect_lake(lake_dir: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection whose views have the contract's names, columns and types over the lake's
    committed Delta tables (what `speclogs sql --lake` and `speclogs report --lake` query). Raises StoreError without
    a lake."""
    dl = _deltalake()
    lake_dir = Path(lake_dir).resolve()
    if not table_names(lake_dir):
        raise StoreError(f"no lake at {lake_dir}", hint="run `speclogs ingest PATH… --lake DIR` first, or pass --lake")
    versions = committed_versions(lake_dir)
    contract = contract_columns()
    connection = no_extensions_connection()
    try:
        for table in sorted(set(contract) | set(versions)):
            if table in versions:
                dataset = dl.DeltaTable(lake_dir / table, version=versions[table]).to_pyarrow_dataset()
                connection.register(f"_delta_{table}", dataset)
                connection.execute(_view_sql(table, contract.get(table, ()), dataset.schema.names))
            else:
                typed = ", ".join(f'CAST(NULL AS {sql_type}) AS "{name}"' for name, sql_type in contract[table])
                connection.execute(f'CREATE VIEW "{table}" AS SELECT {typed} WHERE false')
        connection.execute(VIEWS_SQL)
        connection.execute(schema_views_sql())
        connection.execute(f"CREATE VIEW meta AS SELECT 'schema_version' AS key, '{SCHEMA_VERSION}' AS value")
    except duckdb.Error as error:
        connection.close()
        raise StoreError(f"cannot read the lake {lake_dir}: {error}", hint="is every table a speclogs Delta table?") from error
    return connection


def _view_sql(table: str, contract: tuple[tuple[str, str], ...], present: list[str]) -> str:
    """The contract's columns in its types (NULL for a column the lake's table does not have yet), then the rest."""
    known = {name for name, _ in contract}
    typed = [f'CAST("{name}" AS {sql_type}) AS "{name}"' if name in present else f'CAST(NULL AS {sql_type}) AS "{name}"'
             for name, sql_type in contract]
    typed += [f'"{name}"' for name in present if name not in known]
    return f'CREATE VIEW "{table}" AS SELECT {", ".join(typed)} FROM "_delta_{table}"'


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
    `ingest_paths`, its rows appended to Delta tables, committed at the end. Content the lake holds is skipped;
    a changed file is skipped with a note (a lake is append-only: nothing is replaced). With `ray` ('local',
    'auto' or a cluster's address) the files are parsed by tasks on that Ray cluster (speclogs.store.fanout)."""
    if ray is not None:
        from speclogs.store.fanout import ingest_lake_ray

        return ingest_lake_ray(paths, lake_dir, ray, run_name=run_name, on_progress=on_progress,
                               grammar_paths=grammar_paths, chunk_bytes=chunk_bytes, num_cpus=num_cpus)
    started = time.perf_counter()
    lake_dir = Path(lake_dir).resolve()
    out = open_for_writing(lake_dir)
    discovery = discover_inputs([str(p) for p in paths], run_name=run_name, known_runs=stored_run_names(lake_dir))
    sink = LakeSink(out, stored_files(lake_dir))
    try:
        tally = run_pipeline(discovery, sink, functools.partial(compile_grammars, tuple(grammar_paths)), on_progress=on_progress,
                             chunk_bytes=chunk_bytes)
        result = sink.finish()
        commit(out, [result])
    except KeyboardInterrupt:
        out.rollback()
        raise IngestInterrupted("interrupted: nothing of this call is in the lake (its appends were taken back); "
                                "the lake is as it was") from None
    except BaseException:
        out.rollback()
        raise
    tally.warnings.extend(result.notes)
    return tally.summary(str(lake_dir), time.perf_counter() - started)


def stored_run_names(lake_dir: Path) -> dict[str, str]:
    """run_id → run_name of the runs a lake holds (none when there is no lake yet)."""
    runs = read_table(lake_dir, "runs")
    return {} if runs is None else dict(runs.select("run_id", "run_name").collect().iter_rows())
