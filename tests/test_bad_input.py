"""Bad input never crashes the ingest: it becomes unparsed rows or a skipped file, with the reason in the summary."""

from __future__ import annotations

import contextlib
import gzip
import os
import random
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from conftest import MATRIX, ROOT, query, run_cli, scalar
from speclogs.ingest.sources import GARBLED_BYTES, binary_reason
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
    assert summary.files_ingested == 1 and summary.account.total_lines == 0
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


def _lines(text: bytes) -> int:
    return text.count(b"\n") + (0 if text.endswith(b"\n") else 1)


def gzip_damaged_after(text: bytes) -> bytes:
    """A gzip of `text` followed by a deflate block zlib refuses ('invalid block type') and more compressed text: the
    damage sits right after `text`, at a block boundary (a full flush), as a bad sector in a big file would."""
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = packer.compress(text) + packer.flush(zlib.Z_FULL_FLUSH)
    return head + b"\x07" + packer.compress(b"[2026-11-30 10:30:00] never read\n" * 500) + packer.flush()


def test_a_gzip_corrupt_in_the_middle_keeps_the_lines_before(db_path, tmp_path):
    text = b"\n".join(EAGLE.read_bytes().split(b"\n")[:480]) + b"\n"  # 12 of its decode lines
    damaged = tmp_path / "damaged.log.gz"
    damaged.write_bytes(gzip_damaged_after(text))
    result = run_cli("ingest", str(damaged), "--db", str(db_path), "--check")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert (f"corrupt gzip data after {len(text):,} bytes of text (invalid block type): the lines before are kept"
            in " ".join(result.stderr.split()))
    # what decompressed just before the break may be garbage: dropped, and counted
    dropped = int(re.search(r"([\d,]+) line\(s\) decompressed just before the break dropped", " ".join(result.stderr.split()))[1])
    assert scalar(db_path, "SELECT total_lines FROM files") + dropped == _lines(text)
    plain = tmp_path / "plain.log"
    plain.write_bytes(text[: len(text) - GARBLED_BYTES].rsplit(b"\n", 1)[0] + b"\n")
    assert run_cli("ingest", str(plain), "--db", str(tmp_path / "plain.duckdb")).returncode == 0
    decoded = "SELECT count(*) FROM decode_batches"
    assert scalar(db_path, decoded) == scalar(tmp_path / "plain.duckdb", decoded)


