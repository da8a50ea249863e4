"""The database file opens in DuckDB 1.4 (the LTS) and in the current `duckdb` CLI, not only in the DuckDB that
wrote it: a scratch virtualenv gets `duckdb==1.4.*` and `duckdb-cli` from PyPI and reads every table and view of a
file speclogs wrote — the same rows as the writer reads. Skipped (with the reason) where they cannot be installed.

The virtualenv is kept between runs in the temp directory (SPECLOGS_COMPAT_VENV to choose another place)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import FIXTURES, query
from speclogs.store import ingest_paths
from test_store import write_launch_dir

VENV = Path(os.environ.get("SPECLOGS_COMPAT_VENV", Path(tempfile.gettempdir()) / "speclogs-duckdb-1.4-venv"))

# In the old reader: each contract table's rows (sorted, as text) and column names; the version that read them.
READ_ALL = r"""
import duckdb, hashlib, json, sys
con = duckdb.connect(sys.argv[1], read_only=True)
out = {"version": duckdb.__version__, "tables": {}}
for name in json.loads(sys.argv[2]):
    relation = con.sql(f'SELECT * FROM "{name}"')
    rows = sorted(repr(row) for row in relation.fetchall())
    out["tables"][name] = [relation.columns, len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest()]
print(json.dumps(out))
"""


def _venv_python() -> Path:
    """The scratch venv's python with duckdb 1.4 (and, where PyPI has it, duckdb-cli); pytest.skip when it cannot be had."""
    python = VENV / "bin" / "python"
    if not (VENV / ".ready").exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True, capture_output=True, timeout=120)
            subprocess.run([str(python), "-m", "pip", "install", "-q", "duckdb==1.4.*"], check=True, capture_output=True,
                           timeout=600)
        except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            detail = getattr(error, "stderr", b"") or b""
            pytest.skip(f"cannot install duckdb==1.4.* into a scratch venv: {error} {detail.decode(errors='replace')[-300:]}")
        # the CLI is optional: its test skips on its own when it is missing
        subprocess.run([str(python), "-m", "pip", "install", "-q", "duckdb-cli"], capture_output=True, timeout=600)
        (VENV / ".ready").write_text("duckdb 1.4 installed\n")
    return python


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict]:
    """A file speclogs wrote from real logs, a probe and a launcher directory; what the writing DuckDB reads in it."""
    db = tmp_path_factory.mktemp("compat") / "speclogs.duckdb"
    launches = tmp_path_factory.mktemp("launches")
    write_launch_dir(launches, "eagle3_nccl", 1, "d" * 32)
    ingest_paths([FIXTURES, launches], db)
    names = [name for (name,) in query(db, "SELECT table_name FROM duckdb_tables() WHERE NOT internal UNION ALL "
                                           "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1")]
    assert {"runs", "decode_batches", "nccl_events", "line_accounting", "_ingesting"} <= set(names)
    here = json.loads(subprocess.run([sys.executable, "-c", READ_ALL, str(db), json.dumps(names)], capture_output=True,
                                     check=True, text=True).stdout)
    return db, here


def test_duckdb_1_4_reads_every_table_and_view_as_written(written):
    db, here = written
    python = _venv_python()
    there = json.loads(subprocess.run([str(python), "-c", READ_ALL, str(db), json.dumps(sorted(here["tables"]))],
                                      capture_output=True, check=True, text=True, timeout=300).stdout)
    assert there["version"].startswith("1.4.")
    assert there["tables"] == here["tables"]
    assert there["tables"]["decode_batches"][1] > 0 and there["tables"]["runs"][1] > 0


def test_the_duckdb_cli_opens_the_file(written):
    db, here = written
    cli = _venv_python().parent / "duckdb"
    if not cli.exists():
        pytest.skip("the duckdb CLI (PyPI package duckdb-cli) could not be installed")
    version = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    counts = " UNION ALL ".join(f"SELECT '{name}', count(*) FROM \"{name}\"" for name in sorted(here["tables"]))
    done = subprocess.run([str(cli), "-readonly", "-csv", "-noheader", str(db), "-c", counts], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"duckdb CLI {version}: {done.stderr}"
    read = dict(line.rsplit(",", 1) for line in done.stdout.split())
    assert {name: int(count) for name, count in read.items()} == {name: t[1] for name, t in here["tables"].items()}
