"""Parse one log's bytes into table frames, chunk by chunk (bounded memory on multi-GB logs).

`parse_log_chunks` yields one ChunkResult per chunk of about `chunk_bytes`; chunks end just before a line
that starts with '[' (an SGLang record), so a traceback never straddles two chunks.

Three ways to classify, same rows (tests/test_ingest_paths.py and tests/test_native.py check it):
- 'polars': the compiled regexes run vectorised, by the native matcher (native.py) where it is built, else by
  polars (big inputs);
- 'regex': the same regexes with Python's re, piece by piece (small inputs: polars' fixed cost per
  operation dominates below a few MB);
- 'pyparsing': the grammar definitions themselves, piece by piece (reference; ~5k lines/s).
'auto' picks polars for chunks of SMALL_CHUNK_BYTES or more, else regex.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from speclogs.errors import InputError
from speclogs.ingest import native
from speclogs.ingest.classify import Engine, classify_fast, classify_slow
from speclogs.ingest.lines import build_lines, count_lines, pieces_slow
from speclogs.ingest.records import ChunkResult, assemble
from speclogs.ingest.sources import LogStream, tapered_bytes

DEFAULT_CHUNK_BYTES = 16 << 20  # two chunks are parsed at once; 32 MiB chunks cost ~140 MB more peak RSS, no speed
SMALL_CHUNK_BYTES = 512 << 10
METHODS = ("auto", "polars", "regex", "pyparsing")
PARSE_THREADS = 2
CHUNKS_AHEAD = PARSE_THREADS + 1  # chunks in flight: one more than threads, so a thread never waits for the next chunk


def engine_note(size_bytes: int, method: str) -> str | None:
    """A warning for a log big enough for the vectorised path when the native matcher is off (it then runs on
    polars' regexes, slower); None otherwise."""
    if method not in ("auto", "polars") or size_bytes < SMALL_CHUNK_BYTES:
        return None
    return native.unavailable_reason()


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


def parse_log_chunks(
    source: bytes | LogStream, engine: Engine, *, method: str = "auto", chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[ChunkResult]:
    """Parse a log (valid UTF-8 bytes, or a LogStream read chunk by chunk); launch numbers continue across chunks.

    With polars, up to PARSE_THREADS chunks are split and classified at once (polars releases the GIL);
    the per-chunk assembly, which numbers launches, runs in order."""
    if method not in METHODS:
        raise InputError(f"ingest method must be one of {', '.join(METHODS)}, not {method!r}",
                         hint="'auto' picks the compiled fast path and falls back to pyparsing where it must")
    launches_before = 0
    with ThreadPoolExecutor(max_workers=PARSE_THREADS, thread_name_prefix="speclogs-classify") as pool:
        pending: deque = deque()  # (chunk, first_line_no, method, byte_end, future or None), in file order
        for chunk, first_line_no, lines, chosen, byte_end in _planned_chunks(source, method, chunk_bytes):
            future = pool.submit(_classify_chunk_fast, chunk, engine, first_line_no, lines) if chosen == "polars" else None
            pending.append((chunk, first_line_no, chosen, byte_end, future))
            while len(pending) >= CHUNKS_AHEAD:
                result = _finish_chunk(engine, pending.popleft(), launches_before)
                launches_before += len(result.launch_starts)
                yield result
        while pending:
            result = _finish_chunk(engine, pending.popleft(), launches_before)
            launches_before += len(result.launch_starts)
            yield result


def _planned_chunks(source: bytes | LogStream, method: str, chunk_bytes: int) -> Iterator[tuple[bytes | memoryview, int, int, str, int]]:
    """(chunk, first_line_no, method, byte_end) per chunk; lines are counted as the chunks are handed out, so the
    first chunk starts parsing before the rest of the file is read or counted. byte_end is in the file's own
    bytes (what progress is measured in)."""
    first_line_no = 1
    for chunk, lines, byte_end in _chunks(source, chunk_bytes):
        chosen = method if method != "auto" else ("polars" if len(chunk) >= SMALL_CHUNK_BYTES else "regex")
        yield chunk, first_line_no, lines, chosen, byte_end
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
    chunk, first_line_no, chosen, byte_end, future = planned
    if future is None:
        result = _parse_chunk_slow(bytes(chunk), engine, first_line_no, launches_before, chosen)
    else:
        lines, claims = future.result()
        result = _assemble_fast(engine, lines, claims, first_line_no, launches_before)
    result.byte_end = byte_end
    return result


def _classify_chunk_fast(chunk: bytes | memoryview, engine: Engine, first_line_no: int, line_count: int):
    lines = build_lines(chunk, first_line_no, line_count)
    return lines, classify_fast(engine, lines.frame)


def _assemble_fast(engine: Engine, lines, claims, first_line_no: int, launches_before: int) -> ChunkResult:
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
        launches_before=launches_before,
    )


def _parse_chunk_slow(chunk: bytes, engine: Engine, first_line_no: int, launches_before: int, method: str) -> ChunkResult:
    pieces, total, blank, too_long = pieces_slow(chunk, first_line_no)
    claims = classify_slow(engine, pieces, method=method)
    text = chunk.decode("utf-8").split("\n")
    if text and text[-1] == "":
        text.pop()
    raw = [line[:-1] if line.endswith("\r") else line for line in text]
    raw_lines = pl.DataFrame(
        {"line_no": list(range(first_line_no, first_line_no + len(raw))), "raw": raw},
        schema={"line_no": pl.Int64, "raw": pl.Utf8},
    )
    return assemble(
        engine, claims, raw_lines, total_lines=total, blank=blank, too_long=too_long, launches_before=launches_before
    )
