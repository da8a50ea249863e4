"""The lake: every contract table as a Delta Lake table in a folder (docs/fleet.md, "The lake", is the contract).

An ingest runs the DuckDB file's pipeline and Writer into a scratch DuckDB file (so the lake gets the same columns,
types, redaction and per-file transactions), then appends each table's rows to its Delta table; a column added to the
schema later merges in, and readers give an older lake's rows NULL there. Delta commits one table at a time, so an
ingest's commit point is its last commit, to `files`, whose metadata records the version of every table it completes
(`speclogs.versions`): speclogs' readers open each table at that version, and the next ingest first restores every
table to it, taking back what a killed ingest appended. `runs` is merged (one row a run).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import duckdb
import polars as pl

from speclogs.errors import StoreError
from speclogs.ingest.pipeline import DEFAULT_CHUNK_BYTES, IngestInterrupted, Tally, run_pipeline
from speclogs.ingest.sources import Discovery, discover_inputs
from speclogs.ingest.summary import IngestSummary, ProgressEvent
from speclogs.schema import columns
from speclogs.store import compile_grammars
from speclogs.store.database import NO_EXTENSIONS, SCHEMA_VERSION, SCHEMA_VIEWS, VIEWS_SQL, connect
from speclogs.store.writer import Writer

VERSIONS_KEY = "speclogs.versions"
_MERGED = ("runs", "files")  # not appended with the other tables: runs is merged, files is the commit point


def contract_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """table → ((column, DuckDB type), …) of every table a user queries in a speclogs DuckDB file (speclogs.schema).
    `line_accounting` and `meta` are views the lake computes, not tables it stores."""
    return {table: tuple(known.items()) for table, known in sorted(columns().items()) if not table.startswith("_") and table != "meta"}


def fleet_module(name: str, option: str):
    """The `fleet` extra's module `name` (deltalake, ray), or StoreError saying that `option` needs it."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise StoreError(f"{option} needs {name}, which is not installed here",
                         hint=f"pip install 'speclogs[fleet]' (or pip install {name})") from error


_deltalake = functools.partial(fleet_module, "deltalake", "--lake")


def scratch_ingest(lake_dir: Path, discovery: Discovery, engine_for: Callable, stored: list[tuple[str, str, int]], *,
                   on_progress: Callable[[ProgressEvent], None] | None = None,
                   chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[tuple[Tally, dict[str, duckdb.DuckDBPyRelation]]]:
    """The ingest pipeline over `discovery` into a new DuckDB file (removed when the caller is done with what this
    yields once: the tally and written_tables) that holds the lake's runs rows, for the writer to complete them;
    `stored` content is skipped."""
    with tempfile.TemporaryDirectory(prefix="speclogs-lake-") as folder:
        with connect(Path(folder) / "scratch.duckdb") as connection:
            connection.execute("SET disabled_compression_methods = 'rle'")  # as ingest_paths: its analysis costs insert CPU
            runs = read_table(lake_dir, "runs")
            if runs is not None:
                connection.register("_lake_runs", runs.collect().to_arrow())
                connection.execute("INSERT INTO runs BY NAME SELECT * FROM _lake_runs")
            writer = Writer(connection, str(lake_dir))
            tally = run_pipeline(discovery, writer, engine_for, stored, on_progress=on_progress, chunk_bytes=chunk_bytes)
            tally.warnings.extend(note for note in writer.layout.notes if note not in tally.warnings)
            yield tally, written_tables(connection)


def written_tables(connection) -> dict[str, duckdb.DuckDBPyRelation]:
    """table → its rows, of every table the scratch database holds rows in (runs: those of the files written)."""
    names = [name for (name,) in connection.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' AND NOT starts_with(table_name, '_') "
        "AND table_name <> 'meta' AND estimated_size > 0 ORDER BY table_name").fetchall()]
    return {name: connection.sql(f'SELECT * FROM "{name}"' + (
        " WHERE run_id IN (SELECT run_id FROM files)" if name == "runs" else "")) for name in names}


def append(lake_dir: Path, table: str, data, metadata: dict[str, str] | None = None) -> None:
    """One Delta commit of `data` (Arrow, or a DuckDB relation) to the table, its schema merged."""
    dl = _deltalake()
    dl.write_deltalake(lake_dir / table, data, mode="append", schema_mode="merge",
                       writer_properties=dl.WriterProperties(compression="ZSTD"),
                       commit_properties=dl.CommitProperties(custom_metadata=metadata) if metadata else None)


