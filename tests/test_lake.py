"""`speclogs ingest --lake DIR`: the contract's tables as Delta tables that DuckDB, polars and Spark read as they are,
and that `speclogs sql`, `report` and `check` query exactly as they query the DuckDB file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from conftest import FIXTURES, ROOT, assert_same_tables, contract_rows, run_cli, scalar
from speclogs.store import connect, ingest_paths
from speclogs.store.lake import connect_lake, contract_columns, ingest_lake, table_files

deltalake = pytest.importorskip("deltalake", reason="deltalake is not installed (pip install 'speclogs[fleet]')")

RELATIONS = [*contract_columns(), "line_accounting", "meta"]
ARMS = ["baseline_default_[0-9]", "baseline_nccl_[0-9]", "eagle3_default_[0-9]", "eagle3_nccl_[0-9]"]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """Every bundled fixture ingested twice by the CLI: into a DuckDB file and into a lake."""
    where = tmp_path_factory.mktemp("both")
    db, lake = where / "speclogs.duckdb", where / "lake"
    for target in (["--db", str(db)], ["--lake", str(lake)]):
        result = run_cli("ingest", str(ROOT / "fixtures"), *target, "--format", "json")
        assert result.returncode == 0, result.stderr
    return db, lake


def parquet_files(lake: Path) -> set[str]:
    return {str(path.relative_to(lake)) for path in lake.rglob("*.parquet")}


def test_every_table_of_the_lake_equals_the_duckdb_file(both):
    db, lake = both
    expected, actual = connect(db, read_only=True), connect_lake(lake)
    try:
        assert_same_tables(expected, actual, RELATIONS)
        assert actual.execute("SELECT count(*) FROM decode_batches").fetchone()[0] > 2000
    finally:
        expected.close()
        actual.close()


def test_report_on_the_lake_gives_the_same_json(both):
    db, lake = both
    outputs = []
    for source in (["--db", str(db)], ["--lake", str(lake)]):
        result = run_cli("report", *source, "--compare", *ARMS, "--format", "json")
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[1])["comparisons"]


def test_sql_and_check_work_on_the_lake(both):
    db, lake = both
    answers = []
    for source in (["--db", str(db)], ["--lake", str(lake)]):
        result = run_cli("sql", *source, "--format", "csv",
                         "SELECT count(*) AS runs, count(DISTINCT sglang_version) AS versions FROM runs")
        assert result.returncode == 0, result.stderr
        answers.append(result.stdout.splitlines()[1])
    assert answers[1] == answers[0] and int(answers[0].split(",")[0]) > 100
    checked = run_cli("check", "--lake", str(lake))
    assert checked.returncode == 0, checked.stderr
    assert "(100.00 %)" in checked.stderr


def _nan_safe(rows):
    """Rows with NaN (a printed 'nan') made comparable: NaN is not equal to itself."""
    return [tuple("NaN" if isinstance(v, float) and v != v else v for v in row) for row in rows]


def test_duckdb_and_polars_read_the_delta_tables_as_they_are(both):
    """No speclogs needed to read a lake: polars scans a Delta table, DuckDB queries its Arrow dataset."""
    db, lake = both
    expected = connect(db, read_only=True)
    try:
        _, decode_rows = contract_rows(expected, "decode_batches")
        runs = expected.execute("SELECT count(*) FROM runs").fetchone()[0]
    finally:
        expected.close()
    frame = pl.scan_delta(str(lake / "decode_batches")).collect()
    assert frame.schema["ts"] == pl.Datetime("us") and frame.schema["accept_len"] == pl.Float64
    columns = [name for name, _ in contract_columns()["decode_batches"] if name not in ("ingested_at", "parse_seconds")]
    assert sorted(_nan_safe(frame.select(columns).rows()), key=repr) == sorted(_nan_safe(decode_rows), key=repr)
    connection = duckdb.connect()
    connection.register("runs", deltalake.DeltaTable(lake / "runs").to_pyarrow_dataset())
    assert connection.execute("SELECT count(*), count(DISTINCT run_id) FROM runs").fetchone() == (runs, runs)


def test_ingesting_the_same_content_again_adds_no_file(both, tmp_path):
    db, lake = both
    copy = tmp_path / "lake"
    shutil.copytree(lake, copy)
    before = parquet_files(copy)
    result = run_cli("ingest", str(ROOT / "fixtures"), "--lake", str(copy), "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    stored = scalar(db, "SELECT count(*) FROM files")
    assert summary["files_ingested"] == 0 and summary["files_unchanged"] == stored
    assert parquet_files(copy) == before and deltalake.DeltaTable(copy / "files").version() == 0


def test_a_later_ingest_appends_and_completes_its_runs_as_the_duckdb_file_does(tmp_path):
    """run.json and the bench files of two launches first, their server logs later: the second ingest adds parts and
    a commit, and the runs rows get what the logs say (model path, speculation) — as the DuckDB file's runs do."""
    source = tmp_path / "runs"
    shutil.copytree(ROOT / "fixtures" / "h200x2" / "baseline_default", source / "baseline_default")
    logs = sorted(source.rglob("server.log"))
    held = tmp_path / "held"
    for index, log in enumerate(logs):
        held.mkdir(exist_ok=True)
        log.rename(held / f"{index}.log")
    db, lake = tmp_path / "x.duckdb", tmp_path / "lake"
    ingest_paths([source], db)
    ingest_lake([source], lake)
    first_parts = parquet_files(lake)
    connection = connect_lake(lake)
    assert connection.execute("SELECT count(*), count(model_path) FROM runs").fetchone() == (2, 0)
    connection.close()
    for index, log in enumerate(logs):  # the logs arrive where they belong
        (held / f"{index}.log").rename(log)
    ingest_paths([source], db)
    summary = ingest_lake([source], lake)
    assert summary.files_ingested == 2 and first_parts < parquet_files(lake)
    assert deltalake.DeltaTable(lake / "files").version() == 1
    expected, actual = connect(db, read_only=True), connect_lake(lake)
    try:
        assert_same_tables(expected, actual, RELATIONS)
        assert actual.execute("SELECT count(*), count(model_path), count(outcome) FROM runs").fetchone() == (2, 2, 2)
    finally:
        expected.close()
        actual.close()


