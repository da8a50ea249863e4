"""Writing what the ingest pipeline parsed (`Writer`, its sink): each file in one transaction, never half-written.

With every file go its `files` row, its `launches` rows and its run (`runs`: inserted, or completed). A failed file is
rolled back and reported in the summary; a full disk stops the ingest (StoreError).
"""

from __future__ import annotations

import json
import time
from datetime import datetime

import duckdb
import polars as pl

from speclogs.errors import SpeclogsError, StoreError
from speclogs.ingest.pipeline import Batch, ParsedFile, Tally, first_line
from speclogs.store.database import NO_SPACE_HINT, no_space_left
from speclogs.store.layout import Layout, file_keys, polars_schema, redacted, with_keys

# DuckDB's row group, a quarter of its default (database.connect attaches the file with it): a streamed file's last
# partial row group per table is written at COMMIT, on one core once parsing has ended
ROW_GROUP_ROWS = 30_720
INSERT_ROWS = 4 * ROW_GROUP_ROWS  # a streamed table's rows are inserted once this many have gathered, in whole row groups
SEGMENT_ROWS = 1_000_000  # a big log's rows are committed this many at a time
FAILURES = (duckdb.Error, pl.exceptions.PolarsError, SpeclogsError, ValueError, OSError)
FILE_TYPES = polars_schema("files")
RUN_TYPES = polars_schema("runs")
LAUNCH_TYPES = polars_schema("launches")


