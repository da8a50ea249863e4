"""Big logs, plain or gzip, are read chunk by chunk (ingest.sources.LogStream): same rows as reading them whole,
bad bytes counted, the file's sha256 recorded, chunks cut only at line ends."""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import zlib
from pathlib import Path

import pytest

from conftest import MATRIX
from speclogs.ingest import sources
from speclogs.ingest.sources import GARBLED_BYTES, GzipText, LogStream
from speclogs.store import connect, ingest_paths

TABLES = ("decode_batches", "prefill_batches", "http_requests", "server_events", "errors", "unparsed_lines", "launches")


def table_rows(db: Path) -> dict[str, list[tuple]]:
    con = connect(db, read_only=True)
    try:
        rows = {}
        for table in TABLES:
            columns = [c for c, in con.execute(f"SELECT column_name FROM (DESCRIBE {table})").fetchall()
                       if c not in ("source_file", "run_id")]
            select = ", ".join(f'"{c}"' for c in columns)
            rows[table] = con.execute(f"SELECT {select} FROM {table} ORDER BY ALL").fetchall()
        rows["files"] = con.execute(
            "SELECT sha256, total_lines, parsed_lines, continuation_lines, unparsed_lines, invalid_utf8, nul_bytes, warnings FROM files"
        ).fetchall()
        return rows
    finally:
        con.close()


def odd_log(tmp_path: Path) -> Path:
    """A real log with CRLF lines, invalid UTF-8, NUL bytes and a traceback appended."""
    data = (MATRIX / "eagle3_nccl.log").read_bytes()
    extra = (
        b"[2026-02-26 17:19:51 TP0] Decode batch. #running-req: 1, #token: 50, token usage: 0.00, cuda graph: True, "
        b"gen throughput (token/s): 81.68, #queue-req: 0\r\n"
        b"caf\xe9 bad bytes \x00 and a NUL\n"
        b"Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nValueError: boom\n"
    )
    path = tmp_path / "odd.log"
    path.write_bytes(data + extra + data[:5000])
    return path


@pytest.mark.parametrize("chunk_bytes", [4096, 65536])
def test_streamed_log_gives_the_same_rows_as_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int) -> None:
    log = odd_log(tmp_path)
    whole_db, streamed_db = tmp_path / "whole.duckdb", tmp_path / "streamed.duckdb"
    ingest_paths([log], whole_db)
    monkeypatch.setattr(sources, "STREAM_MIN_BYTES", 1024)
    ingest_paths([log], streamed_db, chunk_bytes=chunk_bytes)
    whole, streamed = table_rows(whole_db), table_rows(streamed_db)
    assert streamed == whole
    sha, total, parsed, continuation, unparsed, invalid, nuls, warnings = streamed["files"][0]
    assert sha == hashlib.sha256(log.read_bytes()).hexdigest()
    data = log.read_bytes()
    assert total == data.count(b"\n") + (not data.endswith(b"\n")) and parsed + continuation + unparsed == total
    assert (invalid, nuls) == (1, 1) and "invalid UTF-8" in warnings and "NUL" in warnings
    assert len(whole["decode_batches"]) > 30 and len(whole["http_requests"]) > 5


def test_streamed_log_is_idempotent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "STREAM_MIN_BYTES", 1024)
    log, db = odd_log(tmp_path), tmp_path / "s.duckdb"
    first = ingest_paths([log], db, chunk_bytes=8192)
    again = ingest_paths([log], db, chunk_bytes=8192)
    assert first.files_ingested == 1 and again.files_ingested == 0 and again.files_unchanged == 1


def test_chunks_end_at_line_ends_and_cover_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    lines = [b"[2026-01-01 00:00:00] line %d" % i for i in range(2000)] + [b"  continuation", b"x" * 50_000, b"no newline at end"]
    path.write_bytes(b"\n".join(lines))
    stream = LogStream(path, path.stat().st_size)
    chunks = [bytes(chunk) for chunk in stream.chunks(1000)]  # views into the blocks read
    assert b"".join(chunks) == path.read_bytes()
    assert all(chunk.endswith(b"\n") for chunk in chunks[:-1])
    assert len(chunks) > 10 and stream.result() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert stream.warnings() == []


