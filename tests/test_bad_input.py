"""Bad input never crashes the ingest: it becomes unparsed rows or a skipped file, with the reason in the summary."""

from __future__ import annotations

import gzip
import os

from conftest import MATRIX, query, run_cli, scalar
from speclogs.store import ingest_paths

EAGLE = MATRIX / "eagle3_nccl.log"

VLLM_LOG = """INFO 11-30 10:15:21 [__init__.py:239] Automatically detected platform cuda.
INFO 11-30 10:15:23 [api_server.py:1043] vLLM API server version 0.8.5
INFO 11-30 10:15:23 [api_server.py:1044] args: Namespace(model='meta-llama/Llama-3.1-8B-Instruct', tensor_parallel_size=2)
INFO 11-30 10:16:02 [loader.py:458] Loading weights took 3.21 seconds
INFO:     127.0.0.1:40890 - "GET /health HTTP/1.1" 200 OK
INFO 11-30 10:17:10 [metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 512.3 tokens/s, Running: 1 reqs
"""


def test_binary_file_is_skipped_with_a_reason(db_path, tmp_path):
    binary = tmp_path / "core.log"
    binary.write_bytes(os.urandom(4096) + b"\x00" * 4096)
    summary = ingest_paths([binary, EAGLE], db_path)
    assert summary.files_ingested == 1
    assert any(reason.startswith("binary file") for reason in summary.skipped)
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 37


def test_nul_and_invalid_utf8_bytes_are_replaced_and_counted(db_path, tmp_path):
    lines = EAGLE.read_bytes().splitlines(keepends=True)
    lines[10] = lines[10].rstrip(b"\n") + b" \x00\x00 tail\n"
    lines[20] = b"\xff\xfe garbage \xc3\x28 bytes\n"
    dirty = tmp_path / "dirty.log"
    dirty.write_bytes(b"".join(lines))
    summary = ingest_paths([dirty], db_path)
    assert summary.files_ingested == 1
    assert scalar(db_path, "SELECT nul_bytes FROM files") == 2
    assert scalar(db_path, "SELECT invalid_utf8 FROM files") == 3
    assert any("NUL bytes" in w for w in summary.warnings) and any("invalid UTF-8" in w for w in summary.warnings)
    raw = scalar(db_path, "SELECT raw FROM unparsed_lines WHERE line_no = 21")
    assert "\ufffd" in raw and "garbage" in raw
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 37
    assert scalar(db_path, "SELECT bool_and(balanced) FROM line_accounting")