class Writer:
    """Writes parsed files into the database `db_path` open on `connection`, counting them in a Tally."""

    def __init__(self, connection, db_path: str) -> None:
        self.connection = connection
        self.db_path = db_path
        self.layout = Layout(connection)
        self._in_transaction = False
        try:
            self._remove_interrupted()
        except FAILURES as error:
            raise StoreError(f"cannot remove the rows of an interrupted ingest from {db_path}: {first_line(error)}",
                             hint=NO_SPACE_HINT if no_space_left(error) else "ingest into a new --db file") from error

    def _begin(self) -> None:
        self.connection.execute("BEGIN TRANSACTION")
        self._in_transaction = True

    def _commit(self) -> None:
        self._in_transaction = False  # a COMMIT that fails has rolled the transaction back (DuckDB)
        self.connection.execute("COMMIT")

    def _rollback(self) -> None:
        if self._in_transaction:  # (after a failed COMMIT none is)
            self._in_transaction = False
            self.connection.execute("ROLLBACK")
        self.layout.reload()

    def _remove_interrupted(self, *, say: bool = True) -> None:
        """Rows of a big log whose ingest was killed or failed between its commits (its _ingesting row is there)."""
        left = self.connection.execute("SELECT DISTINCT source_file FROM _ingesting").fetchall()
        if not left:
            return
        self._begin()
        try:
            for (source_file,) in left:
                self.layout.delete_file_rows(source_file)
            self.connection.execute("DELETE FROM _ingesting")
            self._commit()
        except FAILURES:
            self._rollback()
            raise
        if say:
            for (source_file,) in left:
                self.layout.notes.append(f"{source_file}: its ingest was interrupted; the rows it had written are removed, ingest it again")

    def write_batch(self, batch: Batch, tally: Tally) -> None:
        """Small files in one transaction; when it fails, each in its own, so that only the one that fails is left out."""
        try:
            self._transaction(batch)
        except FAILURES as error:
            _raise_interrupt(error)
            if len(batch.files) == 1:
                self._failed(batch.files[0], error, tally)
            else:
                for index in range(len(batch.files)):
                    self.write_batch(batch.of(index), tally)
            return
        for parsed in batch.files:
            tally.add(parsed)

    def _transaction(self, batch: Batch) -> None:
        self._begin()
        try:
            for parsed in batch.files:
                if parsed.replaces:
                    self.layout.delete_file_rows(parsed.source_file)
            files = [(parsed.item.run.run_id, parsed.source_file) for parsed in batch.files]
            for table, frame in batch.tables.items():
                self.layout.insert(table, with_keys(table, frame, files))
            self._finish(batch.files)
            self._commit()
        except (*FAILURES, KeyboardInterrupt):
            self._rollback()
            raise

    def write_stream(self, parsed: ParsedFile, produce, tally: Tally) -> None:
        """A big log: `produce(emit)` parses it (its chunks on threads of their own) and hands `emit` each table
        frame, inserted here in whole row groups. About every SEGMENT_ROWS rows are committed (DuckDB holds a
        transaction's rows in memory); an _ingesting row marks the file as under way until its files row is written
        with the last commit. A failure removes what was written; so does the next writer after a killed ingest."""
        run_id, source_file = parsed.item.run.run_id, parsed.source_file
        pending = _Pending(self.layout, run_id, source_file)
        started = time.perf_counter()

        def emit(table: str, frame: pl.DataFrame) -> None:
            pending.add(table, frame)
            if pending.received >= SEGMENT_ROWS:
                pending.flush()  # what is short of a row group waits for the next segment
                self._commit()
                self._begin()
                pending.received = 0

        self._begin()
        try:
            if parsed.replaces:
                self.layout.delete_file_rows(source_file)
            self.connection.execute("INSERT INTO _ingesting VALUES (?, ?, current_localtimestamp())", [source_file, run_id])
            produce(emit)
            pending.flush(whole=False)
            parsed.seconds = time.perf_counter() - started
            self._finish([parsed])
            self.connection.execute("DELETE FROM _ingesting WHERE source_file = ?", [source_file])
            self._commit()
        except (*FAILURES, KeyboardInterrupt) as error:
            self._rollback()
            try:  # what earlier commits wrote; should that fail too (a full disk), the next ingest removes it, and says so
                self._remove_interrupted(say=False)
                rows_left = False
            except FAILURES as second:
                self.layout.notes.append(f"{source_file}: the rows it had written could not be removed yet ({first_line(second)}); "
                                         "the next ingest removes them")
                rows_left = True
            _raise_interrupt(error)
            self._failed(parsed, error, tally, rows_left=rows_left)
            return
        tally.add(parsed)

    def _failed(self, parsed: ParsedFile, error: BaseException, tally: Tally, *, rows_left: bool = False) -> None:
        """A file rolled back (`rows_left`: some committed earlier): said, or, when the disk is full, a StoreError."""
        if no_space_left(error):
            done = "its rows written so far are removed by the next ingest" if rows_left else "it is rolled back"
            stored = f"; the {tally.ingested:,} file(s) ingested before it are stored" if tally.ingested else ""
            raise StoreError(
                f"cannot write {parsed.source_file} into {self.db_path}: No space left on device ({done}{stored})",
                hint=NO_SPACE_HINT + " (what is stored is skipped as unchanged)",
            ) from error
        tally.fail(f"failed and rolled back ({type(error).__name__}: {first_line(error)})", parsed.source_file)

    def _finish(self, files: list[ParsedFile]) -> None:
        launch_rows = [row for parsed in files for row in parsed.launch_rows]
        if launch_rows:
            self.layout.insert("launches", pl.DataFrame(launch_rows, schema=LAUNCH_TYPES, orient="row"))
        self.layout.insert("files", pl.DataFrame([file_row(p) for p in files], schema=FILE_TYPES, orient="row"))
        _upsert_runs(self.connection, files)
        if any(parsed.replaces for parsed in files):  # a relaunched launch has a new run_id: its old run has no files left
            self.connection.execute("DELETE FROM runs WHERE run_id NOT IN (SELECT run_id FROM files WHERE run_id IS NOT NULL)")


def _raise_interrupt(error: BaseException) -> None:
    """Ctrl-C is not a failed file: it ends the ingest (DuckDB reports it as an InterruptException)."""
    if isinstance(error, KeyboardInterrupt):
        raise error
    if isinstance(error, duckdb.InterruptException):
        raise KeyboardInterrupt from error