def test_a_streamed_file_that_shrinks_or_vanishes_is_said_not_crashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "STREAM_MIN_BYTES", 1024)
    log = odd_log(tmp_path)
    stream = LogStream(log, log.stat().st_size + 100)  # found bigger than it is when read
    b"".join(stream.chunks(4096))
    assert any("changed while being read" in warning for warning in stream.warnings())

    original = LogStream.chunks

    def vanish(self, chunk_bytes):
        self.path.unlink()
        yield from original(self, chunk_bytes)

    monkeypatch.setattr(LogStream, "chunks", vanish)
    summary = ingest_paths([log], tmp_path / "v.duckdb")
    assert summary.files_ingested == 0
    assert any("FileNotFoundError" in reason for reason in summary.skipped), summary.skipped


def test_a_10_mb_line_in_a_streamed_log_is_one_unparsed_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "STREAM_MIN_BYTES", 1024)
    log = tmp_path / "long.log"
    head = (MATRIX / "eagle3_nccl.log").read_bytes()[:20_000]
    head = head[: head.rfind(b"\n") + 1]
    log.write_bytes(head + b"x" * (10 << 20) + b"\n" + head)
    db = tmp_path / "l.duckdb"
    ingest_paths([log], db, chunk_bytes=65536)
    con = connect(db, read_only=True)
    try:
        reasons = con.execute("SELECT reason, count(*) FROM unparsed_lines WHERE length(raw) > 1000 GROUP BY 1").fetchall()
        balanced, total = con.execute("SELECT bool_and(balanced), sum(total_lines) FROM line_accounting").fetchone()
    finally:
        con.close()
    assert len(reasons) == 1 and "too long" in reasons[0][0] and reasons[0][1] == 1
    assert balanced and total == 2 * head.count(b"\n") + 1


def test_chunks_keep_a_traceback_with_its_record_even_when_a_record_starts_a_block(tmp_path: Path) -> None:
    """Records of exactly the read size: every block starts with '[' (the '\\n[' straddles two reads), and each
    record's continuation lines stay in its chunk."""
    record = b"[2026-01-01 00:00:00] Traceback (most recent call last):\n" + b"  File x\n" * 10
    record = record + b"y" * (1000 - len(record) - 1) + b"\n"
    assert len(record) == 1000
    path = tmp_path / "x.log"
    path.write_bytes(record * 50)
    chunks = [bytes(chunk) for chunk in LogStream(path, path.stat().st_size).chunks(1000)]
    assert b"".join(chunks) == record * 50
    assert len(chunks) > 10 and all(chunk.startswith(b"[") and len(chunk) % 1000 == 0 for chunk in chunks)


