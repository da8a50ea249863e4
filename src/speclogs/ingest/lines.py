"""Bytes → physical lines (LF or CRLF) → pieces of text the grammars can read. Most lines are one piece as they
are; the rare odd ones go through `split_pieces` in Python (ANSI stripped, tqdm's `\\r` states split, a record glued
after a progress bar cut off, capture tools' prefixes peeled). Lines over MAX_LINE_BYTES are stored whole as unparsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

MAX_LINE_BYTES = 1 << 20  # 1 MiB: longer lines are not parsed, only stored whole as unparsed

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\^\[\[[0-9;?]*[A-Za-z]")
# A record header inside a line: SGLang '[YYYY-MM-DD HH:MM:SS' or an NCCL 'host:pid:tid [rank] NCCL '.
GLUED_RE = re.compile(
    r"\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}[]. ]"
    r"|(?<![A-Za-z0-9._-])[A-Za-z0-9][A-Za-z0-9._-]*:[0-9]+:[0-9]+ \[[0-9]+\] NCCL "
)


@dataclass(frozen=True)
class Wrappers:
    """The wrapper grammars compiled: `detect` finds the lines not starting with '[' that start with one (polars),
    `each` peels one off (Python); `heads` are the literal starts ('[pod/') that find one on a line starting with '['."""

    detect: str
    each: tuple[re.Pattern, ...]
    heads: tuple[str, ...]


def wrappers_of(patterns: tuple) -> Wrappers:
    unnamed = [re.sub(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(?:", p.regex[1:].removesuffix("$")) for p in patterns]
    heads = tuple(p.gate for p in patterns if p.gate.startswith("[") and p.template.startswith(p.gate))
    return Wrappers("^(?:" + "|".join(unnamed) + ")" if unnamed else "^$.", tuple(re.compile(p.regex) for p in patterns), heads)


_BLANK = " \t\x0b\x0c"  # what makes a piece blank (the same set as _ODD_LINE's, in both paths)


@dataclass(frozen=True)
class Lines:
    """The physical lines of one chunk: `frame` (line_no, piece, text) the pieces to classify, `raw` (line_no, raw)
    every line; `blank` / `too_long` list lines that produce no piece."""

    frame: pl.DataFrame
    raw: pl.DataFrame
    blank: tuple[int, ...]
    too_long: tuple[tuple[int, int], ...]  # (line_no, byte length)
    outer_prefixes: tuple[tuple[int, str], ...] = ()  # (line_no, the prefixes a capture tool put before its text)


def count_lines(data: bytes | memoryview) -> int:  # as build_lines splits them
    data = bytes(data)
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def read_lines(data: bytes | memoryview) -> pl.Series:
    """Physical lines by polars' CSV reader, split at a byte that never occurs in text (text with it: Python)."""
    data = bytes(data)
    if b"\x01" in data:
        return pl.Series("text", data.decode("utf-8").removesuffix("\n").split("\n")).str.strip_suffix("\r")
    if not data:
        return pl.Series("text", [], dtype=pl.Utf8)
    frame = pl.read_csv(data, has_header=False, separator="\x01", quote_char=None, infer_schema=False, new_columns=["text"])
    return frame.get_column("text").fill_null("")


def split_pieces(text: str, wrappers: Wrappers) -> tuple[list[str], list[str]]:
    """One odd physical line → the pieces of text in it (possibly none) and the outer prefixes peeled off them."""
    if "\x1b" in text or "^[[" in text:
        text = ANSI_RE.sub("", text)
    pieces: list[str] = []
    peeled: list[str] = []
    for segment in text.split("\r"):
        segment = _peel(segment, peeled, wrappers)
        if not segment.strip(_BLANK):
            continue
        if not segment.startswith("["):
            found = GLUED_RE.search(segment, 1)
            if found is not None:
                head = segment[: found.start()]
                if head.strip(_BLANK):
                    pieces.append(head)
                segment = _peel(segment[found.start():], peeled, wrappers)
        pieces.append(segment)
    return pieces, peeled


def _peel(segment: str, peeled: list[str], wrappers: Wrappers) -> str:
    while True:
        found = next((m for rx in wrappers.each if (m := rx.match(segment)) is not None and m.start("message")), None)
        if found is None:
            return segment
        peeled.append(segment[: found.start("message")])
        segment = segment[found.start("message"):]


# Odd lines: CR, ANSI (real or pasted '^[['), found with a literal multi-search; a bracketed wrapper's head; then,
# only on the few lines that do not start with '[': blank, a glued '[20…' record, a glued NCCL record, or a wrapper.
_ODD_LITERALS = ["\r", "\x1b", "^[["]
_ODD_UNBRACKETED = r"^[ \t\x0b\x0c]*$|^.*\[20|^.*[^A-Za-z0-9._-][A-Za-z0-9][A-Za-z0-9._-]*:[0-9]+:[0-9]+ \[[0-9]+\] NCCL "


def odd_lines(text: pl.Series, wrappers: Wrappers) -> pl.Series:
    odd = text.str.contains_any(_ODD_LITERALS)
    for head in wrappers.heads:
        odd = odd | text.str.starts_with(head)
    unbracketed = (~text.str.starts_with("[")).arg_true()
    if len(unbracketed):
        found = text.gather(unbracketed).str.contains(_ODD_UNBRACKETED + "|" + wrappers.detect)
        odd = odd.scatter(unbracketed.filter(found), True)
    return odd


def build_lines(data: bytes | memoryview, wrappers: Wrappers, first_line_no: int = 1) -> Lines:
    text = read_lines(data)
    raw = pl.DataFrame({"line_no": pl.int_range(first_line_no, first_line_no + text.len(), dtype=pl.Int64, eager=True), "raw": text})
    long = text.str.len_bytes() > MAX_LINE_BYTES
    too_long = tuple(raw.filter(long).select("line_no", pl.col("raw").str.len_bytes()).iter_rows())
    frame = raw.filter(~long) if too_long else raw
    odd = odd_lines(frame.get_column("raw"), wrappers)
    blank: list[int] = []
    prefixes: list[tuple[int, str]] = []
    rows: list[tuple[int, int, str]] = []
    for line_no, line in frame.filter(odd).iter_rows():  # rare: plain Python
        pieces, peeled = split_pieces(line, wrappers)
        if peeled:
            prefixes.append((line_no, "".join(peeled)))
        if not pieces:
            blank.append(line_no)
        rows.extend((line_no, index, piece) for index, piece in enumerate(pieces))
    pieces = frame.filter(~odd).select("line_no", pl.lit(0, dtype=pl.Int32).alias("piece"), pl.col("raw").alias("text"))
    if rows:
        split = pl.DataFrame(rows, schema=pieces.schema, orient="row")
        pieces = pl.concat([pieces, split]).sort("line_no", "piece")
    return Lines(frame=pieces, raw=raw, blank=tuple(blank), too_long=too_long, outer_prefixes=tuple(prefixes))
