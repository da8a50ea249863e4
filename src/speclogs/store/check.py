"""The content check: is everything each source line printed in the database?

`check_content(connection)` re-reads every ingested file and holds each line against the cells of the rows ingest made
of it (every table with `source_file` and `line_no`, and the multi-line records that span it), as DuckDB prints them.
A token passes when it occurs in a cell, a number equals a numeric cell (to the precision printed), or it is a literal
of a grammar pattern that writes to one of the line's tables. JSON inputs are checked value by value; a whole-document
input (NCCL probe, run.json) against the file's rows. A token the ingest redacted (speclogs.redact) is counted as
redacted, never as found. A file that cannot be re-read as it was ingested (gone, changed, stdin) is "cannot verify",
which fails the check. A log is checked a window of lines at a time, with only that window's rows in memory.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path

from speclogs.errors import StoreError
from speclogs.ingest.lines import ANSI_RE
from speclogs.redact import redact

# Columns that say where a row came from, not what the line printed (never evidence for a token).
_KEY_COLUMNS = frozenset({"run_id", "source_file", "line_no", "last_line_no", "launch_no", "piece"})
TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+(?:\.[0-9]+)*")
_LOG_TABLE_EXCLUDES = frozenset({"files", "runs", "launches", "meta", "line_accounting", "nccl_probe"})
EXAMPLES_SHOWN = 20
_TEXT_KINDS = ("log", "prometheus")  # checked token by token; every other kind is JSON lines (bench, request_export, jsonl)
WINDOW_LINES = 50_000  # a log is checked this many lines at a time: their rows are all the check holds


@dataclass(frozen=True)
class Loss:
    """One line whose content the database does not hold in full."""

    source_file: str
    line_no: int
    missing: tuple[str, ...]  # the tokens found nowhere ('(no row)' when the line has none)
    tables: tuple[str, ...]  # the tables that have rows for it
    text: str


@dataclass(frozen=True)
class FileCheck:
    source_file: str
    kind: str
    lines: int
    lines_kept: int
    note: str | None = None  # why a file could not be verified ("cannot verify: source missing / changed / stdin")
    tokens_redacted: int = 0  # tokens of the source the database holds as <redacted>
    lines_redacted: int = 0


@dataclass(frozen=True)
class ContentCheck:
    """What `check_content` found: per file, and the lines that lost something (first EXAMPLES_SHOWN per file)."""

    files: tuple[FileCheck, ...]
    losses: tuple[Loss, ...]

    def _sum(self, name: str) -> int:
        return sum(getattr(f, name) for f in self.files)

    lines = property(lambda self: self._sum("lines"))
    lines_kept = property(lambda self: self._sum("lines_kept"))
    lines_lost = property(lambda self: self.lines - self.lines_kept)
    tokens_redacted = property(lambda self: self._sum("tokens_redacted"))
    lines_redacted = property(lambda self: self._sum("lines_redacted"))

    @property
    def unchecked(self) -> tuple[FileCheck, ...]:
        return tuple(f for f in self.files if f.note is not None)

    @property
    def ok(self) -> bool:
        """Every line of every file verified and kept: a file that could not be verified is not a pass."""
        return self.lines_lost == 0 and not self.unchecked

    def to_dict(self) -> dict:
        return {
            "ok": self.ok, "lines": self.lines, "lines_kept": self.lines_kept, "lines_lost": self.lines_lost,
            "files_unverified": len(self.unchecked), "lines_redacted": self.lines_redacted,
            "tokens_redacted": self.tokens_redacted,
            "files": [asdict(f) for f in self.files], "losses": [asdict(loss) for loss in self.losses],
        }


def check_content(connection, *, sources: Iterable[str] | None = None, grammar_paths: Iterable[Path] = ()) -> ContentCheck:
    """Hold every line of the ingested files (or of `sources`, a subset of files.source_file) against its rows."""
    from speclogs.grammar import load_grammars

    vocabulary = template_vocabulary(load_grammars(tuple(grammar_paths)))
    files = connection.execute(
        "SELECT source_file, kind, sha256 FROM files WHERE skipped_reason IS NULL "
        "AND ($1 IS NULL OR list_contains($1, source_file)) ORDER BY source_file", [None if sources is None else list(sources)]
    ).fetchall()
    rows_sql = _rows_sql(connection)
    checks: list[FileCheck] = []
    losses: list[Loss] = []
    for source_file, kind, sha256 in files:
        raw = _reread(source_file)
        if isinstance(raw, str):
            checks.append(FileCheck(source_file, kind, 0, 0, raw))
            continue
        counts: Counter = Counter()  # lines, lines_lost, tokens_redacted, lines_redacted
        if kind in _DOCUMENT_ROWS:
            file_losses = _check_document(connection, source_file, kind, "\n".join(_lines(raw)), counts)
        else:
            file_losses, lines, first = [], _lines(raw), 1
            while window := list(islice(lines, WINDOW_LINES)):
                cells = {line_no: (set(tables), cells) for line_no, tables, cells in connection.execute(
                    rows_sql, [source_file, first, first + len(window) - 1]).fetchall()}
                found = _check_lines(source_file, window, first, cells, vocabulary, counts, json_lines=kind not in _TEXT_KINDS)
                file_losses.extend(found[:max(0, EXAMPLES_SHOWN - len(file_losses))])
                first += len(window)
        if (raw.stream.result() if raw.stream is not None else raw.sha256) != sha256:  # the bytes on disk, read through
            checks.append(FileCheck(source_file, kind, 0, 0, "cannot verify: source changed since it was ingested"))
            continue
        losses.extend(file_losses[:EXAMPLES_SHOWN])
        checks.append(FileCheck(source_file, kind, counts["lines"], counts["lines"] - counts["lines_lost"], None,
                                counts["tokens_redacted"], counts["lines_redacted"]))
    return ContentCheck(files=tuple(checks), losses=tuple(losses))


_MAX_SPELLINGS = 4096


def template_vocabulary(grammars) -> dict[str, frozenset[str]]:
    """Per table: the tokens of its patterns' literal text (and of the prefix), which a row need not store. Literal
    text is read the way it prints: optional parts and alternatives spelled out (`n{|r|R}anks` gives nranks and
    nRanks), a slot breaking the text."""
    from speclogs.grammar.template import parse_template

    def tokens(pattern) -> set[str]:
        found: set[str] = set()
        for text in _spellings(parse_template(pattern.template, pattern.name)):
            found.update(TOKEN_RE.findall(text))
        return found

    prefix = tokens(grammars.prefix)
    by_table: dict[str, set[str]] = {}
    for pattern in grammars.patterns:
        table = {"foreign": "foreign_lines"}.get(pattern.table, pattern.table)
        by_table.setdefault(table, set(prefix)).update(tokens(pattern))
    return {table: frozenset(found) for table, found in by_table.items()}


def _spellings(nodes) -> list[str]:
    """Every text a template's literal parts can print (slots as a break), up to _MAX_SPELLINGS of them; past that,
    each literal on its own (its tokens are still all there, only words glued across a group are not)."""
    from speclogs.grammar.template import Lit, Slot, leaves

    spelled = [""]
    for node in nodes:
        if isinstance(node, Lit):
            options = [node.text]
        elif isinstance(node, Slot):
            options = ["\x00"]
        else:  # a group: its branches, and nothing for an optional part
            options = ([""] if node.optional else []) + [text for branch in node.branches for text in _spellings(branch)]
        if len(spelled) * len(options) > _MAX_SPELLINGS:
            return [node.text for node in leaves(nodes) if isinstance(node, Lit)]
        spelled = [head + option for head in spelled for option in options]
    return spelled


def _reread(source_file: str):
    """An ingested file opened again as the ingest read it (gunzipped, made valid UTF-8), or why it cannot be."""
    from speclogs.ingest.sources import STDIN_NAME, InputFile, RunRef, read_input

    path = Path(source_file)
    if source_file.startswith(STDIN_NAME[:-1]):  # <stdin> or <stdin:digest>
        return "cannot verify: stdin (its text was not kept)"
    if not path.is_file():
        return "cannot verify: source missing (moved or deleted since it was ingested)"
    raw = read_input(InputFile(source_file=source_file, kind="log", run=RunRef("", "", None), path=path,
                               size_bytes=path.stat().st_size))
    return raw if raw.skipped_reason is None else f"cannot verify: {raw.skipped_reason}"


def _lines(raw) -> Iterator[str]:
    """Its lines, chunk by chunk."""
    chunks = raw.stream.chunks(16 << 20) if raw.stream is not None else [raw.data]
    tail = b""
    for chunk in chunks:
        *whole, tail = (tail + chunk).split(b"\n")
        yield from (line.decode("utf-8", "replace").removesuffix("\r") for line in whole)
    if tail:
        yield tail.decode("utf-8", "replace").removesuffix("\r")


def _rows_sql(connection) -> str:
    """The SQL of lines $2 to $3 of file $1: per line, the contract relations with a row for it (by its source_file
    and line_no, or spanning it to last_line_no), and every cell of those rows as DuckDB prints it (with the run's
    name)."""
    selects = []
    for name, columns in connection.execute(
        "SELECT table_name, list(column_name ORDER BY column_index) FROM duckdb_columns() WHERE schema_name = 'main' "
        "AND NOT starts_with(table_name, '_') GROUP BY table_name ORDER BY table_name"
    ).fetchall():
        if not {"source_file", "line_no"} <= set(columns) or name in _LOG_TABLE_EXCLUDES:
            continue
        last = "COALESCE(t.last_line_no, t.line_no)" if "last_line_no" in columns else "t.line_no"
        cells = ", ".join([f't."{c}"' for c in columns if c not in _KEY_COLUMNS] + ["r.run_name"] * ("run_id" in columns))
        runs = " LEFT JOIN runs r ON r.run_id = t.run_id" if "run_id" in columns else ""
        selects.append(f"SELECT '{name}' AS relation, t.line_no AS first_line, {last} AS last_line, "
                       f"concat_ws(chr(1), {cells}) AS cells FROM \"{name}\" t{runs} "
                       f"WHERE t.source_file = $1 AND t.line_no <= $3 AND {last} >= $2")
    return ("SELECT line_no, list(DISTINCT relation), flatten(list(string_split(cells, chr(1)))) FROM (SELECT relation, "
            "cells, unnest(range(greatest(first_line, $2), least(last_line, $3) + 1)) AS line_no FROM ("
            + "\nUNION ALL ".join(selects) + ")) GROUP BY line_no")


def _check_lines(source_file: str, lines: list[str], first_line: int, rows: dict[int, tuple[set[str], list[str]]],
                 vocabulary: dict[str, frozenset[str]], counts: Counter, *, json_lines: bool) -> list[Loss]:
    losses: list[Loss] = []
    tokenize = _json_tokens if json_lines else _tokens
    for line_no, line in enumerate(lines, start=first_line):
        counts["lines"] += 1
        tokens = tokenize(line)
        tables, cells = rows.get(line_no, (set(), []))
        if not tables:
            missing, redacted = ["(no row)"] if tokens else [], []
        else:
            template = frozenset().union(*(vocabulary.get(table, frozenset()) for table in tables))
            missing, redacted = _redacted(tokens, missing_tokens(tokens, cells, template), line, tokenize)
        counts["tokens_redacted"] += len(redacted)
        counts["lines_redacted"] += bool(redacted)
        if missing:
            counts["lines_lost"] += 1
            losses.append(Loss(source_file, line_no, tuple(missing), tuple(sorted(tables)), redact(line)))
    return losses


def _redacted(tokens: list[str], missing: list[str], line: str, tokenize) -> tuple[list[str], list[str]]:
    """The missing tokens split into (missing, redacted): those the ingest's redaction took out of the line."""
    if not missing:
        return [], []
    hidden = set(tokens) - set(tokenize(redact(line)))
    return [token for token in missing if token not in hidden], [token for token in missing if token in hidden]


