"""The DuckDB store: idempotent ingest, --replace, changed files, a second writer, read-only SQL, launcher runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import MATRIX, database_held_by_another_process, query, run_cli, scalar
from speclogs.errors import StoreError
from speclogs.schema import schema_version
from speclogs.store import connect, ingest_paths, run_query

EAGLE = MATRIX / "eagle3_nccl.log"
EAGLE_BENCH = MATRIX / "eagle3_nccl.bench.jsonl"

TABLES = ("decode_batches", "prefill_batches", "http_requests", "server_events", "nccl_events", "server_args",
          "bench_requests", "unparsed_lines", "launches", "files", "runs")


def counts(db: Path) -> dict[str, int]:
    return {table: scalar(db, f"SELECT count(*) FROM {table}") for table in TABLES}


def test_ingesting_twice_adds_nothing(db_path):
    first = ingest_paths([EAGLE, EAGLE_BENCH], db_path)
    before = counts(db_path)
    second = ingest_paths([EAGLE, EAGLE_BENCH], db_path)
    assert first.files_ingested == 2
    assert second.files_ingested == 0 and second.files_unchanged == 2
    assert any("unchanged" in reason for reason in second.skipped)
    assert counts(db_path) == before


def test_the_same_content_under_two_names_is_ingested_once(db_path, tmp_path):
    """A log copied into another folder, or named twice in one call, would count its launches twice in a comparison:
    it is ingested once, with a note naming the first. Empty files and /metrics snapshots (two fresh launches' before
    snapshots are the same text) are exempt."""
    copy = tmp_path / "backup" / "eagle3_nccl.log"
    copy.parent.mkdir()
    copy.write_bytes(EAGLE.read_bytes())
    prom = "# TYPE sglang:num_requests_total counter\nsglang:num_requests_total 0\n"
    for launch in ("a", "b"):
        (tmp_path / launch).mkdir()
        (tmp_path / launch / "metrics-before.prom").write_text(prom)
        (tmp_path / launch / "empty.log").write_text("")
    summary = ingest_paths([EAGLE, copy, EAGLE, tmp_path / "a", tmp_path / "b"], db_path)
    assert summary.skipped.get("the same content as a file already ingested, skipped") == 1
    assert [w for w in summary.warnings if "the same content as" in w] == [
        f"{copy.resolve()}: the same content as {EAGLE.resolve()}: ingested once, as {EAGLE.resolve()}"]
    assert scalar(db_path, "SELECT count(DISTINCT source_file) FROM decode_batches") == 1
    assert scalar(db_path, "SELECT count(*) FROM files WHERE source_file LIKE '%.prom'") == 2
    assert scalar(db_path, "SELECT count(*) FROM files WHERE source_file LIKE '%empty.log'") == 2
    again = ingest_paths([copy], db_path)  # a later call knows what the database holds
    assert again.files_ingested == 0 and again.skipped == {"the same content as a file already ingested, skipped": 1}


def test_replace_reingests_without_duplicates(db_path):
    ingest_paths([EAGLE], db_path)
    before = counts(db_path)
    again = ingest_paths([EAGLE], db_path, replace=True)
    assert again.files_ingested == 1
    assert counts(db_path) == before


def test_changed_file_needs_replace(db_path, tmp_path):
    log = tmp_path / "grow.log"
    lines = EAGLE.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:300]))
    ingest_paths([log], db_path)
    decode_before = scalar(db_path, "SELECT count(*) FROM decode_batches")
    log.write_text("# edited, not appended\n" + "".join(lines))
    skipped = ingest_paths([log], db_path)
    assert skipped.files_ingested == 0
    assert any("changed since it was ingested" in reason for reason in skipped.skipped)
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == decode_before
    replaced = ingest_paths([log], db_path, replace=True)
    assert replaced.files_ingested == 1
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 37
    assert scalar(db_path, "SELECT count(*) FROM files") == 1


def test_a_second_writer_gets_a_clear_error(db_path):
    ingest_paths([EAGLE_BENCH], db_path)
    with database_held_by_another_process(db_path) as pid:
        with pytest.raises(StoreError) as caught:
            ingest_paths([EAGLE], db_path)
        message = str(caught.value)
        assert "is being written by another process" in message
        assert f"pid {pid}" in message


def test_sql_is_read_only(db_path):
    ingest_paths([EAGLE], db_path)
    result = run_query(db_path, "SELECT count(*) AS n FROM decode_batches")
    assert result.columns == ("n",) and result.rows == ((37,),)
    with pytest.raises(StoreError) as caught:
        run_query(db_path, "DELETE FROM files")
    assert "read-only" in str(caught.value).lower()
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 37


def test_sql_without_database_says_so(tmp_path):
    with pytest.raises(StoreError) as caught:
        run_query(tmp_path / "missing.duckdb", "SELECT 1")
    assert "no database" in str(caught.value)


def test_schema_is_created_once_and_versioned(db_path):
    connect(db_path).close()
    connect(db_path).close()
    assert scalar(db_path, "SELECT value FROM meta WHERE key = 'schema_version'") == str(schema_version())


def write_launch_dir(root: Path, cell: str, launch: int, uid: str) -> Path:
    launch_dir = root / cell / str(launch)
    launch_dir.mkdir(parents=True)
    # each launch its own day: two launches never print the same log (the same content twice is ingested once)
    (launch_dir / "server.log").write_bytes(EAGLE.read_bytes().replace(b"[2026-11-30 ", f"[2026-12-{launch:02d} ".encode()))
    bench = [{**json.loads(line), "run": f"{cell}_{launch}"} for line in EAGLE_BENCH.read_text().splitlines()]
    (launch_dir / "bench.jsonl").write_text("".join(json.dumps(b) + "\n" for b in bench))
    run = {
        "schema": "speclogs.run/1", "run_uid": uid, "run_name": f"{cell}_{launch}", "cell": cell, "launch": launch,
        "factors": {"spec": "eagle3", "nccl": "tuned"}, "argv": ["python3", "-m", "sglang.launch_server"],
        "env": {"NCCL_PROTO": "LL", "HF_TOKEN": "<redacted>"}, "versions": {"sglang": "0.5.14", "torch": "2.11.0+cu130"},
        "gpus": [{"index": 0, "name": "NVIDIA H200"}, {"index": 1, "name": "NVIDIA H200"}], "hostname": "vm",
        "outcome": "ok", "files": {"server_log": "server.log", "bench": "bench.jsonl"},
    }
    (launch_dir / "run.json").write_text(json.dumps(run, indent=2))
    return launch_dir


def test_a_launcher_directory_is_one_run_named_from_run_json(db_path, tmp_path):
    out = tmp_path / "out"
    write_launch_dir(out, "eagle3_nccl", 1, "a" * 32)
    write_launch_dir(out, "eagle3_nccl", 2, "b" * 32)
    summary = ingest_paths([out], db_path)
    assert summary.files_ingested == 6
    rows = query(
        db_path,
        """SELECT run_name, cell, launch_index, factors->>'nccl', sglang_version, gpu_name, outcome, argv->>0,
                  env->>'NCCL_PROTO', speculative_algorithm, tp_size,
                  (SELECT count(*) FROM files f WHERE f.run_id = r.run_id),
                  (SELECT count(*) FROM bench_requests b WHERE b.run_id = r.run_id)
           FROM runs r ORDER BY 1""",
    )
    assert rows == [
        ("eagle3_nccl_1", "eagle3_nccl", 1, "tuned", "0.5.14", "NVIDIA H200", "ok", "python3", "LL", "EAGLE3", 2, 3, 6),
        ("eagle3_nccl_2", "eagle3_nccl", 2, "tuned", "0.5.14", "NVIDIA H200", "ok", "python3", "LL", "EAGLE3", 2, 3, 6),
    ]


def test_run_name_option_names_every_input(db_path):
    ingest_paths([EAGLE, EAGLE_BENCH], db_path, run_name="my-run")
    assert query(db_path, "SELECT run_name, count(*) FROM runs GROUP BY 1") == [("my-run", 1)]


def test_progress_events_cover_every_file(db_path):
    events = []
    ingest_paths([MATRIX], db_path, on_progress=events.append)
    assert [e.files_done for e in events] == list(range(9))
    assert events[-1].done_bytes == events[-1].total_bytes > 0


def test_multi_launch_file_is_split_at_each_server_args(db_path, tmp_path):
    log = tmp_path / "restarts.log"
    text = EAGLE.read_text()
    log.write_text(text + (MATRIX / "baseline_default.log").read_text() + text)
    ingest_paths([log], db_path)
    launches = query(db_path, "SELECT launch_no, first_line, last_line FROM launches ORDER BY 1")
    n1, n2 = len(text.splitlines()), len((MATRIX / "baseline_default.log").read_text().splitlines())
    sa1 = next(i for i, line in enumerate(text.splitlines(), 1) if "server_args=" in line)
    sa2 = next(i for i, line in enumerate((MATRIX / "baseline_default.log").read_text().splitlines(), 1) if "server_args=" in line)
    assert launches == [(1, 1, n1 + sa2 - 1), (2, n1 + sa2, n1 + n2 + sa1 - 1), (3, n1 + n2 + sa1, 2 * n1 + n2)]
    per_launch = query(db_path, "SELECT launch_no, count(*), count(accept_len) FROM decode_batches GROUP BY 1 ORDER BY 1")
    assert per_launch == [(1, 37, 37), (2, 75, 0), (3, 37, 37)]


def test_bench_serving_jsonl_with_infinity_and_a_broken_line(db_path, tmp_path):
    result = tmp_path / "sglang_1130_100_64_500.jsonl"
    result.write_text(
        '{"backend": "sglang", "dataset_name": "random", "request_rate": Infinity, "duration": 12.5, "completed": 100, '
        '"total_input_tokens": 6400, "total_output_tokens": 50000, "output_throughput": 4000.0, "accept_length": 2.5, '
        '"mean_e2e_latency_ms": 3100.0}\n'
        '{"backend": "sglang", "duration": 13.0, "completed": 100, "total_output_tokens": 50000, "output_thro\n'
    )
    summary = ingest_paths([result], db_path)
    assert summary.files_ingested == 1
    row = query(db_path, "SELECT source_kind, latency_s, completion_tokens, output_tok_s, spec_accept_length, e2e_latency_s, "
                         "extra->>'request_rate' FROM bench_requests")
    assert row == [("bench_serving_jsonl", 12.5, 50000, 4000.0, 2.5, 3.1, "inf")]
    reason, line_no = query(db_path, "SELECT reason, line_no FROM unparsed_lines")[0]
    assert reason.startswith("not JSON") and line_no == 2
    assert query(db_path, "SELECT total_lines, parsed, unparsed FROM line_accounting") == [(2, 1, 1)]


def test_nccl_probe_results_are_read_by_the_probe_reader(db_path):
    probe = MATRIX.parents[1] / "h200x2" / "nccl_probe.nccl_probe.json"
    if not probe.exists():
        pytest.skip("no probe fixture in this checkout")
    document = json.loads(probe.read_text())
    measurements = sum(len(env_set.get("measurements") or []) for env_set in document["env_sets"])
    ingest_paths([probe], db_path)
    assert scalar(db_path, "SELECT count(*) FROM nccl_probe") == measurements > 0
    assert scalar(db_path, "SELECT count(DISTINCT source_file) FROM nccl_probe") == 1
    again = ingest_paths([probe], db_path, replace=True)
    assert again.files_ingested == 1
    assert scalar(db_path, "SELECT count(*) FROM nccl_probe") == measurements


def _relabelled(tmp_path: Path, name: str) -> Path:
    """EAGLE with other label texts: odd decode lines from TP1 with npu graphs, 503s as 418 I'm a Teapot."""
    lines = EAGLE.read_text().splitlines(keepends=True)
    decode = [i for i, line in enumerate(lines) if "Decode batch" in line]
    for i in decode[1::2]:
        lines[i] = lines[i].replace(" TP0]", " TP1]").replace("cuda graph", "npu graph")
    text = "".join(lines).replace("503 Service Unavailable", "418 I'm a Teapot") + f"[2026-11-30 10:30:00] this is {name}\n"
    log = tmp_path / name
    log.write_text(text)
    return log


