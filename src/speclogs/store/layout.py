"""How the tables are laid out in the DuckDB file — the store's own business, not the user's contract.

Users query the tables and views schema.sql declares. Underneath, `prefill_batches`, `decode_batches` and
`http_requests` (millions of rows, each line filling only some columns) are views over narrow tables
`_<name>_<hash>`, one per set of filled columns: DuckDB writes every NULL of a wide table (twice the insert cost).
Their rows carry a small `file_key` (→ `_file_keys`: run_id, source_file) instead of two strings, and their
few-valued text columns hold INTEGER codes into `_labels`; the views turn both back. `Layout` owns all of that: it
knows every physical table's columns, creates narrow tables and views as rows arrive, and inserts frames.

Columns come from schema.sql only: a bundled grammar fills none it lacks (tests/test_schema.py). A user's grammar
(`--grammar`) may fill new columns or tables; those are created, and said (Layout.notes), never silently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl

from speclogs.ingest.records import redacted

if TYPE_CHECKING:
    import duckdb

SHARDED_TABLES = ("prefill_batches", "decode_batches", "http_requests")
# Few-valued text columns of the sharded tables: stored as INTEGER codes into _labels, text again in the views.
LABEL_COLUMNS = ("rank_tags", "graph_kind", "level", "method", "http_version", "status_text")
# Tables a file's rows go to without a run_id (a probe file is not a run's).
SOURCE_ONLY_TABLES = ("nccl_probe", "nccl_probe_files")
_POLARS_TO_SQL = {
    pl.Int8: "INTEGER", pl.Int16: "INTEGER", pl.Int32: "INTEGER", pl.Int64: "BIGINT", pl.UInt32: "BIGINT",
    pl.Float32: "DOUBLE", pl.Float64: "DOUBLE", pl.Boolean: "BOOLEAN", pl.Utf8: "VARCHAR",
}


def sharded_view_sql(table: str, shards: dict[str, Sequence[str]], labels: dict[str, list[str]]) -> str:
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


class Layout:
    """The physical tables of one open database: their columns, the file keys and label codes they use; creates
    tables and views as rows arrive. `reload()` after a rollback (it may have undone tables it created)."""

    def __init__(self, connection) -> None:
        self._connection = connection
        self.notes: list[str] = []  # columns or tables a user's grammar added (said in the ingest summary)
        self.reload()

    def reload(self) -> None:
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
            self._connection.execute(sharded_view_sql(table, shards, labels))

    def file_key(self, source_file: str, run_id: str) -> int:
        """The small integer the sharded tables' rows of one file carry (allocated on first use)."""
        return self.file_keys([(run_id, source_file)])[0]

    def file_keys(self, files: Sequence[tuple[str, str]]) -> list[int]:
        """The file keys of `files` ((run_id, source_file) each); those met for the first time get the next keys, in
        order, with one INSERT for all of them (one a file cost 0.8 ms: 1.7 s for 2,000 small files)."""
        new = []
        next_key = max(self._file_keys.values(), default=0) + 1
        for run_id, source_file in files:
            if (source_file, run_id) not in self._file_keys:
                self._file_keys[(source_file, run_id)] = next_key
                new.append((next_key, source_file, run_id))
                next_key += 1
        if new:
            rows = pl.DataFrame(new, schema={"file_key": pl.Int32, "source_file": pl.Utf8, "run_id": pl.Utf8}, orient="row")
            self._connection.register("_speclogs_file_keys", rows.to_arrow())
            try:
                self._connection.execute("INSERT INTO _file_keys BY NAME SELECT * FROM _speclogs_file_keys")
            finally:
                self._connection.unregister("_speclogs_file_keys")
        return [self._file_keys[(source_file, run_id)] for run_id, source_file in files]

    def keys(self, table: str, run_id: str, source_file: str) -> dict[str, object]:
        """The key columns every row of `table` gets from its file: a file_key for the sharded tables."""
        if table in SHARDED_TABLES:
            return {"file_key": self.file_key(source_file, run_id)}
        if table in SOURCE_ONLY_TABLES:
            return {"source_file": source_file}
        return {"source_file": source_file, "run_id": run_id}

    def with_keys(self, table: str, frame: pl.DataFrame, files: Sequence[tuple[str, str]]) -> pl.DataFrame:
        """`frame` with the key columns of each row's file (`file` indexes `files`: (run_id, source_file)), and
        without `file`. Strings go dictionary-encoded: one per file, not per row."""
        index = frame.get_column("file")
        if table in SHARDED_TABLES:
            columns = [pl.Series("file_key", self.file_keys(files), dtype=pl.Int32).gather(index)]
        else:
            values = {"source_file": [source_file for _, source_file in files], "run_id": [run_id for run_id, _ in files]}
            names = ("source_file",) if table in SOURCE_ONLY_TABLES else ("source_file", "run_id")
            columns = [pl.Series(name, values[name], dtype=pl.Utf8).cast(pl.Categorical).gather(index) for name in names]
        return frame.drop("file").with_columns(columns)

    def tables_with(self, column: str) -> list[str]:
        return [t for t, cols in self._columns.items() if column in cols and t != "_file_keys"]

    def settled(self, table: str, frame: pl.DataFrame, keys: dict[str, object]) -> bool:
        """Whether inserting `frame` into `table` changes nothing in the layout (a plain table that has every column
        the frame and keys fill): then another connection may insert it (insert's `connection`)."""
        known = self._columns.get(table)
        return table not in SHARDED_TABLES and known is not None and all(name in known for name in (*frame.columns, *keys))

    def insert(self, table: str, frame: pl.DataFrame, keys: dict[str, object] | None = None, *,
               connection: duckdb.DuckDBPyConnection | None = None) -> int:
        """One INSERT of `frame`'s columns (the table's others stay NULL); `keys` are constant columns (VARCHAR, or
        INTEGER for a file_key) that DuckDB fills itself (cheaper than a column per row through Arrow). `connection`:
        another connection to insert on (store.database.second_connection), for a frame the layout has `settled`."""
        if frame.height == 0:
            return 0
        keys = keys or {}
        if connection is not None and not self.settled(table, frame, keys):
            raise ValueError(f"rows for {table} change the layout: they are inserted on the layout's own connection")
        connection = connection or self._connection
        frame = redacted(table, frame)  # the one door into the database file: nothing secret goes through it
        if table in SHARDED_TABLES:
            frame = self._encode_labels(frame)
        target = self._target(table, frame, keys)
        stored = self._columns[target]
        unfilled = [name for name in frame.columns if name not in stored]  # a narrow table holds the filled columns only
        if unfilled:
            frame = frame.drop(unfilled)
        constants = "".join(f', ?::{_key_type(value)} AS "{name}"' for name, value in keys.items())
        # large strings, copied: DuckDB keeps string views pointing into the buffers of the chunk they came from (the
        # whole chunk text, for a 400-row frame: +350 MB at 2M lines)
        connection.register("_speclogs_frame", frame.to_arrow(compat_level=pl.CompatLevel.oldest()))
        try:
            connection.execute(f'INSERT INTO "{target}" BY NAME SELECT *{constants} FROM _speclogs_frame', list(keys.values()))
        finally:
            connection.unregister("_speclogs_frame")
        return frame.height

    def delete_file_rows(self, source_file: str) -> None:
        for table in self.tables_with("source_file"):
            self._connection.execute(f'DELETE FROM "{table}" WHERE source_file = ?', [source_file])
        for table in self.tables_with("file_key"):
            self._connection.execute(
                f'DELETE FROM "{table}" WHERE file_key IN (SELECT file_key FROM _file_keys WHERE source_file = ?)', [source_file]
            )

    def _encode_labels(self, frame: pl.DataFrame) -> pl.DataFrame:
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

    def _target(self, table: str, frame: pl.DataFrame, keys: dict[str, object]) -> str:
        """The physical table `frame`'s rows go to: the table itself, or for a sharded table the narrow one holding
        exactly the columns `frame` fills (contract types for contract columns), created when new."""
        if table not in SHARDED_TABLES:
            self._ensure(table, frame, keys)
            return table
        base = self._columns[f"_{table}"]
        nulls = frame.null_count().row(0)
        filled = [name for name, null_count in zip(frame.columns, nulls) if null_count < frame.height]
        for name in filled:
            if name not in base and name not in keys and name not in ("file_key", "run_id", "source_file"):
                self._note(f"column {table}.{name} is not in the speclogs schema: a grammar of yours fills it")
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

    def _ensure(self, table: str, frame: pl.DataFrame, keys: dict[str, object]) -> None:
        """A table schema.sql lacks, or columns it lacks, are made for a user's grammar — and said (notes)."""
        wanted = {name: _sql_type(dtype) for name, dtype in frame.schema.items()} | {name: _key_type(value) for name, value in keys.items()}
        known = self._columns.get(table)
        if known is None:
            definitions = ", ".join(f'"{name}" {sql_type}' for name, sql_type in wanted.items())
            self._connection.execute(f'CREATE TABLE IF NOT EXISTS "{table}" ({definitions})')
            self._columns[table] = wanted
            self._note(f"table {table} is not in the speclogs schema: created for a grammar of yours")
            return
        for name, sql_type in wanted.items():
            if name not in known:
                self._connection.execute(f'ALTER TABLE "{table}" ADD COLUMN IF NOT EXISTS "{name}" {sql_type}')
                known[name] = sql_type
                self._note(f"column {table}.{name} is not in the speclogs schema: added for a grammar of yours")

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def _key_type(value: object) -> str:
    return "INTEGER" if isinstance(value, int) else "VARCHAR"


def _sql_type(dtype: pl.DataType) -> str:
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMP"
    for polars_type, sql in _POLARS_TO_SQL.items():
        if dtype == polars_type:
            return sql
    return "VARCHAR"
