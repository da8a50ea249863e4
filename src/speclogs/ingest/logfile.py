"""Parse one log's bytes into table frames, chunk by chunk (bounded memory on multi-GB logs).

`parse_log_chunks` yields one ChunkResult per chunk of about `chunk_bytes`; chunks end just before a line
that starts with '[' (an SGLang record), so a traceback never straddles two chunks.

Three ways to classify, same rows (tests/test_ingest_paths.py checks it):
- 'polars': the compiled regexes run vectorised in polars (big inputs);
- 'regex': the same regexes with Python's re, piece by piece (small inputs: polars' fixed cost per
  operation dominates below a few MB);
- 'pyparsing': the grammar definitions themselves, piece by piece (reference; ~5k lines/s).
'auto' picks polars for chunks of SMALL_CHUNK_BYTES or more, else regex.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from speclogs.ingest.classify import Engine, classify_fast, classify_slow
from speclogs.ingest.lines import build_lines, pieces_slow
from speclogs.ingest.records import ChunkResult, assemble

DEFAULT_CHUNK_BYTES = 32 << 20
SMALL_CHUNK_BYTES = 512 << 10
METHODS = ("auto", "polars", "regex", "pyparsing")


def chunk_bounds(data: bytes, chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """(start, end) byte ranges of whole lines; each chunk after the first starts at a '[' line when one is near."""
    size = len(data)
    start = 0
    while start < size:
        target = start + chunk_bytes
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
    data: bytes, engine: Engine, *, method: str = "auto", chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[ChunkResult]:
    """Parse valid UTF-8 log bytes; launch numbers continue across chunks."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")
    first_line_no = 1
    launches_before = 0
    view = memoryview(data)
    for start, end in chunk_bounds(data, chunk_bytes):
        chunk = view[start:end]
        chosen = method if method != "auto" else ("polars" if end - start >= SMALL_CHUNK_BYTES else "regex")
        if chosen == "polars":
            result = _parse_chunk_fast(chunk, engine, first_line_no, launches_before)
        else:
            result = _parse_chunk_slow(bytes(chunk), engine, first_line_no, launches_before, chosen)
        first_line_no += result.total_lines
        launches_before += len(result.launch_starts)
        yield result


def _parse_chunk_fast(chunk: memoryview, engine: Engine, first_line_no: int, launches_before: int) -> ChunkResult:
    lines = build_lines(chunk, first_line_no)
    claims = classify_fast(engine, lines.frame)
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