def _tokens(line: str) -> list[str]:
    """A line's tokens: words of two letters or more, and numbers. ANSI colour codes are formatting, not content."""
    if "\x1b" in line or "^[[" in line:
        line = ANSI_RE.sub(" ", line)
    return [t for t in TOKEN_RE.findall(line) if len(t) > 1 or t.isdigit()]


def _json_tokens(line: str) -> list[str]:
    """The scalar values of a JSON line, as the tokens they print (keys are template; a non-JSON line: its words)."""
    try:
        return _value_tokens(json.loads(line))
    except ValueError:
        return _tokens(line)


def _value_tokens(value) -> list[str]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [token for item in value for token in _value_tokens(item)]
    if isinstance(value, bool) or value is None:
        return []
    return [repr(value)] if isinstance(value, (int, float)) else _tokens(value)


def missing_tokens(tokens: list[str], cells: list[str], template: frozenset[str]) -> list[str]:
    """The tokens of a line that its rows' cells do not hold (see the module docstring for what counts)."""
    text = "\x00".join(cells)
    numbers: list[float] | None = None
    missing: list[str] = []
    for token in dict.fromkeys(tokens):
        if token in template or token in text or (token in ("True", "False") and token.lower() in cells):
            continue
        if token[0].isdigit():
            numbers = [float(c) for c in cells if _NUMBER.fullmatch(c)] if numbers is None else numbers
            if _number_found(token, numbers):
                continue
        missing.append(token)
    return missing


