"""Read-only SQL on the database (`speclogs sql`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import duckdb

from speclogs.errors import StoreError
from speclogs.store.database import connect


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
        return query_connection(connection, sql)
    finally:
        connection.close()


def run_lake_query(lake_dir: str | Path, sql: str) -> QueryResult:
    """Run SQL against a lake (speclogs.store.lake: views with the contract's names over its Parquet)."""
    from speclogs.store.lake import connect_lake

    connection = connect_lake(lake_dir)
    try:
        return query_connection(connection, sql)
    finally:
        connection.close()


def query_connection(connection, sql: str) -> QueryResult:
    """Run SQL on an open connection. Raises StoreError on a SQL error (with DuckDB's message)."""
    try:
        cursor = connection.execute(sql)
    except duckdb.Error as error:
        raise StoreError(f"SQL error: {error}", hint="`speclogs tables` lists the tables; docs/sql.md describes every column") from error
    if cursor.description is None:
        return QueryResult(columns=(), types=(), rows=())
    columns = tuple(d[0] for d in cursor.description)
    types = tuple(str(d[1]) for d in cursor.description)
    rows = tuple(tuple(row) for row in cursor.fetchall())
    return QueryResult(columns=columns, types=types, rows=rows)