def _decode_labels(db: Path, source_file: Path) -> list[tuple]:
    return query(db, "SELECT rank_tags, graph_kind, count(*) FROM decode_batches WHERE source_file = ? GROUP BY ALL ORDER BY ALL",
                 [str(source_file.resolve())])


def test_label_columns_read_back_as_printed(db_path, tmp_path):
    ingest_paths([EAGLE], db_path)
    decode_lines = sum("Decode batch" in line for line in EAGLE.read_text().splitlines())
    assert _decode_labels(db_path, EAGLE) == [(" TP0", "cuda graph", decode_lines)]
    relabelled = _relabelled(tmp_path, "relabelled.log")
    ingest_paths([relabelled], db_path)
    half = decode_lines // 2
    assert _decode_labels(db_path, relabelled) == [(" TP0", "cuda graph", decode_lines - half), (" TP1", "npu graph", half)]
    assert _decode_labels(db_path, EAGLE) == [(" TP0", "cuda graph", decode_lines)]  # the first file's codes still read the same
    statuses = dict(query(db_path, "SELECT status_text, count(*) FROM http_requests WHERE status = 418 GROUP BY 1"))
    assert statuses == {"I'm a Teapot": EAGLE.read_text().count("503 Service Unavailable")}


def test_a_rolled_back_file_leaves_no_rows(db_path, tmp_path, monkeypatch):
    import duckdb

    from speclogs.store import writer

    ingest_paths([EAGLE], db_path)
    upsert = writer._upsert_runs

    def fail_one(connection, files):
        if any(parsed.source_file.endswith("failed.log") for parsed in files):
            raise duckdb.Error("disk on fire")
        upsert(connection, files)

    monkeypatch.setattr(writer, "_upsert_runs", fail_one)
    failed, again = _relabelled(tmp_path, "failed.log"), _relabelled(tmp_path, "again.log")
    summary = ingest_paths([failed, again], db_path)  # one transaction for both, then one each: failed.log's rolls back
    assert summary.files_ingested == 1 and any("rolled back" in reason for reason in summary.skipped)
    assert [row[:2] for row in _decode_labels(db_path, again)] == [(" TP0", "cuda graph"), (" TP1", "npu graph")]
    assert _decode_labels(db_path, failed) == []
    assert _decode_labels(db_path, EAGLE)[0][:2] == (" TP0", "cuda graph")


def test_a_database_older_than_schema_sql_asks_for_a_new_file(tmp_path):
    """Files of a schema before schema.sql's are not migrated: ingest says so and how to go on (exit 1), sql reads it."""
    from speclogs.schema import base_version

    old = tmp_path / "old.duckdb"
    connect(old).close()
    with connect(old) as connection:
        connection.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(base_version() - 1)])
    with pytest.raises(StoreError) as caught:
        connect(old)
    assert f"is of schema {base_version() - 1}" in str(caught.value)
    assert "new --db file" in caught.value.hint and "idempotent" in caught.value.hint
    done = run_cli("ingest", str(EAGLE), "--db", str(old))
    assert done.returncode == 1 and done.stderr.startswith("Error: ") and "Traceback" not in done.stderr
    assert "new --db file" in done.stderr
    assert scalar(old, "SELECT count(*) FROM decode_batches") == 0