def commit(lake_dir: Path, runs, files) -> None:
    """Complete an ingest whose other rows are appended: merge its runs rows (each the scratch's COALESCE of the
    lake's row and its files' facts), then append its files rows with every table's version (the commit point)."""
    dl = _deltalake()
    if "runs" not in committed_versions(lake_dir):
        append(lake_dir, "runs", runs)
    else:
        (dl.DeltaTable(lake_dir / "runs").merge(runs, predicate="t.run_id = s.run_id", source_alias="s", target_alias="t",
                                                merge_schema=True)
         .when_matched_update_all().when_not_matched_insert_all().execute())
    versions = {name: dl.DeltaTable(lake_dir / name).version() for name in table_names(lake_dir)}
    versions["files"] = versions.get("files", -1) + 1
    append(lake_dir, "files", files, {VERSIONS_KEY: json.dumps(versions, sort_keys=True)})


def table_names(lake_dir: Path) -> list[str]:
    """The Delta tables in the lake folder."""
    if not lake_dir.is_dir():
        return []
    return sorted(p.name for p in lake_dir.iterdir() if (p / "_delta_log").is_dir())


def committed_versions(lake_dir: str | Path) -> dict[str, int]:
    """table → the version of it that the last completed ingest committed ({} before the first)."""
    files = Path(lake_dir) / "files"
    if not (files / "_delta_log").is_dir():
        return {}
    last = _deltalake().DeltaTable(files).history(1)  # only a commit point writes `files`
    return {name: int(version) for name, version in json.loads(last[0].get(VERSIONS_KEY, "{}")).items()}


def restore(lake_dir: Path) -> None:
    """Every table back to the version the last completed ingest committed (a table it lacks: emptied): what an
    interrupted ingest appended is taken back, as new commits (the Delta log keeps the history)."""
    dl = _deltalake()
    versions = committed_versions(lake_dir)
    for name in table_names(lake_dir):
        table = dl.DeltaTable(lake_dir / name)
        if name not in versions:
            if table.version() >= 0 and table.file_uris():
                table.delete()
        elif table.version() > versions[name]:
            table.restore(versions[name])


def open_for_writing(lake_dir: Path) -> None:
    """The lake created, or what an interrupted ingest left in it taken back; StoreError for a folder of other files."""
    if lake_dir.exists() and any(lake_dir.iterdir()) and not table_names(lake_dir):
        raise StoreError(f"{lake_dir} is not a speclogs lake (no Delta tables) and not empty",
                         hint="give --lake a new or empty folder")
    try:
        lake_dir.mkdir(parents=True, exist_ok=True)
        restore(lake_dir)
    except OSError as error:
        raise StoreError(f"cannot open the lake {lake_dir}: {error}", hint="check the path and its permissions") from error


def stored_files(lake_dir: Path) -> list[tuple[str, str, int]]:
    """(source_file, sha256, size_bytes) of the contents the lake holds."""
    frame = read_table(lake_dir, "files")
    return [] if frame is None else frame.select("source_file", "sha256", pl.col("size_bytes").fill_null(0)).collect().rows()


def stored_run_names(lake_dir: Path) -> dict[str, str]:
    """run_id → run_name of the runs a lake holds (none when there is no lake yet)."""
    runs = read_table(lake_dir, "runs")
    return {} if runs is None else dict(runs.select("run_id", "run_name").collect().iter_rows())


def read_table(lake_dir: str | Path, table: str) -> pl.LazyFrame | None:
    """A table as the last completed ingest committed it (polars), None when the lake has none."""
    version = committed_versions(lake_dir).get(table)
    return None if version is None else pl.scan_delta(str(Path(lake_dir) / table), version=version)


def table_files(lake_dir: str | Path, table: str) -> list[str]:
    """The Parquet files of a table as committed: what Spark (or any Parquet reader) is given."""
    version = committed_versions(lake_dir).get(table)
    return [] if version is None else _deltalake().DeltaTable(Path(lake_dir) / table, version=version).file_uris()