def test_a_truncated_gzip_keeps_its_prefix_and_says_truncated(db_path, tmp_path):
    packed = gzip.compress(EAGLE.read_bytes())
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(packed[: len(packed) * 95 // 100])  # cut inside the decode lines
    prefix = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut.read_bytes())
    result = run_cli("ingest", str(cut), "--db", str(db_path), "--check")  # --check: every line kept its content
    assert result.returncode == 0, result.stderr
    said = f"truncated gzip: the file ends after {len(prefix):,} bytes of text; the lines before are kept"
    assert said in " ".join(result.stderr.split())
    assert scalar(db_path, "SELECT total_lines FROM files") == _lines(prefix)
    assert 0 < scalar(db_path, "SELECT count(*) FROM decode_batches") < 37


def test_a_gzip_corrupt_from_its_first_bytes_is_skipped_with_the_reason(db_path, tmp_path):
    packed = bytearray(gzip.compress(EAGLE.read_bytes()))
    packed[10:14] = b"\xff\xff\xff\xff"  # the first deflate block's header
    (tmp_path / "broken.log.gz").write_bytes(bytes(packed))
    (tmp_path / "ok.log").write_bytes(EAGLE.read_bytes())
    result = run_cli("ingest", str(tmp_path), "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    stderr = " ".join(result.stderr.split())
    assert "files 1 ingested, 0 unchanged, 1 skipped" in stderr
    assert "skipped 1 file(s): not readable as gzip (" in stderr and "): nothing decompresses" in stderr
    assert "broken.log.gz" in stderr
    assert query(db_path, "SELECT source_file FROM files") == [(str((tmp_path / "ok.log").resolve()),)]


def test_random_bytes_named_log_are_skipped_as_binary_not_unparsed(db_path, tmp_path):
    (tmp_path / "random.log").write_bytes(random.Random(14).randbytes(1 << 20))
    lines = EAGLE.read_bytes().rstrip(b"\n").split(b"\n")
    lines[5] = b"caf\xe9 \xff\xfe latin-1 and stray bytes \x00\x01"
    (tmp_path / "dirty.log").write_bytes(b"\n".join(lines) + b"\n")
    result = run_cli("ingest", str(tmp_path), "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    stderr = " ".join(result.stderr.split())
    assert ("skipped 1 file(s): binary file (over 30 % of its first 8,192 bytes are NUL, control bytes or invalid UTF-8)"
            in stderr and "random.log" in stderr)
    assert "3 invalid UTF-8 byte sequences replaced by U+FFFD" in stderr and "1 NUL bytes replaced" in stderr
    assert query(db_path, "SELECT count(*), sum(total_lines) FROM files") == [(1, len(lines))]
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 37


@pytest.mark.parametrize(("name", "head", "binary"), [
    ("random bytes", random.Random(1).randbytes(8192), True),
    ("UTF-16 text", "[2026-11-30 10:18:53] Decode batch\n".encode("utf-16-le") * 200, True),
    ("NUL padding", b"\x00" * 8192, True),
    ("a log with a few bad bytes", b"[2026-11-30] ok \xff\xfe \x00 caf\xe9\n" * 10 + b"[2026-11-30] fine\n" * 400, False),
    ("Latin-1 text", "[2026-11-30] Fehler: Gerät nicht verfügbar, überprüfen\n".encode("latin-1") * 150, False),
    ("UTF-8 cut inside a character", ("é" * 4097).encode("utf-8")[:8191], False),
    ("ANSI colours and tabs", b"\x1b[32m[2026-11-30]\tINFO\x1b[0m ok\r\n" * 300, False),
])
def test_binary_probe(name, head, binary):
    assert (binary_reason(head) is not None) == binary, name


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


def test_a_named_fifo_is_refused_at_once_without_taking_the_database(db_path, tmp_path):
    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    result = run_cli("ingest", str(fifo), "--db", str(db_path), timeout=60)  # nothing writes to it: reading would hang
    assert result.returncode == 1
    assert f"Error: {fifo}: not a regular file (a FIFO)" in result.stderr
    assert "hint: speclogs reads files and directories; pipe a stream in as '-'" in result.stderr
    assert not db_path.exists()  # refused before the database was opened (and its write lock taken)


def test_a_fifo_inside_a_directory_is_skipped_with_the_reason(db_path, tmp_path):
    os.mkfifo(tmp_path / "pipe.log")
    (tmp_path / "ok.log").write_bytes(EAGLE.read_bytes())
    result = run_cli("ingest", str(tmp_path), "--db", str(db_path), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "skipped 1 file(s): not a regular file (a FIFO)" in result.stderr
    assert scalar(db_path, "SELECT count(*) FROM files") == 1


def test_symlink_loops_are_named_and_symlinked_directories_followed(db_path, tmp_path):
    (tmp_path / "loop_a.log").symlink_to(tmp_path / "loop_b.log")
    (tmp_path / "loop_b.log").symlink_to(tmp_path / "loop_a.log")
    named = run_cli("ingest", str(tmp_path / "loop_a.log"), "--db", str(db_path))
    assert named.returncode == 1
    assert f"Error: {tmp_path / 'loop_a.log'}: a symlink loop" in named.stderr and "hint:" in named.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "server.log").write_bytes(EAGLE.read_bytes())
    walked = tmp_path / "walked"
    walked.mkdir()
    (walked / "linked").symlink_to(elsewhere, target_is_directory=True)  # followed
    (elsewhere / "back").symlink_to(walked, target_is_directory=True)  # a loop: reported, not walked for ever
    for name in ("loop_a.log", "loop_b.log"):
        (walked / name).symlink_to(tmp_path / name)
    result = run_cli("ingest", str(walked), "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    stderr = " ".join(result.stderr.split())
    assert "skipped 2 file(s): symlink loop" in stderr
    assert "skipped 1 file(s): symlinked directory already walked (a loop, or a second link to it)" in stderr
    assert query(db_path, "SELECT source_file FROM files") == [(str(elsewhere / "server.log"),)]
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 37


def test_crlf_nul_bytes_non_utf8_and_an_enormous_line_through_the_cli(db_path, tmp_path):
    lines = EAGLE.read_bytes().rstrip(b"\n").split(b"\n")
    decode = next(index for index, line in enumerate(lines) if b"Decode batch" in line)
    lines[decode] = lines[decode] + b"\r"  # CRLF
    lines[10] = lines[10] + b" \x00 NUL"
    lines[20] = b"\xff\xfe caf\xe9 not UTF-8"
    lines.insert(30, b"y" * (12 << 20))  # 12 MiB without a newline
    log = tmp_path / "odd.log"
    log.write_bytes(b"\n".join(lines) + b"\n")
    result = run_cli("ingest", str(log), "--db", str(db_path), "--check")
    assert result.returncode == 0, result.stderr
    stderr = " ".join(result.stderr.split())
    assert "1 NUL bytes replaced by U+FFFD" in stderr and "3 invalid UTF-8 byte sequences replaced by U+FFFD" in stderr
    assert f"{len(lines):,} of {len(lines):,} lines (100.00 %)" in stderr  # the content check: every line kept
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 37
    assert query(db_path, "SELECT length(raw), starts_with(reason, 'line too long') FROM unparsed_lines WHERE line_no = 31") == [
        (12 << 20, True)]
    assert "caf\ufffd not UTF-8" in scalar(db_path, "SELECT raw FROM unparsed_lines WHERE line_no = 21")


def test_a_log_of_another_server_is_said_in_the_summary(db_path, tmp_path):
    log = tmp_path / "vllm_server.log"
    log.write_text(VLLM_LOG)
    result = run_cli("ingest", str(log), "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    assert "no SGLang lines: is this an SGLang log?" in " ".join(result.stderr.split())
    assert scalar(db_path, "SELECT total_lines FROM files") == len(VLLM_LOG.splitlines())


@contextlib.contextmanager
def small_filesystem(where: Path, size: str):
    """A tmpfs of `size` mounted at `where` for the block (skips the test where it cannot be mounted)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full disk is made with a small tmpfs: mounting one needs root and mount(8)")
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize("lines", [60_000, 110_000], ids=["batched with another file", "streamed"])
def test_a_full_disk_stops_the_ingest_with_no_space_left_on_device(tmp_path, lines):
    big = tmp_path / "big.log"  # 60,000 lines: 9 MB, parsed in one batch with EAGLE; 110,000: 17 MB, streamed
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gen_sglang_log.py"), str(big), "-n", str(lines)],
                   check=True, capture_output=True)
    with small_filesystem(tmp_path / "small", "2m") as small:
        db = small / "speclogs.duckdb"
        full = run_cli("ingest", str(EAGLE), str(big), "--db", str(db))
        assert full.returncode == 1, full.stderr
        stderr = " ".join(full.stderr.split())
        assert (f"Error: cannot write {big} into {db}: No space left on device (it is rolled back; the 1 file(s) ingested "
                "before it are stored)") in stderr
        assert "hint: free space on that disk, or pass --db FILE on another one" in stderr
        assert "Traceback" not in stderr and "files " not in stderr  # no summary claiming what was ingested
        assert query(db, "SELECT source_file FROM files") == [(str(EAGLE.resolve()),)]  # nothing of big.log
        assert query(db, "SELECT count(*) FROM decode_batches WHERE source_file = ?", [str(big)]) == [(0,)]

        subprocess.run(["mount", "-o", "remount,size=64m", str(small)], check=True)  # room again: the same command
        again = run_cli("ingest", str(EAGLE), str(big), "--db", str(db))
        assert again.returncode == 0, again.stderr
        assert "files     1 ingested, 1 unchanged, 0 skipped" in again.stderr
        assert scalar(db, "SELECT total_lines FROM files WHERE source_file = ?", [str(big)]) == lines


def _check_json(db_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    import json

    result = run_cli("check", "--db", str(db_path), "--format", "json")
    return result, json.loads(result.stdout)


def test_check_cannot_verify_a_missing_source(db_path, tmp_path):
    log = tmp_path / "gone.log"
    log.write_bytes(EAGLE.read_bytes())
    assert run_cli("ingest", str(log), "--db", str(db_path)).returncode == 0
    log.unlink()
    result, report = _check_json(db_path)
    assert result.returncode == 1
    assert "cannot verify: source missing" in result.stderr and "100.00 %" not in result.stderr
    assert report["ok"] is False and report["files_unverified"] == 1


def test_check_cannot_verify_a_changed_source(db_path, tmp_path):
    log = tmp_path / "changed.log"
    log.write_bytes(EAGLE.read_bytes())
    assert run_cli("ingest", str(log), "--db", str(db_path)).returncode == 0
    log.write_bytes(EAGLE.read_bytes().replace(b"accept len: 2", b"accept len: 7"))
    result, report = _check_json(db_path)
    assert result.returncode == 1
    assert "cannot verify: source changed since it was ingested" in result.stderr and "100.00 %" not in result.stderr
    assert report["ok"] is False and report["files_unverified"] == 1


def test_check_cannot_verify_stdin(db_path):
    assert run_cli("ingest", "-", "--db", str(db_path), stdin=EAGLE.read_bytes()).returncode == 0
    result, report = _check_json(db_path)
    assert result.returncode == 1
    assert "cannot verify: stdin" in result.stderr and "100.00 %" not in result.stderr
    assert report["ok"] is False


def test_check_reads_the_raw_source_and_counts_redactions_apart(db_path, tmp_path):
    """The source line keeps its secret; the database holds <redacted>: counted as redacted, not lost, not found."""
    log = tmp_path / "keyed.log"
    lines = EAGLE.read_text().splitlines(keepends=True)
    lines.insert(5, "[2026-11-30 10:15:21] Password: hunter2secret and X-Api-Key: abcdefkey\n")
    log.write_text("".join(lines))
    assert run_cli("ingest", str(log), "--db", str(db_path)).returncode == 0
    result, report = _check_json(db_path)
    assert result.returncode == 0, result.stderr
    assert report["ok"] is True and report["tokens_redacted"] == 2 and report["lines_redacted"] == 1
    assert "redacted: 2 token(s) on 1 line(s)" in result.stderr
    assert "hunter2secret" not in result.stdout + result.stderr


@pytest.mark.parametrize("interrupt", ["KeyboardInterrupt", "duckdb.InterruptException"])
def test_ctrl_c_mid_insert_exits_130_saying_what_was_kept(db_path, tmp_path, monkeypatch, capfd, interrupt):
    """Ctrl-C while the second file's rows are being inserted: the first file stays, the second is rolled back, the
    third is not read; one line says so, exit 130, no traceback."""
    import duckdb

    from speclogs import cli
    from speclogs.ingest import pipeline
    from speclogs.store.writer import Writer

    files = []
    for name, log in (("a", EAGLE), ("b", MATRIX / "baseline_default.log"), ("c", MATRIX / "eagle3_default.log")):
        files.append(tmp_path / f"{name}.log")
        files[-1].write_bytes(log.read_bytes())
    monkeypatch.setattr(pipeline, "BATCH_FILES", 1)
    finish, calls = Writer._finish, []

    def finish_then_interrupt(self, parsed_files):
        calls.append(parsed_files[0].source_file)
        finish(self, parsed_files)  # (the rows are in, the transaction not yet committed)
        if len(calls) == 2:
            raise KeyboardInterrupt if interrupt == "KeyboardInterrupt" else duckdb.InterruptException("INTERRUPT Error")

    monkeypatch.setattr(Writer, "_finish", finish_then_interrupt)
    code = cli.main(["ingest", *map(str, files), "--db", str(db_path)])
    stderr = " ".join(capfd.readouterr().err.split())
    assert code == 130
    assert "Traceback" not in stderr
    assert (f"interrupted: 1 file(s) ingested before it are kept; rolled back: {files[1].resolve()}; 1 file(s) not ingested"
            in stderr)
    assert query(db_path, "SELECT source_file FROM files") == [(str(files[0].resolve()),)]
    assert scalar(db_path, "SELECT count(DISTINCT source_file) FROM decode_batches") == 1


def test_a_named_unreadable_file_exits_1_after_the_rest(db_path):
    """/proc/self/mem is a regular file that no read succeeds on (EIO, also as root)."""
    result = run_cli("ingest", "/proc/self/mem", str(EAGLE), "--db", str(db_path))
    assert result.returncode == 1
    stderr = " ".join(result.stderr.split())
    assert re.search(r"1 file\(s\) failed: /proc/\d+/mem: read error", stderr) and "Traceback" not in stderr
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 37


def test_a_failed_file_exits_1_with_the_list(db_path, tmp_path, monkeypatch, capfd):
    from speclogs import cli
    from speclogs.store import layout

    log = tmp_path / "x.log"
    log.write_bytes(EAGLE.read_bytes())

    def broken(self, table, frame, keys=None, **kwargs):
        raise ValueError("cannot insert")

    monkeypatch.setattr(layout.Layout, "insert", broken)
    assert cli.main(["ingest", str(log), "--db", str(db_path)]) == 1
    assert f"1 file(s) failed: {log.resolve()}: failed and rolled back (ValueError: cannot insert)" in \
        " ".join(capfd.readouterr().err.split())


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_a_utf16_or_utf32_log_with_a_bom_is_decoded(db_path, tmp_path, encoding):
    """PowerShell's `>` writes UTF-16 LE with a byte order mark: the log is read as the text it is, and said so."""
    text = EAGLE.read_text()
    wide = tmp_path / "powershell.log"
    wide.write_bytes(text.encode(encoding) if encoding != "utf-16-be" else b"\xfe\xff" + text.encode(encoding))
    result = run_cli("ingest", str(wide), "--db", str(db_path), "--check")
    assert result.returncode == 0, result.stderr
    assert "decoded from UTF-" in " ".join(result.stderr.split())
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 37
    assert scalar(db_path, "SELECT total_lines FROM files") == text.count("\n")


def _flipped_until_broken(packed: bytes) -> bytes:
    """`packed` with one byte flipped (from its middle on) where zlib then finds the deflate data broken (not only a
    checksum that fails): the damaged block decompresses to some garbage first."""
    for at in range(len(packed) // 2, len(packed) - 16):
        flipped = bytearray(packed)
        flipped[at] ^= 0xFF
        try:
            zlib.decompress(bytes(flipped), 16 + zlib.MAX_WBITS)
        except zlib.error as error:
            if "check" not in str(error):
                return bytes(flipped)
    raise AssertionError("no flip breaks the stream")


def test_garbled_lines_after_a_corrupt_gzip_block_are_dropped_and_counted(db_path, tmp_path):
    text = EAGLE.read_bytes()
    damaged = tmp_path / "flipped.log.gz"
    damaged.write_bytes(_flipped_until_broken(gzip.compress(text)))
    result = run_cli("ingest", str(damaged), "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    found = re.search(r"([\d,]+) line\(s\) decompressed just before the break dropped", said)
    assert found, said
    kept = scalar(db_path, "SELECT total_lines FROM files")
    assert kept > 0 and int(found[1].replace(",", "")) > 0
    real = text.decode().split("\n")
    assert all(raw in real for (raw,) in query(db_path, "SELECT raw FROM unparsed_lines")), "a garbled line stored"
    assert all(line in text.decode() for (line,) in query(db_path, "SELECT line FROM foreign_lines WHERE line IS NOT NULL"))


def test_each_stdin_ingest_is_its_own_run(db_path):
    text = EAGLE.read_bytes()
    half = text[: len(text) // 2].rsplit(b"\n", 1)[0] + b"\n"
    for piped in (text, half):
        assert run_cli("ingest", "-", "--db", str(db_path), stdin=piped).returncode == 0
    assert run_cli("ingest", "-", "--db", str(db_path), "--run-name", "named", stdin=half + b"\n").returncode == 0
    names = [row[0] for row in query(db_path, "SELECT run_name FROM runs ORDER BY run_name")]
    assert len(names) == 3 and "named" in names and all(name.startswith("stdin-") for name in names if name != "named")


def test_control_characters_in_a_file_name_are_shown_escaped(db_path, tmp_path):
    odd = tmp_path / "evil\x1b[2Jname\x07.log"
    odd.write_bytes(b"\x00" * 8192)  # binary: skipped, its name in the summary
    result = run_cli("ingest", str(odd), str(EAGLE), "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "evil\u241b[2Jname" in "".join(result.stderr.split())  # (rich itself drops BEL)


def test_ctrl_c_on_the_parser_thread_of_a_streamed_log_is_not_a_short_file(db_path, tmp_path, monkeypatch, capfd):
    """polars may raise Ctrl-C's KeyboardInterrupt on the thread that parses a big log: the log is rolled back (not
    stored as if it ended there) and the ingest exits 130."""
    from speclogs import cli
    from speclogs.ingest import pipeline, sources

    log = tmp_path / "big.log"
    log.write_bytes(EAGLE.read_bytes() * 4)
    monkeypatch.setattr(sources, "STREAM_MIN_BYTES", 1024)
    monkeypatch.setattr(pipeline, "DEFAULT_CHUNK_BYTES", 8192)
    assemble, calls = pipeline._assemble_chunk, []

    def interrupted_on_the_second_chunk(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return assemble(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_assemble_chunk", interrupted_on_the_second_chunk)
    code = cli.main(["ingest", str(log), "--db", str(db_path)])
    stderr = " ".join(capfd.readouterr().err.split())
    assert code == 130 and "Traceback" not in stderr
    assert f"rolled back: {log.resolve()}" in stderr
    assert scalar(db_path, "SELECT count(*) FROM files") == 0
    assert scalar(db_path, "SELECT count(*) FROM decode_batches") == 0


def test_a_grammar_of_ones_own_into_server_events_without_a_message_field(tmp_path):
    """A user's pattern may fill server_events with its own columns and no `message`: its rows are stored (the request
    reader looks only at rows that have a message)."""
    grammar = tmp_path / "gpu_temp.toml"
    grammar.write_text('''family = "gpu_temp"
table = "server_events"

[[field]]
name = "temp_c"
type = "int"
shape = "int"

[[pattern]]
name = "gpu_temp"
gate = "GPU temperature"
template = 'GPU temperature {temp_c} C'
constants = { kind = "gpu_temp" }

[[pattern.sample]]
line = "GPU temperature 71 C"
expect = { temp_c = 71, kind = "gpu_temp" }
''')
    log = tmp_path / "temp.log"
    log.write_text("[2026-01-02 03:04:04] GPU temperature 71 C\n")
    db = tmp_path / "own.duckdb"
    result = run_cli("ingest", str(log), "--db", str(db), "--grammar", str(grammar))
    assert result.returncode == 0, result.stdout + result.stderr
    assert query(db, "SELECT kind, temp_c FROM server_events") == [("gpu_temp", 71)]
