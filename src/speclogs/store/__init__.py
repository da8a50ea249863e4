"""The DuckDB store: the database file (database.py), its tables (layout.py), writing what the ingest parsed
(writer.py), read-only queries (query.py), the content check (check.py); `ingest_paths` is `speclogs ingest`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from speclogs.errors import InputError
from speclogs.ingest.summary import IngestSummary
from speclogs.store.database import SCHEMA_VERSION, connect, drift_notes
from speclogs.store.query import QueryResult, run_query

if TYPE_CHECKING:
    from speclogs.ingest.summary import ProgressEvent

__all__ = ["IngestSummary", "QueryResult", "SCHEMA_VERSION", "connect", "ingest_paths", "run_query"]


def compile_grammars(grammar_paths: tuple[Path, ...] = ()):
    """The bundled and the user's grammars, loaded and compiled for the ingest (speclogs.ingest.classify)."""
    from speclogs.grammar import load_grammars
    from speclogs.ingest.classify import compile_engine

    return compile_engine(load_grammars(grammar_paths))


def ingest_paths(paths: Sequence[str | Path], db_path: str | Path, *, replace: bool = False, run_name: str | None = None,
                 on_progress: Callable[[ProgressEvent], None] | None = None, grammar_paths: Sequence[Path] = (),
                 chunk_bytes: int | None = None, verify: bool = False) -> IngestSummary:
    """Ingest files/directories/'-' into the DuckDB file `db_path` (the ingest, polars, imported only here: `speclogs
    sql` does not pay for it), each file in one transaction; returns what happened (IngestSummary).

    replace=True re-ingests stored files (their rows deleted first). Without it a file whose path, size, mtime and
    inode are as stored is unchanged without being read (verify=True hashes it anyway), as is one whose content is
    stored; one that grew by appended lines, or one of a changed launch directory, is read again and its rows replaced;
    any other changed file is skipped with a hint to use replace. Raises InputError for a named path that does not
    exist (or is a FIFO, a symlink loop), StoreError when the database is locked or its disk is full, GrammarError for
    a broken user grammar.
    """
    from speclogs.ingest.sources import discover_inputs

    started = time.perf_counter()

    engine = functools.partial(compile_grammars, tuple(grammar_paths))
    # what to read is found before the database is opened for writing (no lock held while a big tree is walked;
    # nothing created when an input does not exist); a file as stored (path, size, mtime, inode) is not read at all
    known_runs, stats = _stored(db_path)
    # a stored run whose files are all under the inputs is read again with them: its name is no other run's to avoid
    roots = [os.path.realpath(p) for p in paths if str(p) != "-"]
    known_runs = {run_id: name for run_id, (name, files) in known_runs.items()
                  if not files or not all(any(f == root or f.startswith(root + os.sep) for root in roots) for f in files)}
    discovery = discover_inputs([str(p) for p in paths], run_name=run_name, known_runs=known_runs)
    if not discovery.files and not discovery.skipped_files:   # an empty folder: no empty database left behind either
        raise InputError(f"nothing to ingest: no file in {', '.join(map(str, paths)) or 'the arguments'}",
                         hint="pass log files, directories, .gz files or '-' for stdin")
    unchanged = 0 if replace or verify else len(discovery.files)
    if unchanged:
        changed = {f.source_file: f for f in discovery.files  # (f.stat: taken when discovery found it)
                   if f.stat is None or stats.get(f.source_file) != (f.stat.st_size, f.stat.st_mtime_ns, f.stat.st_ino)}
        launches = {f.run.run_id for f in changed.values() if f.run.cell is not None}  # a changed launch is read whole
        discovery = dataclasses.replace(discovery, files=tuple(
            f for f in discovery.files if f.source_file in changed or f.run.run_id in launches))
        unchanged -= len(discovery.files)
    if not discovery.files and unchanged:  # nothing read, the database not opened to write
        return IngestSummary(db_path=str(db_path), files_found=unchanged, files_ingested=0, files_unchanged=unchanged,
                             bytes_read=0, seconds=time.perf_counter() - started, warnings=tuple(discovery.notes),
                             skipped_files=discovery.skipped_files)
    from concurrent.futures import ThreadPoolExecutor

    from speclogs.ingest.pipeline import DEFAULT_CHUNK_BYTES, run_pipeline
    from speclogs.store.writer import Writer
    # the grammars compile on a thread while the database opens (DuckDB makes the schema without holding the GIL)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="speclogs-grammars") as pool:
        compiling = pool.submit(engine) if any(item.kind == "log" for item in discovery.files) else None
        with connect(db_path) as connection:
            # RLE's analysis pass is a large share of the insert CPU; bit-packing and dictionaries store these columns as small
            connection.execute("SET disabled_compression_methods = 'rle'")
            writer = Writer(connection, str(db_path))
            stored = connection.execute("SELECT source_file, sha256, size_bytes, run_id FROM files").fetchall()
            tally = run_pipeline(discovery, writer, compiling.result if compiling is not None else engine, stored, replace=replace,
                                 on_progress=on_progress, chunk_bytes=chunk_bytes or DEFAULT_CHUNK_BYTES)
            tally.warnings.extend(writer.layout.notes)
            if tally.restat:
                connection.executemany("UPDATE files SET size_bytes = ?, mtime_ns = ?, inode = ? WHERE source_file = ?",
                                       [(size, mtime_ns, inode, source) for source, size, mtime_ns, inode in tally.restat])
            notes = drift_notes(connection, tally.source_files)
    if unchanged:
        tally.files_total += unchanged
        tally.unchanged += unchanged
    return dataclasses.replace(tally.summary(str(db_path), time.perf_counter() - started), drift_notes=notes)


def _stored(db_path: str | Path) -> tuple[dict[str, tuple[str, list[str]]], dict[str, tuple]]:
    """run_id → (run_name, its files), and source_file → (size, mtime_ns, inode) of what a database holds."""
    if not Path(db_path).exists():
        return {}, {}
    with connect(db_path, read_only=True) as connection:
        runs = {run_id: (name, []) for run_id, name in connection.execute("SELECT run_id, run_name FROM runs").fetchall()}
        has_stat = connection.execute(
            "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'files' AND column_name = 'inode'").fetchone()[0]
        rows = connection.execute(f"SELECT source_file, run_id, size_bytes, {'mtime_ns, inode' if has_stat else 'NULL, NULL'} "
                                  "FROM files WHERE skipped_reason IS NULL").fetchall()
    for source_file, run_id, *_ in rows:
        if run_id in runs:
            runs[run_id][1].append(source_file)
    return runs, {source_file: tuple(stat) for source_file, _, *stat in rows if stat[-1] is not None}
