"""The tables of one open database as the writer sees them: their columns, and inserting frames into them.

Every table is a plain table of the columns speclogs.schema lists (schema.sql and its migrations). A user's grammar
(`--grammar`) may fill new columns or tables; those are created, and said (Layout.notes), never silently.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from speclogs.redact import REDACTED, SUSPECT, redact, secret_name
from speclogs.schema import columns

# Tables a file's rows go to without a run_id (a probe file is not a run's).
SOURCE_ONLY_TABLES = ("nccl_probe", "nccl_probe_files")
POLARS_TYPES = {
    "VARCHAR": pl.Utf8, "JSON": pl.Utf8, "INTEGER": pl.Int32, "BIGINT": pl.Int64, "DOUBLE": pl.Float64,
    "BOOLEAN": pl.Boolean, "TIMESTAMP": pl.Datetime("us"),
}
_SQL_TYPES = {pl.Int8: "INTEGER", pl.Int16: "INTEGER", pl.Int32: "INTEGER", pl.Int64: "BIGINT", pl.UInt32: "BIGINT",
              pl.Float32: "DOUBLE", pl.Float64: "DOUBLE", pl.Boolean: "BOOLEAN"}
# Text columns of the prefix whose shapes (a timestamp, rank tags) cannot hold a secret.
PREFIX_TEXT_COLUMNS = frozenset({"ts_text", "rank_tags"})


def redacted(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` as it may be written anywhere (the DuckDB file, the lake): every text column through speclogs.redact's
    one scan (only the few rows its cheap test picks are looked at in Python), and a server argument with a secret
    name by its name."""
    if frame.height == 0:
        return frame
    if table == "server_args" and "name" in frame.columns:
        secret = pl.Series([name is not None and secret_name(name) for name in frame.get_column("name").to_list()],
                           dtype=pl.Boolean)
        if secret.any():
            frame = frame.with_columns(
                pl.when(secret & pl.col(column).is_not_null() & ~pl.col(column).is_in(["None", "''", '""', "null"]))
                .then(pl.lit(redacted_text)).otherwise(pl.col(column)).alias(column)
                for column, redacted_text in (("value", REDACTED), ("value_json", f'"{REDACTED}"')) if column in frame.columns
            )
    text_columns = [name for name, dtype in frame.schema.items() if dtype == pl.Utf8 and name not in PREFIX_TEXT_COLUMNS]
    if not text_columns:
        return frame
    # the usual answer: none; asked of each column's distinct texts (few: levels, methods, paths …), half the time
    hits = frame.select(pl.col(column).unique().str.contains(SUSPECT.pattern).fill_null(False).any() for column in text_columns).row(0)
    for column in (column for column, hit in zip(text_columns, hits) if hit):
        texts = frame.get_column(column)
        at = texts.str.contains(SUSPECT.pattern).fill_null(False).arg_true()
        frame = frame.with_columns(texts.scatter(at, pl.Series([redact(text) for text in texts.gather(at).to_list()], dtype=pl.Utf8)))
    return frame


def file_keys(table: str, run_id: str, source_file: str) -> dict[str, object]:
    return {"source_file": source_file} if table in SOURCE_ONLY_TABLES else {"source_file": source_file, "run_id": run_id}


def with_keys(table: str, frame: pl.DataFrame, files: Sequence[tuple[str, str]]) -> pl.DataFrame:
    """`frame` with the key columns of each row's file (`file` indexes `files`: (run_id, source_file)), and without
    `file`. Strings go dictionary-encoded: one per file, not per row."""
    index = frame.get_column("file")
    keyed = [pl.Series(name, [file_keys(table, *f)[name] for f in files], dtype=pl.Utf8).cast(pl.Categorical).gather(index)
             for name in file_keys(table, "", "")]
    return frame.drop("file").with_columns(keyed)


def polars_schema(table: str) -> dict[str, pl.DataType]:
    return {name: POLARS_TYPES[sql_type] for name, sql_type in columns()[table].items()}


class Layout:
    """The tables of one open database and their columns (`reload()` them after a rollback: it may undo a table made)."""

    def __init__(self, connection) -> None:
        self._connection = connection
        self.notes: list[str] = []  # columns or tables a user's grammar added (said in the ingest summary)
        self.reload()

    def reload(self) -> None:
        self._columns: dict[str, dict[str, str]] = {}
        for table, column, data_type in self._connection.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = 'main' AND NOT internal "
            "AND table_name IN (SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main') ORDER BY table_name, column_index"
        ).fetchall():
            self._columns.setdefault(table, {})[column] = data_type

    def insert(self, table: str, frame: pl.DataFrame, keys: dict[str, object] | None = None) -> int:
        """One INSERT of `frame`'s columns (the table's others stay NULL); `keys` are constant VARCHAR columns that
        DuckDB fills itself (cheaper than a column per row through Arrow)."""
        if frame.height == 0:
            return 0
        keys = keys or {}
        known = self._columns.get(table, {})
        empty = [name for name in frame.columns if name not in known and frame.get_column(name).null_count() == frame.height]
        frame = frame.drop(empty) if known and empty else frame  # a column nothing filled creates nothing
        self._ensure(table, frame, keys)
        constants = "".join(f', ?::VARCHAR AS "{name}"' for name in keys)
        connection = self._connection
        frame = redacted(table, frame)  # the one door into the database file: nothing secret goes through it
        # all-null (pl.Null) columns left out: DuckDB refuses polars' Arrow export of them, and BY NAME fills them with NULL
        connection.register("_speclogs_frame", frame.select(pl.exclude(pl.Null)).__arrow_c_stream__())
        try:
            connection.execute(f'INSERT INTO "{table}" BY NAME SELECT *{constants} FROM _speclogs_frame', list(keys.values()))
        finally:
            connection.unregister("_speclogs_frame")
        return frame.height

    def delete_file_rows(self, source_file: str) -> None:
        for table, known in self._columns.items():
            if "source_file" in known and not table.startswith("_"):
                self._connection.execute(f'DELETE FROM "{table}" WHERE source_file = ?', [source_file])

    def _ensure(self, table: str, frame: pl.DataFrame, keys: dict[str, object]) -> None:
        """A table or columns the schema lacks are made for a user's grammar — and said (notes)."""
        known = self._columns.get(table)
        if known is not None and all(name in known for name in (*frame.columns, *keys)):
            return
        wanted = {name: _sql_type(dtype) for name, dtype in frame.schema.items()} | dict.fromkeys(keys, "VARCHAR")
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
        if text not in self.notes:  # (a rollback may undo a table made, to be made and said again)
            self.notes.append(text)


def _sql_type(dtype: pl.DataType) -> str:
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMP"
    return next((sql for polars_type, sql in _SQL_TYPES.items() if dtype == polars_type), "VARCHAR")