def test_chunks_ramp_up_at_the_start_and_taper_over_the_last_two_chunks_worth(tmp_path: Path) -> None:
    """The first chunk's worth of a file comes in doubling chunks from an eighth (the writer gets rows to insert
    early), the last two chunks' worth in halving ones down to an eighth (the two parse threads finish together and
    the rows left to insert after the last chunk are few), whole chunks in between."""
    record = b"[2026-01-01 00:00:00] Decode batch, #running-req: 1\n"
    path = tmp_path / "x.log"
    path.write_bytes(record * (10 * 16_000 // len(record)))
    chunks = [bytes(chunk) for chunk in LogStream(path, path.stat().st_size).chunks(16_000)]
    assert b"".join(chunks) == path.read_bytes()
    sizes = [len(chunk) for chunk in chunks]
    near = lambda size, expected: abs(size - expected) <= len(record)  # noqa: E731 — chunks end at a line
    assert [near(size, expected) for size, expected in zip(sizes[:4], (2_000, 2_000, 4_000, 8_000))] == [True] * 4
    assert len(sizes) == 16 and all(near(size, 16_000) for size in sizes[4:12])  # eight whole chunks …
    assert near(sizes[12], 8_000) and near(sizes[13], 4_000)  # … then halves, down to an eighth
    assert all(near(size, 2_000) for size in sizes[14:])


class _Killed(BaseException):
    """What a kill between two commits looks like to the writer: not an error it handles."""


def test_a_big_log_is_committed_in_segments_and_a_killed_ingest_is_cleaned_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from speclogs.store import layout, writer

    log = odd_log(tmp_path)
    decode = ("[2026-02-26 17:20:{:02d} TP0] Decode batch. #running-req: 1, #token: {}, token usage: 0.00, cuda graph: True, "
              "gen throughput (token/s): 81.68, #queue-req: 0\n")
    with log.open("a") as out:  # enough decode rows for segments of whole (2,048-row) row groups
        out.writelines(decode.format(i % 60, i) for i in range(7_000))
    whole_db, segmented_db = tmp_path / "whole.duckdb", tmp_path / "segmented.duckdb"
    ingest_paths([log], whole_db)
    monkeypatch.setattr(sources, "STREAM_MIN_BYTES", 1024)
    monkeypatch.setattr(writer, "SEGMENT_ROWS", 2_500)
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 2_048)  # a segment commits whole row groups; the rest waits for the next
    inserts = []  # every insert of the segmented ingest
    commits = []
    real_insert, real_commit = layout.Layout.insert, writer.Writer._commit

    def insert(self, table, frame, keys=None, **where):
        inserts.append(table)
        return real_insert(self, table, frame, keys, **where)

    def commit(self):
        commits.append(len(inserts))
        return real_commit(self)

    monkeypatch.setattr(layout.Layout, "insert", insert)
    monkeypatch.setattr(writer.Writer, "_commit", commit)
    ingest_paths([log], segmented_db, chunk_bytes=65536)
    assert len(commits) > 2 and len(inserts) > 3
    assert table_rows(segmented_db) == table_rows(whole_db)

    killed_db = tmp_path / "killed.duckdb"
    inserted = []

    def dies_after_some(self, table, frame, keys=None, **where):
        inserted.append(table)
        if len(inserted) == len(inserts) - 3:
            raise _Killed()
        return real_insert(self, table, frame, keys, **where)

    monkeypatch.setattr(layout.Layout, "insert", dies_after_some)
    with pytest.raises(_Killed):
        ingest_paths([log], killed_db, chunk_bytes=65536)
    con = connect(killed_db, read_only=True)
    try:  # some segments were committed: the rows are there, and so is the mark that they are incomplete
        assert con.execute("SELECT count(*) FROM decode_batches").fetchone()[0] > 0
        assert con.execute("SELECT count(*) FROM _ingesting").fetchone()[0] == 1
        assert con.execute("SELECT count(*) FROM files").fetchone()[0] == 0
    finally:
        con.close()
    monkeypatch.setattr(layout.Layout, "insert", real_insert)
    summary = ingest_paths([log], killed_db, chunk_bytes=65536)
    assert any("interrupted" in warning for warning in summary.warnings)
    assert table_rows(killed_db) == table_rows(whole_db)


def without_sha(rows: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    return {**rows, "files": [row[1:] for row in rows["files"]]}


@pytest.mark.parametrize("chunk_bytes", [4096, 65536])
@pytest.mark.parametrize("members", [1, 3])
def test_a_gzip_log_streams_with_the_rows_of_the_plain_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            chunk_bytes: int, members: int) -> None:
    log = odd_log(tmp_path)
    data = log.read_bytes()
    packed = tmp_path / "odd.log.gz"  # several members: `cat a.gz b.gz`, as log rotation makes them
    step = len(data) // members + 1
    packed.write_bytes(b"".join(gzip.compress(data[start : start + step]) for start in range(0, len(data), step)))
    plain_db, gzip_db = tmp_path / "plain.duckdb", tmp_path / "gzip.duckdb"
    ingest_paths([log], plain_db)
    monkeypatch.setattr(sources, "STREAM_MIN_BYTES", 1024)
    reads = []
    real_chunks = LogStream.chunks

    def chunks(self, size):
        reads.append(self.gzipped)
        yield from real_chunks(self, size)

    monkeypatch.setattr(LogStream, "chunks", chunks)
    summary = ingest_paths([packed], gzip_db, chunk_bytes=chunk_bytes)
    assert reads == [True] and summary.files_ingested == 1  # streamed, not read whole
    streamed = table_rows(gzip_db)
    assert without_sha(streamed) == without_sha(table_rows(plain_db))
    assert streamed["files"][0][0] == hashlib.sha256(packed.read_bytes()).hexdigest()  # the bytes on disk


def test_a_corrupt_gzip_streamed_keeps_the_same_lines_as_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = odd_log(tmp_path).read_bytes() * 3
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    damaged = packer.compress(text) + packer.flush(zlib.Z_FULL_FLUSH) + b"\x07" + packer.compress(text) + packer.flush()
    path = tmp_path / "damaged.log.gz"
    path.write_bytes(damaged)
    whole_db, streamed_db = tmp_path / "whole.duckdb", tmp_path / "streamed.duckdb"
    whole = ingest_paths([path], whole_db)
    monkeypatch.setattr(sources, "STREAM_MIN_BYTES", 1024)
    streamed = ingest_paths([path], streamed_db, chunk_bytes=8192)
    assert table_rows(streamed_db) == table_rows(whole_db)
    said = f"corrupt gzip data after {len(text):,} bytes of text (invalid block type): the lines before are kept"
    tail = text[text.rfind(b"\n", 0, len(text) - GARBLED_BYTES) + 1:]  # (may be garbage: see GzipText)
    dropped = tail.count(b"\n") + (0 if tail.endswith(b"\n") else 1)
    said += f"; {dropped:,} line(s) decompressed just before the break dropped (may be garbled)"
    assert [w for w in whole.warnings if said in w] == [w for w in streamed.warnings if said in w] == [f"{path}: {said}"]


def test_gzip_text_keeps_every_byte_before_the_damage_and_reads_in_bounded_pieces() -> None:
    noise = random.Random(14)
    text = b"".join(b"[2026-01-01 00:00:%02d] line %d, request %s\n" % (i % 60, i, noise.randbytes(8).hex().encode())
                    for i in range(200_000))
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    packed = packer.compress(text) + packer.flush()
    reader = GzipText(io.BytesIO(packed))
    sizes = []
    while piece := reader.read(100_000):
        sizes.append(len(piece))
    assert sum(sizes) == len(text) and max(sizes) == 100_000 and reader.problem is None
    # damage at a block boundary zlib refuses, past the first reads (3.5 MB of gzip): every byte before it is kept
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    damaged = packer.compress(text) + packer.flush(zlib.Z_FULL_FLUSH) + b"\x07" + packer.compress(text) + packer.flush()
    reader = GzipText(io.BytesIO(damaged))
    kept = b"".join(iter(lambda: reader.read(100_000), b""))
    cut = text.rfind(b"\n", 0, len(text) - GARBLED_BYTES) + 1  # the lines within GARBLED_BYTES of the break may be garbage
    dropped = text[cut:].count(b"\n")
    assert kept == text[:cut] and reader.reason == "invalid block type"
    assert reader.problem == (f"corrupt gzip data after {len(text):,} bytes of text (invalid block type): the lines before "
                              f"are kept; {dropped:,} line(s) decompressed just before the break dropped (may be garbled)")
    reader = GzipText(io.BytesIO(packed + b"\x00" * 1000))
    assert reader.read_all() == text and reader.problem == "1,000 bytes after the end of the gzip data ignored (not gzip)"
