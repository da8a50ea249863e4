"""`speclogs ingest --lake DIR --ray …` on a real local Ray cluster of two worker processes: the lake it writes holds
exactly the rows of a single-process ingest (and of the DuckDB file), read back with DuckDB and polars."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest

from conftest import ROOT, assert_same_tables, run_cli, scalar
from speclogs.store import connect, ingest_paths
from speclogs.store.lake import connect_lake, contract_columns, ingest_lake

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'speclogs[fleet]')")
deltalake = pytest.importorskip("deltalake", reason="deltalake is not installed (pip install 'speclogs[fleet]')")
pytestmark = pytest.mark.ray

RELATIONS = [*contract_columns(), "line_accounting", "meta"]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The fixtures ingested in one process, into a lake and into a DuckDB file."""
    where = tmp_path_factory.mktemp("single")
    ingest_lake([ROOT / "fixtures"], where / "lake")
    ingest_paths([ROOT / "fixtures"], where / "speclogs.duckdb")
    return where / "lake", where / "speclogs.duckdb"


def test_ray_ingest_of_the_fixtures_equals_a_single_process_ingest(single, tmp_path):
    lake_one, db = single
    lake = tmp_path / "lake"
    result = run_cli("ingest", str(ROOT / "fixtures"), "--lake", str(lake), "--ray", "local", "--ray-cpus", "2",
                     "--format", "json", timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["files_ingested"] == scalar(db, "SELECT count(*) FROM files")
    assert deltalake.DeltaTable(lake / "files").version() == 0  # one commit point
    from_ray, from_one, from_db = connect_lake(lake), connect_lake(lake_one), connect(db, read_only=True)
    try:
        assert_same_tables(from_one, from_ray, RELATIONS)
        assert_same_tables(from_db, from_ray, RELATIONS)
    finally:
        for connection in (from_ray, from_one, from_db):
            connection.close()
    # as it is, with polars: the rows of every table
    for table in ("decode_batches", "server_args", "nccl_events", "files"):
        ray_frame = pl.scan_delta(str(lake / table)).collect()
        one_frame = pl.scan_delta(str(lake_one / table)).collect()
        columns = [c for c in one_frame.columns if c not in ("ingested_at", "parse_seconds")]
        assert ray_frame.select(columns).sort(columns, nulls_last=True).equals(
            one_frame.select(columns).sort(columns, nulls_last=True)), table


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster with two CPUs (two worker processes), for the tests that call the library."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


def test_the_same_content_in_two_tasks_is_ingested_once_as_in_one_process(cluster, tmp_path):
    """A copy of the first log, at the end of the walk (another task): both ingests keep the first and skip the copy."""
    source = tmp_path / "logs"
    shutil.copytree(ROOT / "fixtures" / "h200x2-sglang-0.5.14", source / "a")
    first = sorted((source / "a").rglob("*.log"))[0]
    (source / "zz").mkdir()
    shutil.copy(first, source / "zz" / "copy.log")
    one = ingest_lake([source], tmp_path / "one")
    fanned = ingest_lake([source], tmp_path / "ray", ray="auto")
    reason = "the same content as a file already ingested, skipped"
    assert one.skipped.get(reason) == fanned.skipped.get(reason) == 1
    assert [w for w in fanned.warnings if "the same content as" in w] == [w for w in one.warnings if "the same content as" in w]
    a, b = connect_lake(tmp_path / "one"), connect_lake(tmp_path / "ray")
    try:
        assert_same_tables(a, b, RELATIONS)
    finally:
        a.close()
        b.close()
    again = ingest_lake([source], tmp_path / "ray", ray="auto")  # idempotent through Ray too
    assert again.files_ingested == 0 and deltalake.DeltaTable(tmp_path / "ray" / "files").version() == 0
