"""`speclogs ingest` and `speclogs sql` as a user runs them (real subprocesses)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from conftest import FIXTURES, MATRIX, cli_env, database_held_by_another_process, run_cli, scalar

EAGLE = MATRIX / "eagle3_nccl.log"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    """The fixtures ingested once through the CLI: (db path, completed process)."""
    db = tmp_path_factory.mktemp("cli") / "speclogs.duckdb"
    return db, run_cli("ingest", str(FIXTURES), "--db", str(db), "--format", "json")


def test_ingest_json_summary_on_stdout(ingested):
    db_path, result = ingested
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["files_ingested"] == 18
    assert summary["lines_total"] == summary["lines_parsed"] + summary["lines_continuation"] + summary["lines_unparsed"]
    assert summary["rows_per_table"]["decode_batches"] == 523
    assert summary["skipped"] == {"not a log or bench file name (.md)": 1}
    assert summary["lines_per_s"] > 0
    # the human summary goes to stderr
    assert "rows per table" in result.stderr and "decode_batches" in result.stderr


def test_second_ingest_reports_unchanged(ingested):
    db_path, _ = ingested
    again = run_cli("ingest", str(EAGLE), "--db", str(db_path), "--format", "json")
    assert again.returncode == 0
    assert json.loads(again.stdout)["files_unchanged"] == 1
    assert "unchanged" in again.stderr


def test_an_ingest_that_finds_nothing_new_imports_neither_polars_nor_pyparsing(ingested):
    """What keeps re-ingesting an unchanged tree a stat check: the parsing stack is never loaded for it."""
    db_path, _ = ingested
    code = ("import sys; from speclogs.cli import main; code = main(['ingest', sys.argv[1], '--db', sys.argv[2]]); "
            "print(code, sorted({'polars', 'pyparsing', 'altair', 'scipy'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code, str(FIXTURES), str(db_path)], capture_output=True, text=True,
                          env=cli_env(), timeout=120)
    assert done.stdout.split("\n")[-2] == "0 []", done.stdout + done.stderr


def test_stdin_and_gzip(db_path, tmp_path):
    packed = tmp_path / "eagle.log.gz"
    packed.write_bytes(gzip.compress(EAGLE.read_bytes()))
    from_gz = run_cli("ingest", str(packed), "--db", str(db_path), "--format", "json")
    assert from_gz.returncode == 0, from_gz.stderr
    from_stdin = run_cli("ingest", "-", "--db", str(db_path), "--run-name", "piped", "--format", "json", stdin=EAGLE.read_bytes())
    assert from_stdin.returncode == 0, from_stdin.stderr
    rows = scalar(db_path, "SELECT list(run_name ORDER BY run_name) FROM runs")
    assert rows == ["eagle", "piped"]
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 2 * 37
    assert scalar(db_path, "SELECT count(*) FROM files WHERE source_file LIKE '<stdin:%'") == 1


def test_sql_formats(ingested):
    db_path, _ = ingested
    eagle = f"source_file = '{EAGLE.resolve()}'"
    as_json = run_cli("sql", f"SELECT count(*) AS n, min(accept_len) AS a FROM decode_batches WHERE {eagle}", "--db", str(db_path),
                      "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == [{"n": 37, "a": 2.0}]
    as_csv = run_cli("sql", f"SELECT status, count(*) AS n FROM http_requests WHERE path = '/health' AND {eagle} GROUP BY 1 ORDER BY 1",
                     "--db", str(db_path), "--format", "csv")
    assert as_csv.stdout.splitlines() == ["status,n", "200,1", "503,2"]
    as_table = run_cli("sql", "SELECT kind, count(*) FROM server_events GROUP BY 1 ORDER BY 1", "--db", str(db_path))
    assert "cuda_graph_end" in as_table.stdout and "rows)" in as_table.stdout


def test_errors_are_one_line_and_exit_1(ingested, tmp_path):
    missing = run_cli("ingest", str(tmp_path / "nope.log"), "--db", str(tmp_path / "x.duckdb"))
    assert missing.returncode == 1
    assert missing.stderr.startswith("Error: ") and "no such file or directory" in missing.stderr
    assert "Traceback" not in missing.stderr
    no_db = run_cli("sql", "SELECT 1", "--db", str(tmp_path / "x.duckdb"))
    assert no_db.returncode == 1
    assert "Error: " in no_db.stderr and "no database" in no_db.stderr
    bad_sql = run_cli("sql", "SELECT * FROM no_such_table", "--db", str(ingested[0]))
    assert bad_sql.returncode == 1 and "SQL error" in bad_sql.stderr and "Traceback" not in bad_sql.stderr
    usage = run_cli("sql")
    assert usage.returncode == 2


def test_locked_database_message(db_path):
    run_cli("ingest", str(MATRIX / "eagle3_nccl.bench.jsonl"), "--db", str(db_path))
    with database_held_by_another_process(db_path) as pid:
        result = run_cli("ingest", str(EAGLE), "--db", str(db_path))
        assert result.returncode == 1
        assert f"is being written by another process: pid {pid} (" in " ".join(result.stderr.split())
        assert "Traceback" not in result.stderr


def test_default_db_in_cwd_and_python_m(tmp_path):
    result = run_cli("ingest", str(EAGLE), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert scalar(tmp_path / "speclogs.duckdb", "SELECT count(*) FROM decode_batches") == 37


def test_the_summary_ends_with_a_few_grouped_warnings_run_renames_first(tmp_path):
    """All bundled fixtures: 39 warnings (run names shared by several runs, 26 logs without SGLang lines, …) fit in under 10 lines."""
    import subprocess
    import sys

    from conftest import ROOT, cli_env

    done = subprocess.run([sys.executable, "-m", "speclogs", "ingest", str(ROOT / "fixtures"), "--db", str(tmp_path / "all.duckdb")],
                          capture_output=True, text=True, env={**cli_env(), "COLUMNS": "1000"}, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith(("warning", "… "))]
    assert 3 <= len(lines) <= 10, lines
    assert sum(line.startswith("warning: run name 'eagle3_prof_1' is shared by") for line in lines) == 1, lines
    assert any(line.startswith("warning ×") and "no SGLang lines" in line for line in lines), lines


def test_an_empty_folder_is_nothing_to_ingest_and_leaves_no_database(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run_cli("ingest", str(tmp_path / "empty"), "--db", str(tmp_path / "x.duckdb"))
    assert result.returncode == 1 and "nothing to ingest" in result.stderr, result.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_a_printed_nan_is_stored_as_nan_not_null(tmp_path):
    log = tmp_path / "nan.log"
    log.write_text("[2026-12-01 09:25:39] Prefill batch, #new-seq: 1, #new-token: 3, #cached-token: 0, token usage: 0.00, "
                   "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 0.86, "
                   "fwd occupancy: nan%\n")
    db = tmp_path / "nan.duckdb"
    assert run_cli("ingest", str(log), "--db", str(db), "--check").returncode == 0
    assert scalar(db, "SELECT isnan(fwd_occupancy_pct) AND extra_fields IS NULL FROM prefill_batches") is True
