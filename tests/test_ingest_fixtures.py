"""Exact counts after ingesting the real H200 logs (expectations counted with grep on the files)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURE_LOGS, FIXTURES, MATRIX, PROBES, query, scalar
from speclogs.store import ingest_paths


@pytest.fixture(scope="module")
def fixtures_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("fixtures") / "speclogs.duckdb"
    summary = ingest_paths([FIXTURES], db)
    assert summary.files_ingested == 18
    return db


def grep_count(path: Path, text: str) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if text in line)


def wc_l(path: Path) -> int:
    return int(subprocess.run(["wc", "-l", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def rows_for(db: Path, table: str, log: Path, where: str = "TRUE") -> int:
    return scalar(db, f"SELECT count(*) FROM {table} WHERE source_file = ? AND {where}", [str(log.resolve())])


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: p.name)
def test_every_decode_line_is_a_row_with_the_right_accept_len(fixtures_db, log):
    decode_lines = grep_count(log, "Decode batch")
    assert decode_lines > 0
    assert rows_for(fixtures_db, "decode_batches", log) == decode_lines
    accept = query(
        fixtures_db,
        "SELECT count(accept_len), min(accept_len), max(accept_len) FROM decode_batches WHERE source_file = ?",
        [str(log.resolve())],
    )[0]
    if "eagle3" in log.name and "random-draft" not in log.name:
        assert accept == (decode_lines, 2.0, 2.0)
    elif "random-draft-eagle3" in log.name:
        assert accept == (decode_lines, 1.0, 1.0)
    else:
        assert accept == (0, None, None)


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: p.name)
def test_prefill_http_nccl_and_server_args_counts(fixtures_db, log):
    assert rows_for(fixtures_db, "prefill_batches", log) == grep_count(log, "Prefill batch")
    assert rows_for(fixtures_db, "http_requests", log) == grep_count(log, 'HTTP/1.1" ')
    assert rows_for(fixtures_db, "http_requests", log, "path = '/health' AND status = 503") == grep_count(
        log, 'GET /health HTTP/1.1" 503'
    )
    assert rows_for(fixtures_db, "launches", log) == 1
    assert rows_for(fixtures_db, "server_args", log, "name = 'tp_size' AND value = '2'") == 1


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: p.name)
def test_line_accounting_sums_to_wc_l(fixtures_db, log):
    total, parsed, continuation, unparsed, balanced = query(
        fixtures_db,
        "SELECT total_lines, parsed, continuation, unparsed, balanced FROM line_accounting WHERE source_file = ?",
        [str(log.resolve())],
    )[0]
    assert total == wc_l(log)
    assert parsed + continuation + unparsed == total
    assert balanced is True
    # every unparsed line is stored with its raw text
    assert rows_for(fixtures_db, "unparsed_lines", log, "reason NOT LIKE '%fragment%'") == unparsed


def test_health_is_503_before_200(fixtures_db):
    log = MATRIX / "baseline_default.log"
    statuses = [
        status
        for (status,) in query(
            fixtures_db,
            "SELECT status FROM http_requests WHERE source_file = ? AND path = '/health' ORDER BY line_no",
            [str(log.resolve())],
        )
    ]
    assert statuses == [503, 503, 503, 503, 200]


def test_bench_rows_six_per_matrix_run_with_one_warmup(fixtures_db):
    rows = query(
        fixtures_db,
        """SELECT r.run_name, count(*), count(*) FILTER (WHERE b.warmup), min(b.completion_tokens), max(b.completion_tokens)
           FROM bench_requests b JOIN runs r USING (run_id) WHERE b.source_kind = 'bench_jsonl' GROUP BY 1 ORDER BY 1""",
    )
    assert rows == [
        ("baseline_default", 6, 1, 500, 500),
        ("baseline_nccl", 6, 1, 500, 500),
        ("eagle3_default", 6, 1, 500, 500),
        ("eagle3_nccl", 6, 1, 500, 500),
    ]
    accept = query(
        fixtures_db,
        "SELECT DISTINCT b.spec_accept_length FROM bench_requests b JOIN runs r USING (run_id) WHERE r.run_name LIKE 'eagle3%'",
    )
    assert accept == [(2.0,)]


def test_older_bench_json_marks_element_zero_as_warmup(fixtures_db):
    bench = PROBES / "synth-eagle3-exact.bench.json"
    elements = json.loads(bench.read_text())
    rows = query(
        fixtures_db,
        "SELECT request_index, warmup, output_tok_s, source_kind FROM bench_requests WHERE source_file = ? ORDER BY request_index",
        [str(bench.resolve())],
    )
    assert len(rows) == len(elements)
    assert [r[1] for r in rows] == [True] + [False] * (len(elements) - 1)
    assert rows[0][2] == pytest.approx(elements[0]["tok_s"])
    assert {r[3] for r in rows} == {"bench_json"}


def test_log_and_bench_file_of_the_same_stem_are_one_run(fixtures_db):
    rows = query(
        fixtures_db,
        """SELECT r.run_name, r.speculative_algorithm, r.tp_size, count(DISTINCT f.source_file)
           FROM runs r JOIN files f USING (run_id) GROUP BY ALL ORDER BY 1""",
    )
    assert len(rows) == 9
    by_name = {name: (algorithm, tp, files) for name, algorithm, tp, files in rows}
    assert by_name["eagle3_nccl"] == ("EAGLE3", 2, 2)
    assert by_name["baseline_default"] == (None, 2, 2)
    assert by_name["synth-eagle3-exact"] == ("EAGLE3", 2, 2)


def test_launch_milestones(fixtures_db):
    log = MATRIX / "eagle3_nccl.log"
    start, ready, health, graph_end, shutdown = query(
        fixtures_db,
        "SELECT start_ts, ready_ts, first_health_200_ts, cuda_graph_end_ts, shutdown_ts FROM launches WHERE source_file = ?",
        [str(log.resolve())],
    )[0]
    assert start < graph_end <= ready <= health < shutdown
    assert str(start) == "2026-11-30 10:15:23"


def test_nccl_env_lines_say_what_was_set(fixtures_db):
    log = MATRIX / "eagle3_nccl.log"
    rows = query(
        fixtures_db,
        "SELECT DISTINCT name, value FROM nccl_events WHERE source_file = ? AND kind = 'env' ORDER BY name",
        [str(log.resolve())],
    )
    assert ("NCCL_PROTO", "LL") in rows
    assert ("NCCL_ALGO", "Ring") in rows
    nccl_lines = grep_count(log, "NCCL INFO")
    assert rows_for(fixtures_db, "nccl_events", log, "message IS NULL OR message IS NOT NULL") >= nccl_lines
