"""schema.sql and its numbered migrations are the one list of columns (speclogs.schema): every column a grammar can
fill is in it, with a type its values fit; DuckDB reads the list the way speclogs.schema does; and adding a field to
`Decode batch` lines takes the grammar file, one migration and the docs (docs/grammars.md walks through it; the last
test does it)."""

from __future__ import annotations

import shutil

import duckdb
import polars as pl
import pytest

from conftest import query
from speclogs import schema
from speclogs.grammar import load_grammars
from speclogs.ingest.classify import compile_engine
from speclogs.ingest.records import ERRORS_TABLE, TABLE_RENAMES
from speclogs.store import ingest_paths

_INTEGERS = {pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt32}
_FITS = {"INTEGER": _INTEGERS, "BIGINT": _INTEGERS, "DOUBLE": {pl.Float64, pl.Float32, *_INTEGERS},
         "BOOLEAN": {pl.Boolean}, "VARCHAR": {pl.Utf8}, "JSON": {pl.Utf8}, "TIMESTAMP": {pl.Datetime("us")}}


def columns_not_in_schema(grammar_paths=()) -> list[str]:
    """`table.column (pattern)` for every column a grammar fills that the schema lacks or types otherwise."""
    declared = schema.columns()
    wrong = []
    for compiled in compile_engine(load_grammars(grammar_paths)).patterns:
        table = TABLE_RENAMES.get(compiled.pattern.table, compiled.pattern.table)
        if table == ERRORS_TABLE:  # the lines of a traceback are read together into one record, not one row each
            continue
        for name, dtype in compiled.schema.items():
            sql_type = declared.get(table, {}).get(name)
            if sql_type is None:
                wrong.append(f"{table}.{name} ({compiled.name}): no migration creates it")
            elif dtype not in _FITS[sql_type]:
                wrong.append(f"{table}.{name} ({compiled.name}): the grammar gives {dtype}, the schema says {sql_type}")
    return sorted(set(wrong))


def test_every_column_a_grammar_fills_is_in_the_schema():
    assert columns_not_in_schema() == []


def test_duckdb_reads_the_column_list_as_speclogs_schema_does():
    scratch = duckdb.connect()
    scratch.execute(schema.SCHEMA_SQL.read_text())
    for _, _, sql in schema.migrations():
        scratch.execute(sql)
    found: dict[str, dict[str, str]] = {}
    listed = ("SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE NOT internal "
              "AND table_name IN (SELECT table_name FROM duckdb_tables()) ORDER BY table_name, column_index")
    for table, column, data_type in scratch.execute(listed).fetchall():
        found.setdefault(table, {})[column] = data_type
    assert found == schema.columns()


@pytest.fixture
def column_list(tmp_path, monkeypatch):
    """The migrations in a folder of the test's own (a copy of the real ones), the column list read from it."""
    migrations = tmp_path / "migrations"
    shutil.copytree(schema.MIGRATIONS_DIR, migrations)
    monkeypatch.setattr(schema, "MIGRATIONS_DIR", migrations)
    schema.columns.cache_clear()
    yield migrations
    schema.columns.cache_clear()


NEW_FIELD = '''
[[field]]
name = "spec_verify_ms"
type = "float"
unit = "ms"
role = "measure"
description = "time of the last verify forward (a made-up field: docs/grammars.md's walk-through)"
'''


def test_adding_a_decode_batch_field_takes_the_grammar_one_migration_and_the_docs(tmp_path, monkeypatch, column_list):
    """The walk-through of docs/grammars.md, done: a `verify ms` label in decode_batch.toml; without its migration the
    check above names the column; with it, a new database and an older one both store the value in its column."""
    import speclogs.grammar.loader

    grammars = tmp_path / "grammars"
    shutil.copytree(speclogs.grammar.loader.bundled_grammar_dir(), grammars)
    decode = grammars / "decode_batch.toml"
    text = decode.read_text().replace("\n[labels]\n", NEW_FIELD + '\n[labels]\n"verify ms" = "spec_verify_ms"\n', 1)
    decode.write_text(text)
    monkeypatch.setattr(speclogs.grammar.loader, "bundled_grammar_dir", lambda: grammars)
    line = ("[2026-02-26 17:20:01 TP0] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, accept len: 2.50, "
            "verify ms: 3.25, cuda graph: True, gen throughput (token/s): 81.68, #queue-req: 0\n")
    log = tmp_path / "new_field.log"
    log.write_text(line)
    older = tmp_path / "older.duckdb"
    ingest_paths([log], older)  # a database written before the migration: the value waits in extra_fields

    missing = columns_not_in_schema()
    assert missing and {text.split(" ")[0] for text in missing} == {"decode_batches.spec_verify_ms"}, missing

    version = schema.schema_version() + 1
    (column_list / f"{version:03d}_decode_spec_verify_ms.sql").write_text(
        "ALTER TABLE decode_batches ADD COLUMN IF NOT EXISTS spec_verify_ms DOUBLE;  -- 'verify ms: 3.25'\n")
    schema.columns.cache_clear()
    assert columns_not_in_schema() == []
    for db in (tmp_path / "new.duckdb", older):
        summary = ingest_paths([log], db, replace=True)
        assert not any("not in the speclogs schema" in warning for warning in summary.warnings), summary.warnings
        assert query(db, "SELECT spec_verify_ms, accept_len, extra_fields FROM decode_batches") == [(3.25, 2.5, None)]
    assert query(older, "SELECT version, description FROM _migrations WHERE version = ?", [version]) == [
        (version, "decode_spec_verify_ms")]


def test_migrations_are_numbered_once_each_after_schema_sql():
    numbers = [version for version, _, _ in schema.migrations()]
    assert numbers == sorted(set(numbers)) and all(number > schema.base_version() for number in numbers)