KILLED_BEFORE_THE_COMMIT_POINT = """
import os, sys
from speclogs.store import lake
lake.commit = lambda *args: os._exit(9)  # killed after its rows were appended, before the files commit
lake.ingest_lake([sys.argv[1]], sys.argv[2])
"""


def test_a_killed_ingest_is_invisible_to_speclogs_and_taken_back_by_the_next_one(tmp_path):
    lake, db = tmp_path / "lake", tmp_path / "x.duckdb"
    ingest_lake([FIXTURES / "probes"], lake)
    before = connect_lake(lake)
    counts = {t: before.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("files", "decode_batches", "runs")}
    before.close()
    killed = subprocess.run([sys.executable, "-c", KILLED_BEFORE_THE_COMMIT_POINT, str(FIXTURES / "matrix"), str(lake)])
    assert killed.returncode == 9
    # the killed ingest appended rows: a reader of the latest version sees them, speclogs' readers do not
    assert pl.scan_delta(str(lake / "decode_batches")).select(pl.len()).collect().item() > counts["decode_batches"]
    after = connect_lake(lake)
    assert {t: after.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in counts} == counts
    after.close()
    # the next ingest takes them back first, then ingests the files again: no row twice
    summary = ingest_lake([FIXTURES / "probes", FIXTURES / "matrix"], lake)
    assert summary.files_ingested > 0
    ingest_paths([FIXTURES / "probes", FIXTURES / "matrix"], db)
    expected, actual = connect(db, read_only=True), connect_lake(lake)
    try:
        assert_same_tables(expected, actual, RELATIONS)
    finally:
        expected.close()
        actual.close()
    latest = pl.scan_delta(str(lake / "decode_batches")).select(pl.len()).collect().item()
    assert latest == scalar(db, "SELECT count(*) FROM decode_batches")


