"""The DuckDB store: the database file (database.py: schema, migrations), how tables are laid out in it (layout.py),
writing what the ingest parsed (writer.py), read-only queries (query.py) and the content check (check.py).

`ingest_paths` is the library behind `speclogs ingest`: the ingest pipeline (speclogs.ingest.pipeline) parses the
inputs, this package writes them, each file in one transaction; a file already stored with the same content is
skipped, one that cannot be read or parsed is rolled back and reported in the summary; nothing raises for a bad
input file.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from speclogs.ingest.summary import IngestSummary
from speclogs.store.database import SCHEMA_VERSION, connect, drift_notes
from speclogs.store.query import QueryResult, run_query

if TYPE_CHECKING:
    from speclogs.ingest.summary import ProgressEvent

# The ingest (polars, numpy) is imported by ingest_paths, not here: `speclogs sql` opens the
# store without paying for it.

__all__ = ["IngestSummary", "QueryResult", "SCHEMA_VERSION", "connect", "ingest_paths", "run_query"]


def _cyclic_gc_paused(function):
    """Python's cyclic GC walks every live object each time it runs: during an ingest, which holds many frames, that
    was ~0.3 s of a 5 s ingest, most of it at the end on one core. The ingest's objects are freed by reference
    counting, so the cyclic GC is off while it runs (and back after); the few cycles it makes (ast.literal_eval's) are
    collected once a chunk, young objects only (speclogs.ingest.pipeline.collect_cycles)."""

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
    chunk_bytes: int | None = None,
) -> IngestSummary:
    """Ingest files/directories/'-' into the DuckDB file `db_path`; returns what happened (IngestSummary).

    replace=True re-ingests files already stored (their rows are deleted first); without it a file whose
    content is already stored is skipped as unchanged, and a file whose content changed is skipped with a
    hint to use replace.
    Raises InputError for a named path that does not exist (or is a FIFO, a symlink loop), StoreError when the
    database is locked by another writer or its disk is full ("No space left on device": the file being written is
    rolled back, the files before it stay), GrammarError for a broken user grammar.
    """
    from concurrent.futures import ThreadPoolExecutor

    from speclogs.ingest.pipeline import DEFAULT_CHUNK_BYTES, run_pipeline
    from speclogs.ingest.sources import discover_inputs
    from speclogs.store.writer import Writer

    started = time.perf_counter()

    def engine():
        from speclogs.grammar import load_grammars
        from speclogs.ingest.classify import compile_engine

        return compile_engine(load_grammars(grammar_paths))

    # what to read is found before the database is opened for writing (no lock held while a big tree is walked;
    # nothing created when an input does not exist)
    discovery = discover_inputs([str(p) for p in paths], run_name=run_name, known_runs=_stored_run_names(db_path))
    # the grammars compile on a thread while the database opens (DuckDB makes the schema without holding the GIL)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="speclogs-grammars") as pool:
        compiling = pool.submit(engine) if any(item.kind == "log" for item in discovery.files) else None
        connection = connect(db_path)
        try:
            # RLE's analysis pass costs ~15 % of the insert CPU; bit-packing and dictionaries store these columns as small
            connection.execute("SET disabled_compression_methods = 'rle'")
            writer = Writer(connection, str(db_path))
            tally = run_pipeline(discovery, writer, compiling.result if compiling is not None else engine, replace=replace,
                                 on_progress=on_progress, chunk_bytes=chunk_bytes or DEFAULT_CHUNK_BYTES)
            tally.warnings.extend(writer.layout.notes)
            notes = drift_notes(connection, tally.source_files)
        finally:
            connection.close()
    return dataclasses.replace(tally.summary(str(db_path), time.perf_counter() - started), drift_notes=notes)


def _stored_run_names(db_path: str | Path) -> dict[str, str]:
    """run_id → run_name of the runs a database already holds (none when there is no database yet)."""
    if not Path(db_path).exists():
        return {}
    connection = connect(db_path, read_only=True)
    try:
        return dict(connection.execute("SELECT run_id, run_name FROM runs").fetchall())
    finally:
        connection.close()
