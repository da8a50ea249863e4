"""The one list of columns: store/schema.sql (the tables at its schema version) and the numbered migrations after
it (store/migrations/NNN_name.sql, each applied once, in order, to new and older databases alike).

Everything that writes rows (the store's writer, the ingest's typed frames, the lake) takes its column names and
types from `columns()`; nothing else lists them. Standard library only, so that any part of speclogs may read it.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

SCHEMA_SQL = Path(__file__).parent / "store" / "schema.sql"
MIGRATIONS_DIR = Path(__file__).parent / "store" / "migrations"
_BASE_VERSION = re.compile(r"schema version (\d+)")
_CREATE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\);", re.S)
_ADD = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (?:IF NOT EXISTS )?(\w+) ([A-Z]+)", re.I)
_COLUMN = re.compile(r"^\s*(\w+) ([A-Z]+)")


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, SQL) of the migrations after schema.sql, in order."""
    found = []
    for path in sorted(MIGRATIONS_DIR.glob("[0-9]*.sql")):
        number, _, name = path.stem.partition("_")
        found.append((int(number), name, path.read_text(encoding="utf-8")))
    return found


def base_version() -> int:
    """The version schema.sql itself creates (its first line says it); migrations number on from there."""
    return int(_BASE_VERSION.search(SCHEMA_SQL.read_text(encoding="utf-8").splitlines()[0]).group(1))


def schema_version() -> int:
    return max([base_version(), *(version for version, _, _ in migrations())])


@lru_cache(maxsize=1)
def columns() -> dict[str, dict[str, str]]:
    """table → column → SQL type (INTEGER, BIGINT, DOUBLE, BOOLEAN, VARCHAR, JSON, TIMESTAMP) at schema_version()."""
    tables: dict[str, dict[str, str]] = {}
    for text in (SCHEMA_SQL.read_text(encoding="utf-8"), *(sql for _, _, sql in migrations())):
        text = re.sub(r"--[^\n]*", "", text)
        for table, body in _CREATE.findall(text):
            for item in body.split(","):
                found = _COLUMN.match(item)
                if found and found.group(1) not in ("PRIMARY", "FOREIGN"):
                    tables.setdefault(table, {})[found.group(1)] = found.group(2)
        for table, column, sql_type in _ADD.findall(text):
            tables.setdefault(table, {})[column] = sql_type.upper()
    return tables
