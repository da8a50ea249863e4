"""Read-only SQL on the database (`speclogs sql`, `speclogs tables`, `speclogs runs`): `statements` streams each
statement's rows (no result is held whole in memory); `run_query` is the small library form (the last one's rows).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from speclogs.errors import StoreError
from speclogs.store.database import connect

BATCH_ROWS = 65_536
_HINT = "`speclogs tables` lists the tables; docs/sql.md describes every column"
# Statements whose result is a relation (streamed); the others (SET, USE, ATTACH, …) are run for their effect.
_QUERY_TYPES = frozenset({"SELECT", "EXPLAIN", "PRAGMA", "CALL"})
# What `speclogs sql` runs: statements that read. COPY, EXPORT, INSTALL / LOAD, ATTACH, CREATE, INSERT … are refused
# before anything runs; SET / PRAGMA only for settings that neither reach out nor write (_SETTABLE).
_READ_TYPES = frozenset({*_QUERY_TYPES, "SET"})
_SETTING = re.compile(r"\s*(?:SET|RESET|PRAGMA)\s+(?:(?:GLOBAL|SESSION|LOCAL)\s+)?(?:VARIABLE\s+)?\"?(\w+)", re.IGNORECASE)
_SETTABLE = frozenset({"threads", "worker_threads", "memory_limit", "max_memory", "timezone", "calendar", "default_order",
                       "default_null_order", "null_order", "preserve_insertion_order", "enable_progress_bar",
                       "max_expression_depth", "errors_as_json", "explain_output", "enable_profiling", "profiling_mode"})
_PRAGMA_SETS = re.compile(r"=|\b(?:output|extension|external|secret|directory)", re.IGNORECASE)
_SHOW_TABLES = re.compile(r"\s*show\s+tables\s*;?\s*", re.IGNORECASE)

_LISTED_SQL = """
SELECT table_name AS name, 'table' AS kind, column_count AS columns FROM duckdb_tables()
WHERE NOT internal AND schema_name = 'main' AND NOT starts_with(table_name, '_')
UNION ALL
SELECT view_name, 'view', (SELECT count(*) FROM duckdb_columns() c WHERE c.table_name = v.view_name AND c.schema_name = 'main')
FROM duckdb_views() v WHERE NOT internal AND schema_name = 'main' AND NOT starts_with(view_name, '_')
ORDER BY name
"""
# The contract's tables and views: what `SHOW TABLES` and `speclogs tables` list.
CONTRACT_TABLES_SQL = f"SELECT name FROM ({_LISTED_SQL}) ORDER BY name"


def tables_sql(db_path: str | Path) -> str:
    """The query behind `speclogs tables`: each contract table or view with its kind, columns and rows."""
    with connect(db_path, read_only=True) as connection:
        listed = connection.execute(_LISTED_SQL).fetchall()
    if not listed:
        return "SELECT NULL::VARCHAR AS name, NULL::VARCHAR AS kind, NULL::BIGINT AS columns, NULL::BIGINT AS rows WHERE false"
    return "\nUNION ALL\n".join(
        f"SELECT '{_literal(name)}' AS name, '{kind}' AS kind, {columns}::BIGINT AS columns, "
        f'(SELECT count(*) FROM {quoted(name)}) AS rows' for name, kind, columns in listed) + "\nORDER BY name"


def _literal(text: str) -> str:
    return text.replace("'", "''")


# `speclogs runs`: one row per run — its name, folder, versions, launcher outcome, and what was ingested for it.
RUNS_SQL = """
SELECT r.run_name, r.source_dir AS folder, r.cell, r.launch_index AS launch, r.sglang_version,
       CAST(r.run_json->'versions'->>'torch' AS VARCHAR) AS torch_version,
       coalesce(CAST(r.run_json->'versions'->>'nccl' AS VARCHAR),
                (SELECT max(e.value) FROM nccl_events e WHERE e.run_id = r.run_id AND e.kind = 'version')) AS nccl_version,
       r.outcome,
       (SELECT count(*) FROM files f WHERE f.run_id = r.run_id) AS files,
       (SELECT sum(f.total_lines) FROM files f WHERE f.run_id = r.run_id) AS lines,
       r.run_id
