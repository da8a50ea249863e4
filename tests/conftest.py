"""Shared test helpers: where the real fixtures are, a fresh DuckDB file per test, running the CLI for real."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "h200x2-sglang-0.5.14"
MATRIX = FIXTURES / "matrix"
PROBES = FIXTURES / "probes"
FIXTURE_LOGS = sorted(FIXTURES.glob("*/*.log"))
SRC = ROOT / "src"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A DuckDB file that does not exist yet (each test gets its own)."""
    return tmp_path / "speclogs.duckdb"


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["COLUMNS"] = "200"
    return env


def run_cli(*args: str, stdin: bytes | None = None, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m speclogs ARGS…` in a real subprocess (stdout/stderr as text)."""
    completed = subprocess.run(
        [sys.executable, "-m", "speclogs", *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env=cli_env(),
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        completed.args,
        completed.returncode,
        completed.stdout.decode("utf-8", "replace"),
        completed.stderr.decode("utf-8", "replace"),
    )


@contextlib.contextmanager
def database_held_by_another_process(db: Path):
    """Another process with `db` open for writing (DuckDB's file lock), for as long as the block runs; yields its pid."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
         "time.sleep(60)", str(db)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def query(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    import duckdb

    connection = duckdb.connect(str(db), read_only=True)
    try:
        return connection.execute(sql, params or []).fetchall()
    finally:
        connection.close()


def scalar(db: Path, sql: str, params: list | None = None):
    return query(db, sql, params)[0][0]


# Columns whose values say when or how fast, not what: they differ between any two ingests of the same files.
VOLATILE_COLUMNS = frozenset({"ingested_at", "parse_seconds"})


def contract_rows(connection, relation: str) -> tuple[list[tuple], list[tuple]]:
    """(columns with their types, every row in a fixed order) of one table or view, as a user of the connection sees
    it; the columns of VOLATILE_COLUMNS are left out of the rows."""
    described = [tuple(row[:2]) for row in connection.execute(f'DESCRIBE "{relation}"').fetchall()]
    names = ", ".join(f'"{name}"' for name, _ in described if name not in VOLATILE_COLUMNS)
    return described, connection.execute(f'SELECT {names} FROM "{relation}" ORDER BY ALL').fetchall()


def assert_same_tables(expected, actual, relations) -> None:
    """Every relation has the same columns, types and rows on both connections."""
    for relation in relations:
        columns, rows = contract_rows(expected, relation)
        got_columns, got_rows = contract_rows(actual, relation)
        assert got_columns == columns, relation
        assert len(got_rows) == len(rows), relation
        assert _nan_as_text(got_rows) == _nan_as_text(rows), relation


def _nan_as_text(rows: list[tuple]) -> list[tuple]:
    """Rows with every NaN as the text 'NaN' (NaN equals nothing, not even the NaN of the same value printed)."""
    return [tuple("NaN" if isinstance(v, float) and v != v else v for v in row) for row in rows]


def nan_safe(values: dict) -> dict:
    """`values` with every NaN as the text 'NaN': a line that printed 'nan' stores NaN, and NaN is not equal to itself."""
    return {key: "NaN" if isinstance(value, float) and value != value else value for key, value in values.items()}