def test_a_column_added_later_keeps_the_older_lake_readable(tmp_path, monkeypatch):
    """A later speclogs fills one more decode_batches column: the Delta table's schema grows (merge) and the rows
    written before it read back with NULL there, beside the new rows."""
    from speclogs.store import lake as lake_module

    lake = tmp_path / "lake"
    ingest_lake([FIXTURES / "matrix"], lake)
    old_rows = pl.scan_delta(str(lake / "decode_batches")).select(pl.len()).collect().item()
    written = lake_module.written_tables

    def with_new_column(connection):
        tables = written(connection)
        tables["decode_batches"] = tables["decode_batches"].project("*, 2.5::DOUBLE AS draft_extra_ms")
        return tables

    monkeypatch.setattr(lake_module, "written_tables", with_new_column)
    ingest_lake([ROOT / "fixtures" / "h200x2" / "baseline_default"], lake)
    frame = pl.scan_delta(str(lake / "decode_batches")).collect()
    assert frame.height > old_rows and frame.get_column("draft_extra_ms").null_count() == old_rows
    assert set(frame.get_column("draft_extra_ms").drop_nulls()) == {2.5}
    connection = connect_lake(lake)
    try:
        assert connection.execute("SELECT count(*), count(draft_extra_ms) FROM decode_batches").fetchone() == (
            frame.height, frame.height - old_rows)
    finally:
        connection.close()


def test_lake_usage_errors(tmp_path):
    replace = run_cli("ingest", str(FIXTURES / "probes"), "--lake", str(tmp_path / "lake"), "--replace")
    assert replace.returncode == 2 and "append-only" in replace.stderr
    ray = run_cli("ingest", str(FIXTURES / "probes"), "--ray", "local")
    assert ray.returncode == 2 and "--lake" in ray.stderr
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    other = run_cli("ingest", str(FIXTURES / "probes"), "--lake", str(tmp_path / "other"))
    assert other.returncode == 1 and "is not a speclogs lake" in other.stderr, other.stderr
    missing = run_cli("sql", "--lake", str(tmp_path / "nowhere"), "SELECT 1")
    assert missing.returncode == 1 and "no lake at" in missing.stderr


def _java() -> bool:
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


def test_spark_reads_the_lake(both):
    """Spark (where a JVM is installed) reads the committed Parquet files of each table: the same rows."""
    pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'speclogs[fleet]')")
    if not _java():
        pytest.skip("no JVM here (Debian: apt-get install -y default-jre-headless)")
    from pyspark.sql import SparkSession

    db, lake = both
    spark = (SparkSession.builder.master("local[2]").appName("speclogs-lake-test").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    expected = connect(db, read_only=True)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        for table in ("decode_batches", "server_events", "files", "bench_requests"):
            frame = spark.read.parquet(*table_files(lake, table))
            assert frame.count() == expected.execute(f"SELECT count(*) FROM {table}").fetchone()[0], table
        decode = spark.read.parquet(*table_files(lake, "decode_batches"))
        got = decode.groupBy().sum("gen_throughput_tok_s").collect()[0][0]
        want = expected.execute("SELECT sum(gen_throughput_tok_s) FROM decode_batches").fetchone()[0]
        assert got == pytest.approx(want, rel=1e-12)
        first = decode.orderBy("source_file", "line_no").select("ts").first()[0]
        assert first == expected.execute("SELECT ts FROM decode_batches ORDER BY source_file, line_no LIMIT 1").fetchone()[0]
        assert pyspark.__version__
    finally:
        expected.close()
        spark.stop()