FROM runs r
ORDER BY r.run_name, r.source_dir
"""


@dataclass(frozen=True)
class StatementResult:
    """One statement's result: `columns`, `types` (DuckDB's names: 'INTEGER', 'JSON', 'VARCHAR[]' …), and its rows,
    read when asked for (each read runs the statement; nothing is kept between reads)."""

    sql: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    _relation: Any
    _connection: Any

    def head(self, n: int) -> list[tuple]:
        return self._fetch(lambda: self._relation.limit(n).fetchall())

    def count(self) -> int:
        return int(self._fetch(lambda: self._relation.aggregate("count(*)").fetchall())[0][0])

    def batches(self, rows: int = BATCH_ROWS) -> Iterator[list[tuple]]:
        """All rows as lists of at most `rows` tuples, streamed: one list in memory at a time. The statement runs
        before this returns (an error binding it comes first); read the batches to the end before the next one."""
        cursor = self._fetch(lambda: self._connection.execute(self._relation.sql_query()))
        return iter(lambda: self._fetch(lambda: cursor.fetchmany(rows)), [])

    def write_parquet(self, path: str | Path) -> None:
        self._fetch(lambda: self._relation.write_parquet(str(path)))

    def projected(self, expression: str) -> StatementResult:
        """This result seen through one SQL expression over its columns (a one-column result)."""
        relation = self._fetch(lambda: self._relation.project(f"{expression} AS value"))
        return StatementResult(self.sql, ("value",), tuple(str(t) for t in relation.types), relation, self._connection)

    @staticmethod
    def _fetch(read):
        try:
            return read()
        except duckdb.Error as error:
            raise StoreError(f"SQL error: {error}", hint=_HINT) from error


def quoted(name: str) -> str:
    """`name` as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def connect_reading(db_path: str | Path, lake: str | Path | None = None) -> duckdb.DuckDBPyConnection:
    """The database opened read-only, or the lake `lake` (the contract's views over its Delta tables) when given."""
    if lake is None:
        return connect(db_path, read_only=True)
    from speclogs.store.lake import connect_lake

    return connect_lake(lake)


@contextmanager
def statements(db_path: str | Path, sql: str, *, lake: str | Path | None = None) -> Iterator["Statements"]:
    """Open the database read-only (or the lake `lake`) and run `sql`'s statements in order, each when the previous
    one's result has been read (`len()` of what it gives: how many). `SHOW TABLES` lists the contract's tables and
    views (docs/sql.md), not the internal `_…` ones. StoreError for SQL that does not parse, run or only read."""
    with connect_reading(db_path, lake) as connection:
        try:  # (the connection's parser: duckdb's module-level one would start a database of its own)
            parsed = [(statement.type.name, statement.query) for statement in connection.extract_statements(sql)]
        except duckdb.Error as error:
            raise StoreError(f"SQL error: {error}", hint=_HINT) from error
        if not parsed:
            raise StoreError("no SQL statement given", hint='e.g. speclogs sql "SELECT run_name FROM runs"')
        refused = [(kind, text) for kind, text in parsed if not _reads(kind, text)]
        if refused:
            kind, text = refused[0]
            raise StoreError(f"refused: `{' '.join(text.split())[:80]}` ({kind}): speclogs sql only reads",
                             hint="SELECT, WITH, DESCRIBE, SHOW, EXPLAIN and CALL are run; to write a result, use "
                                  "`speclogs sql … --output FILE`")
        connection.execute("SET enable_progress_bar = false")  # DuckDB's bar would land in the output
        yield Statements(connection, parsed)


def _reads(kind: str, text: str) -> bool:
    """Whether a statement only reads: a query, a SET of a harmless setting, a PRAGMA that sets nothing."""
    if kind not in _READ_TYPES:
        return False
    setting = _SETTING.match(text)
    if kind == "SET":
        return text.lstrip()[:3].upper() == "USE" or (setting is not None and setting[1].lower() in _SETTABLE)
    if kind == "PRAGMA" and setting is not None:
        return setting[1].lower() in _SETTABLE or not _PRAGMA_SETS.search(text)
    return True


@dataclass(frozen=True)
class Statements:
    """A text's statements, parsed: iterated (once), each one runs and gives its result; len() counts them."""

    connection: duckdb.DuckDBPyConnection
    parsed: list[tuple[str, str]]  # (statement type, text)

    def __len__(self) -> int:
        return len(self.parsed)

    def __iter__(self) -> Iterator[StatementResult]:
        for kind, text in self.parsed:
            if _SHOW_TABLES.fullmatch(text):
                text = CONTRACT_TABLES_SQL
            try:
                if kind not in _QUERY_TYPES:
                    self.connection.execute(text)
                    continue
                relation = self.connection.sql(text)
            except duckdb.Error as error:
                raise StoreError(f"SQL error: {error}", hint=_HINT) from error
            if relation is not None:
                yield StatementResult(sql=text.strip(), columns=tuple(relation.columns),
                                      types=tuple(str(t) for t in relation.types), _relation=relation,
                                      _connection=self.connection)


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...]
    types: tuple[str, ...]
    rows: tuple[tuple, ...]


def run_query(db_path: str | Path, sql: str) -> QueryResult:
    """The last statement's result of SQL run read-only against the database. StoreError on a SQL error."""
    with connect(db_path, read_only=True) as connection:
        try:
            cursor = connection.execute(sql)
            if cursor.description is None:
                return QueryResult(columns=(), types=(), rows=())
            return QueryResult(columns=tuple(d[0] for d in cursor.description), types=tuple(str(d[1]) for d in cursor.description),
                               rows=tuple(tuple(row) for row in cursor.fetchall()))
        except duckdb.Error as error:
            raise StoreError(f"SQL error: {error}", hint=_HINT) from error
