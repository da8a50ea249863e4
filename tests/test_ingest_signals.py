"""Stock SGLang signals into DuckDB: Prometheus snapshots → metrics / metric_types, request exports, --log-requests
lines and bench_serving details → requests. Real files first (fixtures/h200-sglang-0.5.14-metrics, SGLang 0.5.14 on
one H200), then the shapes the real files do not show (other versions, edge cases)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, query, scalar
from speclogs.ingest import sources
from speclogs.store import connect, ingest_paths
from speclogs.store.check import check_content

METRICS_FIXTURE = ROOT / "fixtures" / "h200-sglang-0.5.14-metrics"


@pytest.fixture(scope="module")
def metrics_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("signals") / "speclogs.duckdb"
    ingest_paths([METRICS_FIXTURE], db, run_name="h200_metrics")
    return db


def test_every_prom_line_is_a_row_and_counters_read_back(metrics_db):
    # every line of both snapshots is a sample row or a comment row, nothing unparsed
    for name, lines in (("metrics_before.prom", 489), ("metrics_after.prom", 494)):
        source = str(METRICS_FIXTURE / name)
        samples = scalar(metrics_db, "SELECT count(*) FROM metrics WHERE source_file = ?", [source])
        comments = scalar(metrics_db, "SELECT count(*) FROM metric_types WHERE source_file = ?", [source])
        assert samples + comments == lines
        assert query(metrics_db, "SELECT total_lines, parsed, unparsed, balanced FROM line_accounting WHERE source_file = ?",
                     [source]) == [(lines, lines, 0, True)]
    counters = query(metrics_db, """SELECT phase, name, value FROM metrics
        WHERE name IN ('sglang:spec_verify_calls_total', 'sglang:generation_tokens_total') ORDER BY name, phase DESC""")
    assert counters == [("before", "sglang:generation_tokens_total", 8.0), ("after", "sglang:generation_tokens_total", 1008.0),
                        ("before", "sglang:spec_verify_calls_total", 4.0), ("after", "sglang:spec_verify_calls_total", 504.0)]
    # the device timer: one counter per forward category, labels queryable as JSON
    categories = query(metrics_db, """SELECT labels->>'category', metric_type, round(value, 4) FROM metrics
        WHERE family = 'sglang:forward_execution_seconds_total' AND phase = 'after' ORDER BY 1""")
    assert categories == [("eagle_draft", "counter", 0.219), ("eagle_draft_extend", "counter", 0.0707),
                          ("extend", "counter", 0.1525), ("target_verify", "counter", 0.6708)]
    # histogram series keep their family and type; HELP/TYPE text is kept
    assert scalar(metrics_db, """SELECT count(DISTINCT name) FROM metrics
        WHERE family = 'sglang:time_to_first_token_seconds' AND metric_type = 'histogram'""") == 3   # _sum _bucket _count
    assert scalar(metrics_db, """SELECT text FROM metric_types WHERE directive = 'HELP'
        AND family = 'sglang:spec_verify_calls_total' AND phase = 'after'""") == "Number of speculative decoding verification calls."
    # big values keep the text they were printed with
    assert query(metrics_db, "SELECT value, value_text FROM metrics WHERE name = 'sglang:max_total_num_tokens' AND phase = 'after'") \
        == [(2095500.0, "2.0955e+06")]


def test_request_export_rows_and_the_cut_last_record(metrics_db):
    source = str(METRICS_FIXTURE / "request_export.jsonl")
    rows = query(metrics_db, """SELECT rid, prompt_tokens, completion_tokens, spec_accept_length, spec_verify_ct,
        spec_accept_token_num, spec_draft_token_num, spec_accept_histogram->>1, request->'sampling_params'->>'max_new_tokens'
        FROM requests WHERE source_file = ?""", [source])
    assert rows == [("b929cb94446d4b7db39bc644d18f749d", 3, 8, 2.0, 4, 4, 20, "4", "8")]
    # make.sh kept the first 3,000 bytes: the second record is cut, and kept as an unparsed line with a reason
    assert query(metrics_db, "SELECT line_no, reason LIKE 'not JSON%cut off?)' FROM unparsed_lines WHERE source_file = ?",
                 [source]) == [(2, True)]


def test_log_requests_lines_pair_into_one_row_per_request(metrics_db):
    source = str(METRICS_FIXTURE / "server.log")
    rows = query(metrics_db, """SELECT line_no, received_line_no, health_check, completion_tokens, spec_verify_ct,
        spec_accept_length, source_kind FROM requests WHERE source_file = ? ORDER BY line_no""", [source])
    assert len(rows) == 7  # SGLang's start-up warm-up, its /health probe, the five benchmark requests
    assert rows[0] == (68, 63, False, 8, 4, 2.0, "log_requests_text")
    assert rows[1][:3] == (73, 71, True)
    assert [r[3:6] for r in rows[2:]] == [(200, 100, 2.0)] * 5
    # the same request read from two sources joins on rid
    assert scalar(metrics_db, """SELECT count(*) FROM requests a JOIN requests b USING (rid)
        WHERE a.source_kind = 'request_export' AND b.source_kind = 'log_requests_text'""") == 1


def test_the_content_check_finds_every_printed_value(metrics_db):
    connection = connect(metrics_db, read_only=True)
    try:
        result = check_content(connection)
    finally:
        connection.close()
    kinds = {f.kind for f in result.files}
    assert {"prometheus", "request_export", "log"} <= kinds
    assert result.ok, [loss.to_dict() for loss in result.losses[:3]]
    assert result.lines_kept == 494 + 489 + 112 + 2


def test_prometheus_edge_cases_are_rows_or_unparsed_and_pass_the_check(tmp_path, db_path):
    prom = tmp_path / "scrape_after.prom"
    prom.write_text(
        "# HELP http_requests_total The total number of HTTP requests.\n"
        "# TYPE http_requests_total counter\n"
        'http_requests_total{method="post",code="200"} 1027 1395066363000\n'
        'http_requests_total{method="post",path="C:\\\\DIR\\\\",note="say \\"hi\\""} 3\n'
        "# TYPE latency_seconds histogram\n"
        'latency_seconds_bucket{le="+Inf"} 7\n'
        "latency_seconds_sum 1.5e-03\n"
        "queue_depth NaN\n"
        "temperature_celsius -Inf\n"
        "# a free comment\n"
        "\n"
        "this is not a sample\n"
    )
    summary = ingest_paths([prom], db_path)
    assert summary.account.total_lines == 12 and summary.account.unparsed_lines == 2
    rows = query(db_path, "SELECT name, family, metric_type, labels::VARCHAR, value_text, sample_ts_ms, phase "
                          "FROM metrics ORDER BY line_no")
    assert rows[0][:3] + rows[0][4:] == ("http_requests_total", "http_requests_total", "counter", "1027", 1395066363000, "after")
    assert json.loads(rows[0][3]) == {"method": "post", "code": "200"}
    assert json.loads(rows[1][3]) == {"method": "post", "path": "C:\\DIR\\", "note": 'say "hi"'}
    assert rows[2][:3] == ("latency_seconds_bucket", "latency_seconds", "histogram")
    assert rows[4][:3] == ("queue_depth", "queue_depth", "untyped")
    assert query(db_path, "SELECT isnan(value) FROM metrics WHERE name = 'queue_depth'") == [(True,)]
    assert query(db_path, "SELECT line_no, reason FROM unparsed_lines ORDER BY 1")[0] == (11, "empty line")
    connection = connect(db_path, read_only=True)
    try:
        result = check_content(connection)
    finally:
        connection.close()
    assert result.ok, [loss.to_dict() for loss in result.losses]


def test_sglangs_export_file_name_is_an_export_not_a_log(tmp_path, db_path):
    real = (METRICS_FIXTURE / "request_export.jsonl").read_text().split("\n")[0]
    export = tmp_path / "sglang-request-metrics-20261201_09.log"
    export.write_text(real + "\n")
    ingest_paths([tmp_path], db_path)
    assert query(db_path, "SELECT kind, parsed_lines FROM files") == [("request_export", 1)]
    assert scalar(db_path, "SELECT spec_verify_ct FROM requests") == 4


def test_json_request_log_lines_prefixed_and_bare(tmp_path, db_path):
    meta = {"id": "r1", "finish_reason": {"type": "length", "length": 200}, "prompt_tokens": 64, "completion_tokens": 200,
            "e2e_latency": 0.51, "spec_accept_length": 2.5, "spec_verify_ct": 80, "spec_num_correct_drafts": 120,
            "spec_num_proposed_drafts": 400, "spec_accept_histogram": [0, 40, 40]}
    received = {"timestamp": "2026-12-01T09:25:41.777307", "event": "request.received", "rid": "r1", "obj": {"rid": "r1"}}
    finished = {"timestamp": "2026-12-01T09:25:42.292711", "event": "request.finished", "rid": "r1", "obj": {"rid": "r1"},
                "out": {"meta_info": meta, "output_ids": [1, 2]}}
    log = tmp_path / "server.log"
    log.write_text(f"[2026-12-01 09:25:41] {json.dumps(received)}\n"   # 0.5.14+: behind the logger's prefix
                   f"{json.dumps(finished)}\n")                          # 0.5.9: bare JSON
    ingest_paths([log], db_path)
    assert query(db_path, """SELECT line_no, received_line_no, source_kind, spec_accept_length, spec_verify_ct,
        spec_accept_token_num, spec_draft_token_num, extra->'out.output_ids'->>1 FROM requests""") \
        == [(2, 1, "log_requests_json", 2.5, 80, 120, 400, "2")]
    assert scalar(db_path, "SELECT unparsed_lines FROM files") == 0


def test_text_request_lines_of_older_versions_and_an_unfinished_request(tmp_path, db_path):
    log = tmp_path / "server.log"
    log.write_text(
        "[2025-09-17 16:23:16] Receive: obj=GenerateReqInput(rid='a1', text='Hello, (world)', sampling_params={'max_new_tokens': 8})\n"
        "[2025-09-17 16:23:17] Finish: obj=GenerateReqInput(rid='a1', text='Hello, (world)'), headers={'x-id': '7'}, "
        "out={'text': ' bye', 'meta_info': {'id': 'a1', 'completion_tokens': 8, 'spec_accept_length': 1.6, 'spec_verify_ct': 5, "
        "'spec_accept_token_num': 3, 'spec_draft_token_num': 15, 'weird': float('inf')}}\n"
        "[2025-09-17 16:23:18] Receive: obj=GenerateReqInput(rid='a2', text='never answered')\n"
    )
    ingest_paths([log], db_path)
    rows = query(db_path, """SELECT rid, line_no, received_line_no, completion_tokens, spec_accept_token_num,
        spec_draft_token_num, request->>'text', extra->'headers'->>'x-id' FROM requests ORDER BY line_no""")
    # a value that is not a literal (float('inf')) costs that value only, not the record
    assert rows[0] == ("a1", 2, 1, 8, 3, 15, "Hello, (world)", "7")
    assert rows[1] == ("a2", 3, 3, None, None, None, "never answered", None)


def test_bench_serving_output_details_become_one_row_per_request(tmp_path, db_path):
    result = {"backend": "sglang", "completed": 2, "duration": 1.5, "output_throughput": 260.0, "total_input_tokens": 128,
              "total_output_tokens": 390, "input_lens": [64, 64], "output_lens": [200, 190], "ttfts": [0.05, 0.07],
              "itls": [[0.002, 0.004], [0.003]], "generated_texts": ["", ""], "errors": ["", "timeout"]}
    (tmp_path / "bench_serving.jsonl").write_text(json.dumps(result) + "\n")
    ingest_paths([tmp_path], db_path)
    assert scalar(db_path, "SELECT count(*) FROM bench_requests") == 1
    rows = query(db_path, """SELECT request_index, prompt_tokens, completion_tokens, ttft_s, round(itl_mean_ms, 3), error,
        source_kind FROM requests ORDER BY request_index""")
    assert rows == [(0, 64, 200, 0.05, 3.0, None, "bench_serving"), (1, 64, 190, 0.07, 3.0, "timeout", "bench_serving")]


def test_ingesting_the_same_signals_again_changes_nothing(metrics_db, tmp_path):
    before = scalar(metrics_db, "SELECT count(*) FROM metrics") + scalar(metrics_db, "SELECT count(*) FROM requests")
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(metrics_db.read_bytes())
    summary = ingest_paths([METRICS_FIXTURE], copy, run_name="h200_metrics")
    assert summary.files_ingested == 0 and summary.files_unchanged == 4
    assert scalar(copy, "SELECT count(*) FROM metrics") + scalar(copy, "SELECT count(*) FROM requests") == before


@pytest.mark.parametrize("streamed", [False, True])
def test_request_lines_pair_by_rid_within_a_launch_in_line_order(tmp_path, db_path, monkeypatch, streamed):
    """A Finish line takes the Receive line its rid waits for in that launch; one that waits for nothing, and a Receive
    line nobody answered, are rows of their own; a Receive line followed by another of its rid gives no row (the later
    one waits). Read whole, and streamed in chunks of a few lines, so that pairs reach across chunks."""
    def receive(rid: str) -> str:
        return f"[2026-12-01 09:00:00] Receive: obj=GenerateReqInput(rid='{rid}', text='{'x' * 60}')\n"

    def finish(rid: str, tokens: int) -> str:
        return (f"[2026-12-01 09:00:01] Finish: obj=GenerateReqInput(rid='{rid}'), "
                f"out={{'meta_info': {{'id': '{rid}', 'completion_tokens': {tokens}}}}}\n")

    server_args = "[2026-12-01 08:59:00] server_args=ServerArgs(model_path='m', tp_size=1)\n"
    lines = [server_args, receive("a"), finish("a", 1), finish("a", 2),   # 2-4: a pair, then a Finish waiting for nothing
             receive("b"), receive("b"), finish("b", 3),                   # 5-7: the second Receive line pairs
             receive("c"),                                                 # 8: never answered ...
             server_args, finish("c", 4),                                  # 9-10: ... in its launch: launch 2 has no c
             receive("d"), "[2026-12-01 09:00:02] some other line\n" * 3, finish("d", 5)]  # 11-15
    log = tmp_path / "server.log"
    log.write_text("".join(lines))
    if streamed:
        monkeypatch.setattr(sources, "STREAM_MIN_BYTES", 256)
    ingest_paths([log], db_path, chunk_bytes=300 if streamed else None)
    assert query(db_path, "SELECT rid, launch_no, line_no, received_line_no, completion_tokens FROM requests ORDER BY line_no") == [
        ("a", 1, 3, 2, 1), ("a", 1, 4, None, 2), ("b", 1, 7, 6, 3), ("c", 1, 8, 8, None), ("c", 2, 10, None, 4),
        ("d", 2, 15, 11, 5)]
