"""Nothing is lost (README): every line of every bundled real log, of the real-excerpt corpus and of a generated log is
in the database with every number and word it prints (speclogs.store.check), and every `Decode batch` / `Prefill
batch` line of them is a row whose values are what reading the line by its labels gives."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from conftest import ROOT, cli_env, nan_safe
from speclogs.grammar import load_grammars
from speclogs.ingest.lines import ANSI_RE
from speclogs.store import ingest_paths
from speclogs.store.check import check_content, check_database

FIXTURES = ROOT / "fixtures"
GENERATOR = ROOT / "benchmarks" / "gen_sglang_log.py"
BATCH = re.compile(r"(Decode|Prefill) batch(?:\. |, | \[(?P<iter>[0-9]+)\], |\(mixed #running-req: [0-9]+\)\. )(?P<fields>.*)$")


@pytest.fixture(scope="module")
def corpus_db(tmp_path_factory) -> Path:
    """Every fixture directory (real H200 logs, launches, probes, the excerpt corpus) and a 20,000-line generated log."""
    tmp = tmp_path_factory.mktemp("content")
    generated = tmp / "generated.log"
    subprocess.run([sys.executable, str(GENERATOR), str(generated), "-n", "20000", "--seed", "11"], check=True, capture_output=True)
    db = tmp / "all.duckdb"
    summary = ingest_paths([*sorted(p for p in FIXTURES.iterdir() if p.is_dir()), generated], db)
    assert summary.files_ingested >= 150 and not [r for r in summary.skipped if "failed" in r]
    return db


def test_every_line_of_every_fixture_and_of_a_generated_log_is_in_the_database(corpus_db):
    result = check_database(corpus_db)
    print(f"content check: {result.lines_kept:,} of {result.lines:,} lines kept, {len(result.files)} files")
    assert result.unchecked == ()
    assert [(loss.source_file, loss.line_no, loss.missing) for loss in result.losses] == []
    assert result.ok and result.lines > 60_000


def test_every_batch_line_is_a_row_with_the_values_its_labels_give(corpus_db):
    grammars = load_grammars()
    readers = {family: next(p.field_list for p in grammars.patterns if p.family == family and p.field_list)
               for family in ("decode_batch", "prefill_batch")}
    connection = duckdb.connect(str(corpus_db), read_only=True)
    checked = 0
    for table, family in (("decode_batches", "decode_batch"), ("prefill_batches", "prefill_batch")):
        rows = connection.execute(f"SELECT * FROM {table}").fetchall()
        names = [d[0] for d in connection.description]
        by_line = {(row[names.index("source_file")], row[names.index("line_no")]): dict(zip(names, row)) for row in rows}
        for source_file in connection.execute("SELECT source_file FROM files WHERE kind = 'log'").fetchall():
            path = Path(source_file[0])
            for line_no, line in enumerate(path.read_bytes().decode("utf-8", errors="replace").split("\n"), start=1):
                line = ANSI_RE.sub("", line).rstrip("\r")
                found = BATCH.search(line)
                if found is None or not found.group(0).startswith(family.split("_")[0].capitalize()):
                    continue
                row = by_line.get((str(path), line_no))
                assert row is not None, f"{path.name}:{line_no} is not a {table} row: {line}"
                expected = readers[family].read(found["fields"])
                got = {column: row.get(column) for column in expected}
                assert nan_safe(got) == nan_safe(expected), f"{path.name}:{line_no}: {line}"
                checked += 1
    connection.close()
    print(f"batch lines checked against their labels: {checked:,}")
    assert checked > 15_000


def test_excerpt_corpus_has_provenance_for_every_file():
    import tomllib

    excerpts = FIXTURES / "excerpts"
    provenance = tomllib.loads((excerpts / "PROVENANCE.toml").read_text(encoding="utf-8"))
    logs = sorted(p.name for p in excerpts.glob("*.log"))
    assert len(logs) >= 40
    assert sorted(provenance) == logs
    for name, entry in provenance.items():
        assert entry.get("url") and entry.get("sglang_version") and entry.get("shows"), name


def test_the_check_finds_a_number_the_database_does_not_hold(tmp_path):
    """Not a check that passes whatever: change one stored number, drop one kept text, and it says where."""
    log = tmp_path / "eagle.log"
    log.write_bytes((FIXTURES / "h200x2-sglang-0.5.14" / "matrix" / "eagle3_default.log").read_bytes())
    db = tmp_path / "db.duckdb"
    ingest_paths([log], db)
    connection = duckdb.connect(str(db))
    assert check_content(connection).ok
    line_no = connection.execute("SELECT min(line_no) FROM decode_batches WHERE accept_len IS NOT NULL").fetchone()[0]
    connection.execute("UPDATE decode_batches SET accept_len = 2.5 WHERE line_no = ?", [line_no])
    message_line = connection.execute("SELECT min(line_no) FROM server_events WHERE kind = 'message'").fetchone()[0]
    connection.execute("UPDATE server_events SET message = NULL WHERE line_no = ?", [message_line])
    result = check_content(connection)
    connection.close()
    lost = {loss.line_no: loss.missing for loss in result.losses}
    assert not result.ok and result.lines_lost == 2 and set(lost) == {line_no, message_line}
    assert "2.00" in lost[line_no]
    assert lost[message_line]  # the words the line printed that no grammar spells


def test_cli_check_and_ingest_check_exit_codes(tmp_path):
    log = tmp_path / "eagle.log"
    log.write_bytes((FIXTURES / "h200x2-sglang-0.5.14" / "matrix" / "eagle3_default.log").read_bytes())
    db = tmp_path / "cli.duckdb"
    env = cli_env()
    ingest = subprocess.run([sys.executable, "-m", "speclogs", "ingest", str(log), "--db", str(db), "--check"],
                            env=env, capture_output=True, text=True, timeout=180)
    assert ingest.returncode == 0, ingest.stderr
    assert "are in the database with everything they print" in ingest.stderr
    connection = duckdb.connect(str(db))
    connection.execute("UPDATE server_events SET message = NULL")
    connection.close()
    check = subprocess.run([sys.executable, "-m", "speclogs", "check", "--db", str(db), "--format", "json"],
                           env=env, capture_output=True, text=True, timeout=180)
    assert check.returncode == 1 and "Traceback" not in check.stderr
    assert '"ok": false' in check.stdout and "not stored" in check.stderr