def connect_lake(lake_dir: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection whose views have the contract's names, columns and types over the lake's
    committed Delta tables (what `speclogs sql --lake` and `speclogs report --lake` query); the contract columns a
    table lacks read NULL. Raises StoreError without a lake."""
    dl = _deltalake()
    lake_dir = Path(lake_dir).resolve()
    if not table_names(lake_dir):
        raise StoreError(f"no lake at {lake_dir}", hint="run `speclogs ingest PATH… --lake DIR` first, or pass --lake")
    versions = committed_versions(lake_dir)
    contract = contract_columns()
    connection = duckdb.connect(config=NO_EXTENSIONS)
    try:
        for table in sorted(set(contract) | set(versions)):
            present: list[str] = []
            if table in versions:
                dataset = dl.DeltaTable(lake_dir / table, version=versions[table]).to_pyarrow_dataset()
                connection.register(f"_delta_{table}", dataset)
                present = dataset.schema.names
            known = contract.get(table, ())
            quoted = {name: f'"{name}"' for name in present}
            typed = [f'CAST({quoted.get(name, "NULL")} AS {sql_type}) AS "{name}"' for name, sql_type in known]
            typed += [f'"{name}"' for name in present if name not in dict(known)]
            source = f'"_delta_{table}"' if present else "(SELECT 1) WHERE false"
            connection.execute(f'CREATE VIEW "{table}" AS SELECT {", ".join(typed)} FROM {source}')
        connection.execute(VIEWS_SQL)
        connection.execute(SCHEMA_VIEWS)
        connection.execute(f"CREATE VIEW meta AS SELECT 'schema_version' AS key, '{SCHEMA_VERSION}' AS value")
    except duckdb.Error as error:
        connection.close()
        raise StoreError(f"cannot read the lake {lake_dir}: {error}", hint="is every table a speclogs Delta table?") from error
    return connection


def ingest_lake(paths: Sequence[str | Path], lake_dir: str | Path, *, run_name: str | None = None,
                on_progress: Callable[[ProgressEvent], None] | None = None, grammar_paths: Sequence[Path] = (),
                chunk_bytes: int = DEFAULT_CHUNK_BYTES, ray: str | None = None, num_cpus: int | None = None) -> IngestSummary:
    """Ingest files/directories/'-' into the lake at `lake_dir` (created when new): the same pipeline as
    `ingest_paths`, its rows appended to Delta tables, committed at the end. Content the lake holds is skipped;
    a changed file is skipped with a note (a lake is append-only: nothing is replaced). With `ray` ('local',
    'auto' or a cluster's address) the files are parsed by tasks on that Ray cluster (speclogs.store.fanout)."""
    started = time.perf_counter()
    lake_dir = Path(lake_dir).resolve()
    open_for_writing(lake_dir)
    discovery = discover_inputs([str(p) for p in paths], run_name=run_name, known_runs=stored_run_names(lake_dir))
    options = {"on_progress": on_progress, "chunk_bytes": chunk_bytes}
    if ray is not None and discovery.files:
        from speclogs.store.fanout import parse_on_ray

        parts = parse_on_ray(discovery, lake_dir, stored_files(lake_dir), ray, grammar_paths, num_cpus=num_cpus, **options)
    else:
        engine_for = functools.partial(compile_grammars, tuple(grammar_paths))
        parts = scratch_ingest(lake_dir, discovery, engine_for, stored_files(lake_dir), **options)
    import pyarrow as pa

    total, written = None, []
    try:
        with contextlib.closing(parts):
            for tally, tables in parts:  # (Ray: the whole call's account first, then each task's as it ends)
                for table, rows in tables.items():
                    if table not in _MERGED:
                        append(lake_dir, table, rows)
                if "files" in tables:  # (a run's files are one task's: each runs row comes from one task)
                    written.append((pa.table(tables["runs"]), pa.table(tables["files"])))
                if total is None:
                    total = tally
                else:
                    total.absorb(tally)
        if written:
            commit(lake_dir, *(pa.concat_tables(part) for part in zip(*written)))
    except KeyboardInterrupt:
        restore(lake_dir)
        raise IngestInterrupted("interrupted: nothing of this call is in the lake (its appends were taken back); "
                                "the lake is as it was") from None
    except BaseException:
        restore(lake_dir)
        raise
    return total.summary(str(lake_dir), time.perf_counter() - started)
