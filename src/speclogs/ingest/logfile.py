"""Parse one log's bytes into table frames, chunk by chunk (bounded memory on multi-GB logs).

`parse_log_chunks` yields one ChunkResult per chunk of about `chunk_bytes`; chunks end just before a line
that starts with '[' (an SGLang record), so a traceback never straddles two chunks. Every chunk, big or small,
is classified the same way (classify.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from speclogs.ingest import native
from speclogs.ingest.classify import Engine, classify
from speclogs.ingest.lines import build_lines, count_lines
from speclogs.ingest.records import ChunkResult, assemble
from speclogs.ingest.sources import LogStream, tapered_bytes

DEFAULT_CHUNK_BYTES = 16 << 20  # two chunks are parsed at once; 32 MiB chunks cost ~140 MB more peak RSS, no speed
NOTE_MIN_BYTES = 512 << 10  # logs from this size on get a note when the native matcher is off
PARSE_THREADS = 2
CHUNKS_AHEAD = PARSE_THREADS + 1  # chunks in flight: one more than threads, so a thread never waits for the next chunk


def engine_note(engine: Engine, size_bytes: int) -> str | None:
    """A warning for a log big enough to notice when the native matcher is off (it then runs on polars' regexes,
    slower); None otherwise."""
    if size_bytes < NOTE_MIN_BYTES or engine.prefix_native is not None:
        return None
    return native.unavailable_reason() or "the native matcher does not run these grammars: the lines ran on polars' regexes"


def chunk_bounds(data: bytes, chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """(start, end) byte ranges of whole lines, smaller towards the end (tapered_bytes); each chunk after the first
    starts at a '[' line when one is near."""
    size = len(data)
    start = 0
    while start < size:
        target = start + tapered_bytes(size - start, chunk_bytes)
        if target >= size:
            yield start, size
            return
        cut = data.find(b"\n[", target, target + chunk_bytes)
        if cut < 0:
            cut = data.find(b"\n", target)
        if cut < 0:
            yield start, size
            return
        yield start, cut + 1
        start = cut + 1


def parse_log_chunks(source: bytes | LogStream, engine: Engine, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[ChunkResult]:
    """Parse a log (valid UTF-8 bytes, or a LogStream read chunk by chunk); launch numbers continue across chunks.

    Up to PARSE_THREADS chunks are split and classified at once (the native matcher and polars release the GIL);
    the per-chunk assembly, which numbers launches, runs in order."""
    launches_before = 0
    with ThreadPoolExecutor(max_workers=PARSE_THREADS, thread_name_prefix="speclogs-classify") as pool:
        pending: deque = deque()  # (byte_end, future), in file order
        for chunk, first_line_no, lines, byte_end in _planned_chunks(source, chunk_bytes):
            pending.append((byte_end, pool.submit(_classify_chunk, chunk, engine, first_line_no, lines)))
            while len(pending) >= CHUNKS_AHEAD:
                result = _finish_chunk(engine, pending.popleft(), launches_before)
                launches_before += len(result.launch_starts)
                yield result
        while pending:
            result = _finish_chunk(engine, pending.popleft(), launches_before)
            launches_before += len(result.launch_starts)
            yield result


def _planned_chunks(source: bytes | LogStream, chunk_bytes: int) -> Iterator[tuple[bytes | memoryview, int, int, int]]:
    """(chunk, first_line_no, lines, byte_end) per chunk; lines are counted as the chunks are handed out, so the
    first chunk starts parsing before the rest of the file is read or counted. byte_end is in the file's own
    bytes (what progress is measured in)."""
    first_line_no = 1
    for chunk, lines, byte_end in _chunks(source, chunk_bytes):
        yield chunk, first_line_no, lines, byte_end
        first_line_no += lines


def _chunks(source: bytes | LogStream, chunk_bytes: int) -> Iterator[tuple[bytes | memoryview, int, int]]:
    """(chunk, physical lines in it, byte_end)."""
    if isinstance(source, LogStream):
        for chunk in source.chunks(chunk_bytes):
            yield chunk, count_lines(chunk), source.bytes_read
        return
    view = memoryview(source)
    for start, end in chunk_bounds(source, chunk_bytes):
        yield view[start:end], source.count(b"\n", start, end) + (0 if source[end - 1 : end] == b"\n" else 1), end


def _finish_chunk(engine: Engine, planned: tuple, launches_before: int) -> ChunkResult:
    byte_end, future = planned
    lines, claims = future.result()
    result = _assemble(engine, lines, claims, launches_before)
    result.byte_end = byte_end
    return result


def _classify_chunk(chunk: bytes | memoryview, engine: Engine, first_line_no: int, line_count: int):
    lines = build_lines(chunk, first_line_no, line_count)
    return lines, classify(engine, lines.frame)


def _assemble(engine: Engine, lines, claims, launches_before: int) -> ChunkResult:
    first_line_no = lines.first_line_no
    raw_lines = pl.DataFrame(
        {
            "line_no": pl.int_range(first_line_no, first_line_no + lines.total_lines, eager=True, dtype=pl.Int64),
            "raw": lines.raw,
        }
    )
    return assemble(
        engine,
        claims,
        raw_lines,
        total_lines=lines.total_lines,
        blank=lines.blank,
        too_long=lines.too_long,
        outer_prefixes=lines.outer_prefixes,
        launches_before=launches_before,
    )
