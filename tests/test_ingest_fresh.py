"""Fresh data on re-ingest: a file as stored (path, size, mtime, inode) is skipped without being read; a log that
grew, or a launch directory that changed (a `--resume` after `--max-minutes`), is read again and its rows replaced,
leaving the database equal to a fresh ingest of what is on disk; every file left out is listed with its reason."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest

from conftest import MATRIX, ROOT, assert_same_tables
from speclogs.ingest import pipeline
from speclogs.store import ingest_paths
from speclogs.store.lake import contract_columns

LAUNCH = ROOT / "fixtures" / "h200-signals" / "eagle3_noisy" / "1"
RELATIONS = [*contract_columns(), "line_accounting"]


def assert_same_as_fresh(db: Path, paths: list[Path], tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.duckdb"
    fresh.unlink(missing_ok=True)
    ingest_paths(paths, fresh)
    expected, actual = duckdb.connect(str(fresh), read_only=True), duckdb.connect(str(db), read_only=True)
    try:
        assert_same_tables(expected, actual, RELATIONS)
    finally:
        expected.close()
        actual.close()


def test_an_unchanged_file_is_not_read_again_unless_verify_is_asked(tmp_path, monkeypatch):
    log = tmp_path / "eagle.log"
    shutil.copy(MATRIX / "eagle3_nccl.log", log)
    db = tmp_path / "db.duckdb"
    ingest_paths([log], db)
    reads = []
    real_read = pipeline.read_input
    monkeypatch.setattr(pipeline, "read_input", lambda item: reads.append(item.source_file) or real_read(item))
    summary = ingest_paths([tmp_path], db)
    assert (summary.files_unchanged, summary.files_ingested, reads) == (1, 0, [])
    summary = ingest_paths([tmp_path], db, verify=True)
    assert (summary.files_unchanged, summary.files_ingested, reads) == (1, 0, [str(log.resolve())])
    os.utime(log, ns=(log.stat().st_atime_ns, log.stat().st_mtime_ns + 10**9))  # touched, same content
    summary = ingest_paths([log], db)
    assert (summary.files_unchanged, summary.files_ingested, len(reads)) == (1, 0, 2)
    summary = ingest_paths([log], db)  # its new mtime was stored: not read again
    assert (summary.files_unchanged, summary.files_ingested, len(reads)) == (1, 0, 2)


def test_an_appended_log_is_read_again_and_equals_a_fresh_ingest(tmp_path):
    lines = (MATRIX / "eagle3_nccl.log").read_text().splitlines(keepends=True)
    log = tmp_path / "growing.log"
    log.write_text("".join(lines[: len(lines) // 2]))
    db = tmp_path / "db.duckdb"
    ingest_paths([log], db)
    with log.open("a") as out:
        out.writelines(lines[len(lines) // 2:])
    summary = ingest_paths([log], db)
    assert summary.files_ingested == 1 and summary.skipped_files == ()
    assert summary.replaced == ((str(log.resolve()), "lines appended since it was ingested: read again, its rows replaced"),)
    assert_same_as_fresh(db, [log], tmp_path)


def test_a_changed_launch_directory_is_read_again_and_its_old_run_is_gone(tmp_path):
    """What `launch --max-minutes` then `--resume` leaves: the interrupted attempt's run.json and server.log, then
    the launch run again from the start (a new run_uid, the log written anew)."""
    launch = tmp_path / "plan" / "eagle3" / "1"
    shutil.copytree(LAUNCH, launch)
    final = {name: (launch / name).read_bytes() for name in ("run.json", "server.log")}
    record = json.loads(final["run.json"])
    interrupted = {**record, "run_uid": "0" * 32, "outcome": "interrupted", "complete": False}
    (launch / "run.json").write_text(json.dumps(interrupted))
    text = final["server.log"].decode()
    (launch / "server.log").write_text(text[: len(text) // 3].rsplit("\n", 1)[0] + "\n")
    db = tmp_path / "db.duckdb"
    ingest_paths([tmp_path / "plan"], db)
    for name, data in final.items():
        (launch / name).write_bytes(data)
    summary = ingest_paths([tmp_path / "plan"], db)
    # every file of the launch: those that did not change belonged to the interrupted attempt's run
    why = dict(summary.replaced)
    assert {Path(path).name for path in why} == {path.name for path in launch.iterdir()}
    assert set(why.values()) == {"its launch ran again (a new run.json): read again, its rows replaced"}
    with duckdb.connect(str(db), read_only=True) as connection:
        assert connection.execute("SELECT outcome FROM runs").fetchall() == [("ok",)]
    assert_same_as_fresh(db, [tmp_path / "plan"], tmp_path)


def test_a_changed_file_outside_a_launch_directory_is_listed_as_skipped(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "eagle.log"
    shutil.copy(MATRIX / "eagle3_nccl.log", log)
    db = tmp_path / "db.duckdb"
    ingest_paths([log], db)
    log.write_text(log.read_text().replace("TP0", "TP1", 1))
    (logs / "README.md").write_text("not a log")
    summary = ingest_paths([logs], db)
    assert summary.files_ingested == 0 and summary.replaced == ()
    assert sorted(summary.skipped_files) == [
        (str(logs / "README.md"), "not a log or bench file name (.md)"),
        (str(log.resolve()), "content changed since it was ingested (use --replace to re-ingest)"),
    ]
    assert json.loads(summary.to_json())["skipped_files"] == [list(pair) for pair in summary.skipped_files]


@pytest.mark.parametrize("replace", [False, True])
def test_a_database_of_schema_5_gets_the_stat_columns(tmp_path, replace):
    """Files stored before the stat columns existed are read (and hashed) once more, then skipped unread."""
    log = tmp_path / "eagle.log"
    shutil.copy(MATRIX / "eagle3_nccl.log", log)
    db = tmp_path / "db.duckdb"
    ingest_paths([log], db)
    with duckdb.connect(str(db)) as connection:
        connection.execute("UPDATE files SET inode = NULL, mtime_ns = NULL")
    summary = ingest_paths([log], db, replace=replace)
    assert summary.files_unchanged == (0 if replace else 1)
    with duckdb.connect(str(db), read_only=True) as connection:
        stored = connection.execute("SELECT inode, mtime_ns FROM files").fetchall()
    assert stored == [(log.stat().st_ino, log.stat().st_mtime_ns)]