def test_empty_file(db_path, tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    summary = ingest_paths([empty], db_path)
    assert summary.files_ingested == 1 and summary.lines_total == 0
    assert query(db_path, "SELECT total_lines, balanced FROM line_accounting") == [(0, True)]


def test_a_10mb_single_line_is_stored_whole(db_path, tmp_path):
    big = tmp_path / "big.log"
    head = EAGLE.read_bytes()
    big.write_bytes(head + b"x" * (10 * 1024 * 1024) + b"\n" + head)
    summary = ingest_paths([big], db_path)
    assert summary.files_ingested == 1
    long_line = head.count(b"\n") + 1
    reason, raw_length = query(db_path, "SELECT reason, length(raw) FROM unparsed_lines WHERE line_no = ?", [long_line])[0]
    assert reason.startswith("line too long to parse (10,485,760 bytes")
    assert raw_length == 10 * 1024 * 1024
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 2 * 37
    assert scalar(db_path, "SELECT bool_and(balanced) FROM line_accounting")


def test_truncated_gzip_keeps_what_decompressed(db_path, tmp_path):
    packed = gzip.compress(EAGLE.read_bytes())
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(packed[: len(packed) * 2 // 3])
    summary = ingest_paths([cut], db_path)
    assert summary.files_ingested == 1
    warning = next(w for w in summary.warnings if "truncated gzip" in w)
    assert "truncated gzip at byte" in warning
    decoded = scalar(db_path, "SELECT count(*) FROM decode_batches")
    assert 0 < decoded < 37 or scalar(db_path, "SELECT count(*) FROM server_events") > 0


def test_directory_with_thousands_of_files(db_path, tmp_path):
    root = tmp_path / "many"
    root.mkdir()
    sample = b"".join(EAGLE.read_bytes().splitlines(keepends=True)[:11])
    for index in range(1500):  # each its own last line: the same content twice would be ingested once
        (root / f"part{index:04d}.log").write_bytes(sample + f"[2026-11-30 10:18:43] part {index}\n".encode())
    for index in range(300):
        (root / f"notes{index}.md").write_text("not a log")
    (root / ".hidden.log").write_bytes(sample)
    summary = ingest_paths([root], db_path)
    assert summary.files_ingested == 1500
    assert summary.skipped["not a log or bench file name (.md)"] == 300
    assert summary.skipped["hidden file"] == 1
    assert scalar(db_path, "SELECT count(*) FROM files") == 1500
    assert scalar(db_path, "SELECT sum(total_lines) FROM files") == 1500 * 12


def test_vllm_log_is_unparsed_with_a_warning(db_path, tmp_path):
    log = tmp_path / "vllm_server.log"
    log.write_text(VLLM_LOG)
    summary = ingest_paths([log], db_path)
    assert summary.files_ingested == 1
    assert any("no SGLang lines: is this an SGLang log?" in w for w in summary.warnings)
    lines = len(VLLM_LOG.splitlines())
    assert scalar(db_path, "SELECT count(*) FROM unparsed_lines") + scalar(db_path, "SELECT count(*) FROM http_requests") == lines


def test_a_file_that_disappears_before_it_is_read(db_path, tmp_path):
    first = tmp_path / "a.log"
    second = tmp_path / "b.log"
    first.write_bytes(EAGLE.read_bytes())
    second.write_bytes(EAGLE.read_bytes() + b"[2026-11-30 10:30:00] the second\n")

    def remove_the_second(event) -> None:
        if event.files_done == 1 and second.exists():
            second.unlink()

    summary = ingest_paths([tmp_path], db_path, on_progress=remove_the_second)
    assert summary.files_ingested == 1
    assert summary.skipped == {"disappeared before it could be read": 1}


def test_pitfalls_ansi_crlf_tqdm_docker_ray_prefixes(db_path, tmp_path):
    text = (
        "[2026-11-30 10:18:53 TP0] Decode batch, #running-req: 1, #token: 96, token usage: 0.00,"
        " cuda graph: True, gen throughput (token/s): 3.84, #queue-req: 0\r\n"
        "\x1b[32m[2026-11-30 10:18:54 TP0] Decode batch, #running-req: 1, #token: 97, token usage: 0.00,"
        " cuda graph: True, gen throughput (token/s): 3.85, #queue-req: 0\x1b[0m\r\n"
        "^[[36m[2026-11-30 10:18:55 TP0] Decode batch, #running-req: 1, #token: 98, token usage: 0.00,"
        " cuda graph: True, gen throughput (token/s): 3.86, #queue-req: 0^[[0m\r\n"
        "sglang-1  | [2026-11-30 10:18:56 TP0] Decode batch, #running-req: 1, #token: 99, token usage: 0.00,"
        " cuda graph: True, gen throughput (token/s): 3.87, #queue-req: 0\r\n"
        "(SchedulerActor pid=123, ip=10.0.0.1) [2026-11-30 10:18:57 TP1] Decode batch, #running-req: 2, #token: 100, token usage: 0.00,"
        " cuda graph: True, gen throughput (token/s): 3.88, #queue-req: 0\r\n"
        "\rCapturing batches (bs=4 avail_mem=69.07 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
        "[2026-11-30 10:18:58 TP0] Decode batch, #running-req: 3, #token: 101, token usage: 0.00,"
        " cuda graph: True, gen throughput (token/s): 3.89, #queue-req: 0\r\n"
        "[2026-11-30 10:18:52 TP1] Decode batch, #running-req: 1, #token: 95, token usage: 0.00,"
        " cuda graph: True, gen throughput (token/s): 3.80, #queue-req: 0\r\n"
        "[2026-11-30 10:18:59 TP0] Decode batch, #running-req: 1, #tok\r\n"
    )
    log = tmp_path / "pitfalls.log"
    log.write_bytes(text.encode())
    ingest_paths([log], db_path)
    rows = query(db_path, "SELECT line_no, tp_rank, num_tokens, ts::VARCHAR FROM decode_batches ORDER BY line_no")
    assert rows == [
        (1, 0, 96, "2026-11-30 10:18:53"),
        (2, 0, 97, "2026-11-30 10:18:54"),
        (3, 0, 98, "2026-11-30 10:18:55"),
        (4, 0, 99, "2026-11-30 10:18:56"),
        (5, 1, 100, "2026-11-30 10:18:57"),
        (6, 0, 101, "2026-11-30 10:18:58"),
        (7, 1, 95, "2026-11-30 10:18:52"),
        (8, 0, None, "2026-11-30 10:18:59"),
    ]
    total, parsed, continuation, unparsed = query(db_path, "SELECT total_lines, parsed, continuation, unparsed FROM line_accounting")[0]
    assert (total, parsed + continuation + unparsed) == (8, 8)
    # the decode line cut short is a row with what it has, not taken for a complete one
    assert query(db_path, "SELECT running_req, truncated, extra_fields FROM decode_batches WHERE line_no = 8") == [
        (1, True, '{"#tok": null}')]
    assert query(db_path, "SELECT count(*) FROM decode_batches WHERE truncated") == [(1,)]


def test_traceback_is_one_error_record(db_path, tmp_path):
    log = tmp_path / "crash.log"
    log.write_text(
        "[2026-11-30 10:18:53 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/scheduler.py", line 2712, in run_scheduler_process\n'
        "    scheduler.event_loop_overlap()\n"
        '  File "/sgl/model_runner.py", line 1501, in forward\n'
        "    return self.cuda_graph_runner.replay(forward_batch)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "\n"
        "[2026-11-30 10:18:54] Received sigquit from a child process. It usually means the child failed.\n"
    )
    ingest_paths([log], db_path)
    record = query(db_path, "SELECT line_no, last_line_no, tp_rank, exception_type, exception_message FROM errors")
    assert record == [(1, 6, 0, "torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB.")]
    assert query(db_path, "SELECT parsed, continuation, unparsed FROM line_accounting") == [(2, 5, 1)]


def test_cli_reports_skips_without_traceback(db_path, tmp_path):
    (tmp_path / "core.log").write_bytes(b"\x7fELF" + os.urandom(2000))
    (tmp_path / "ok.log").write_bytes(EAGLE.read_bytes())
    result = run_cli("ingest", str(tmp_path), "--db", str(db_path))
    assert result.returncode == 0
    assert "skipped 1 file(s): binary file" in result.stderr
    assert "Traceback" not in result.stderr