class _Pending:
    """A streamed file's rows per table, inserted in whole row groups once INSERT_ROWS have gathered: DuckDB
    writes an INSERT's full row groups straight to the file, while a partial one is written again at COMMIT."""

    def __init__(self, layout: Layout, run_id: str, source_file: str) -> None:
        self.insert = lambda table, frame: layout.insert(table, frame, file_keys(table, run_id, source_file))
        self.frames: dict[str, list[pl.DataFrame]] = {}
        self.received = 0  # rows handed over since the writer last committed

    def add(self, table: str, frame: pl.DataFrame) -> None:
        if frame.height < ROW_GROUP_ROWS // 4:
            # a few rows a chunk (events, errors) wait with strings of their own: a parsed frame's strings are views
            # into the whole chunk's text, which waiting would keep alive
            frame = frame.with_columns(pl.col(pl.String) + "")
        frames = self.frames.setdefault(table, [])
        frames.append(frame.drop("file"))
        self.received += frame.height
        if sum(f.height for f in frames) >= INSERT_ROWS:
            self.flush(table)

    def flush(self, table: str | None = None, *, whole: bool = True) -> None:
        """Insert a table's (or every table's) rows: `whole` row groups only, the rest waiting for more."""
        for name in [table] if table else list(self.frames):
            frame = pl.concat(self.frames.pop(name), how="diagonal_relaxed")
            cut = frame.height - frame.height % ROW_GROUP_ROWS if whole else frame.height
            self.insert(name, frame.slice(0, cut))
            if cut < frame.height:
                self.frames[name] = [frame.slice(cut)]


def file_row(parsed: ParsedFile) -> dict:
    raw, account = parsed.raw, parsed.account
    warnings = list(raw.warnings + account.warnings)
    stream = raw.stream if raw.stream is not None else raw
    return {
        "source_file": parsed.source_file, "sha256": raw.sha256, "run_id": parsed.item.run.run_id,
        "size_bytes": raw.size_bytes, "total_lines": account.total_lines,
        "parsed_lines": account.parsed_lines, "continuation_lines": account.continuation_lines,
        "unparsed_lines": account.unparsed_lines, "ingested_at": datetime.now(), "kind": parsed.item.kind,
        "invalid_utf8": stream.invalid_utf8, "nul_bytes": stream.nul_bytes,
        "warnings": json.dumps(warnings) if warnings else None, "parse_seconds": round(parsed.seconds, 6),
        "near_misses": json.dumps(dict(sorted(account.drift.items()))) if account.drift else None,
        "mtime_ns": parsed.item.stat.st_mtime_ns if parsed.item.stat else None,
        "inode": parsed.item.stat.st_ino if parsed.item.stat else None,
    }


def _upsert_runs(connection, files: list[ParsedFile]) -> None:
    """The runs of some files: each its name and folder, and per fact (a runs column) the first file's that says it.
    Known runs keep what the new files do not say (an UPDATE in place: DuckDB's ON CONFLICT would move them to the
    end); new runs are appended in the order they were met."""
    rows: dict[str, dict] = {}
    now = datetime.now()
    for parsed in files:
        run = parsed.item.run
        row = rows.setdefault(run.run_id, {"run_id": run.run_id, "run_name": run.run_name, "source_dir": run.source_dir,
                                           "cell": run.cell, "launch_index": run.launch_index, "ingested_at": now})
        row.update({column: value for column, value in parsed.account.run_facts.items() if row.get(column) is None})
    frame = pl.DataFrame([{c: r.get(c) for c in RUN_TYPES} for r in rows.values()], schema=RUN_TYPES, orient="row")
    frame = redacted("runs", frame).with_row_index("_position")
    updates = ", ".join(f"{c} = COALESCE(n.{c}, runs.{c})" for c in RUN_TYPES if c != "run_id")
    connection.register("_speclogs_runs", connection.from_arrow(frame.__arrow_c_stream__()).materialize())  # read twice
    try:
        connection.execute(f"UPDATE runs SET {updates} FROM _speclogs_runs AS n WHERE runs.run_id = n.run_id")
        connection.execute("INSERT INTO runs BY NAME SELECT * EXCLUDE (_position) FROM _speclogs_runs "
                           "WHERE run_id NOT IN (SELECT run_id FROM runs) ORDER BY _position")
    finally:
        connection.unregister("_speclogs_runs")
