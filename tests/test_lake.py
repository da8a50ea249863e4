"""`speclogs ingest --lake DIR`: the contract's tables as hive-partitioned Parquet that DuckDB, polars and Spark read
as they are, and that `speclogs sql`, `report` and `check` query exactly as they query the DuckDB file."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from conftest import FIXTURES, ROOT, assert_same_tables, contract_rows, run_cli, scalar
from speclogs.store import connect, ingest_paths
from speclogs.store.lake import connect_lake, contract_columns, ingest_lake, manifests, table_glob

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


def test_duckdb_and_polars_read_the_parquet_as_it_is(both):
    """No speclogs needed to read a lake: the partition columns come from the folder names."""
    db, lake = both
    expected = connect(db, read_only=True)
    try:
        _, decode_rows = contract_rows(expected, "decode_batches")
        counts = dict(expected.execute("SELECT r.sglang_version, count(*) FROM decode_batches d JOIN runs r USING (run_id) "
                                       "GROUP BY 1").fetchall())
    finally:
        expected.close()
    glob = table_glob(lake, "decode_batches")
    by_partition = dict(duckdb.sql(f"SELECT sglang, count(*) FROM read_parquet('{glob}', hive_partitioning = true) "
                                   "GROUP BY 1").fetchall())
    assert by_partition == {("unknown" if version is None else version): n for version, n in counts.items()}
    frame = pl.scan_parquet(glob, hive_partitioning=True).collect()
    assert {"sglang", "day"} <= set(frame.columns) and frame.height == len(decode_rows)
    assert frame.schema["ts"] == pl.Datetime("us") and frame.schema["accept_len"] == pl.Float64
    columns = [name for name, _ in contract_columns()["decode_batches"] if name not in ("ingested_at", "parse_seconds")]
    rows = sorted(frame.select(columns).rows(), key=repr)
    assert rows == sorted(decode_rows, key=repr)


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
    assert parquet_files(copy) == before and len(manifests(copy)) == 1


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
    assert summary.files_ingested == 2 and first_parts < parquet_files(lake) and len(manifests(lake)) == 2
    expected, actual = connect(db, read_only=True), connect_lake(lake)
    try:
        assert_same_tables(expected, actual, RELATIONS)
        assert actual.execute("SELECT count(*), count(model_path), count(outcome) FROM runs").fetchone() == (2, 2, 2)
    finally:
        expected.close()
        actual.close()


def test_an_interrupted_ingest_leaves_nothing_visible_and_the_next_one_cleans_up(tmp_path):
    lake = tmp_path / "lake"
    ingest_lake([FIXTURES / "probes"], lake)
    leftover = lake / "_staging" / "c20990101T000000000000-deadbeef" / "decode_batches" / "sglang=x" / "day=2099-01-01"
    leftover.mkdir(parents=True)
    (leftover / "part-c20990101T000000000000-deadbeef-w0-0.parquet").write_bytes(b"not a commit")
    connection = connect_lake(lake)  # readers never look at staging
    assert connection.execute("SELECT count(*) FROM files WHERE source_file LIKE '%probes%'").fetchone()[0] > 0
    connection.close()
    ingest_lake([FIXTURES / "matrix"], lake)
    assert not (lake / "_staging" / "c20990101T000000000000-deadbeef").exists()
    assert len(manifests(lake)) == 2


def test_a_second_writer_is_told_who_holds_the_lake(tmp_path):
    lake = tmp_path / "lake"
    ingest_lake([FIXTURES / "probes"], lake)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (lake / "_lock").write_text(json.dumps({"host": socket.gethostname(), "pid": holder.pid, "since": "now"}))
        result = run_cli("ingest", str(FIXTURES / "matrix"), "--lake", str(lake))
        assert result.returncode == 1
        assert f"is being written by {socket.gethostname()} pid {holder.pid}" in result.stderr
    finally:
        holder.kill()
        holder.wait()
    result = run_cli("ingest", str(FIXTURES / "matrix"), "--lake", str(lake))  # its writer is gone: the lock is stale
    assert result.returncode == 0, result.stderr
    assert not (lake / "_lock").exists()


def test_lake_usage_errors(tmp_path):
    replace = run_cli("ingest", str(FIXTURES / "probes"), "--lake", str(tmp_path / "lake"), "--replace")
    assert replace.returncode == 2 and "append-only" in replace.stderr
    ray = run_cli("ingest", str(FIXTURES / "probes"), "--ray", "local")
    assert ray.returncode == 2 and "--lake" in ray.stderr
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    other = run_cli("ingest", str(FIXTURES / "probes"), "--lake", str(tmp_path / "other"))
    assert other.returncode == 1 and "is not a speclogs lake" in other.stderr
    missing = run_cli("sql", "--lake", str(tmp_path / "nowhere"), "SELECT 1")
    assert missing.returncode == 1 and "no lake at" in missing.stderr


def _java() -> bool:
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


def test_spark_reads_the_lake(both):
    """Spark (where a JVM is installed): the same rows per table, the partition columns from the folders."""
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
            frame = spark.read.option("basePath", str(lake / table)).parquet(str(lake / table))
            assert frame.count() == expected.execute(f"SELECT count(*) FROM {table}").fetchone()[0], table
            assert frame.columns[-2:] == ["sglang", "day"]
        decode = spark.read.option("basePath", str(lake / "decode_batches")).parquet(str(lake / "decode_batches"))
        got = decode.groupBy().sum("gen_throughput_tok_s").collect()[0][0]
        want = expected.execute("SELECT sum(gen_throughput_tok_s) FROM decode_batches").fetchone()[0]
        assert got == pytest.approx(want, rel=1e-12)
        first = decode.orderBy("source_file", "line_no").select("ts").first()[0]
        assert first == expected.execute("SELECT ts FROM decode_batches ORDER BY source_file, line_no LIMIT 1").fetchone()[0]
        assert pyspark.__version__
    finally:
        expected.close()
        spark.stop()