_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:e[-+]?[0-9]+)?")


def _number_found(token: str, numbers: list[float]) -> bool:
    try:
        value = float(token)
    except ValueError:
        return False
    decimals = len(token) - token.index(".") - 1 if "." in token else 0
    tolerance = 0.5 * 10.0**-decimals + 1e-9 * abs(value)
    return any(abs(abs(number) - value) <= tolerance for number in numbers)


_DOCUMENT_ROWS = {  # a whole-document input: the rows that hold it
    "nccl_probe": ("nccl_probe_files", "SELECT concat_ws(chr(1), *COLUMNS(*)) FROM nccl_probe_files WHERE source_file = ?"),
    "run_json": ("runs", "SELECT concat_ws(chr(1), *COLUMNS(*)) FROM runs WHERE run_id IN "
                         "(SELECT run_id FROM files WHERE source_file = ?)"),
}


def _check_document(connection, source_file: str, kind: str, text: str, counts: Counter) -> list[Loss]:
    """A JSON document (NCCL probe, run.json): every scalar value it holds must be in its rows (`lines`: its values)."""
    table, sql = _DOCUMENT_ROWS[kind]
    cells = [cell for (row,) in connection.execute(sql, [source_file]).fetchall() for cell in row.split("\x01")]
    flat = " ".join(text.split())
    tokens = _json_tokens(flat)
    missing, redacted = _redacted(tokens, missing_tokens(tokens, cells, frozenset()), flat, _json_tokens)
    counts.update(lines=len(tokens), lines_lost=len(missing), tokens_redacted=len(redacted), lines_redacted=bool(redacted))
    return [Loss(source_file, 0, tuple(missing), (table,), f"{len(missing)} of {len(tokens)} values not stored")] if missing else []


def check_database(db_path: str | Path, *, lake: str | Path | None = None, **kwargs) -> ContentCheck:
    """check_content on the database file at db_path (opened read-only), or on the lake `lake` when given."""
    from speclogs.store.query import connect_reading

    with connect_reading(db_path, lake) as connection:
        try:
            return check_content(connection, **kwargs)
        except OSError as error:
            raise StoreError(f"cannot re-read a source file: {error}", hint="the check reads the ingested files where they were") from error
