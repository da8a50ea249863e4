"""Claims → table frames: multi-line error records, launches, server_args rows, unparsed rows, line accounting. A
chunk is a batch of small files (ChunkFiles) or a part of one big file; every row leaves with its file's index.

Launches: a log file is split at each `server_args=` line (launch_no 1, 2, …); lines before the first belong to 1.

Tracebacks: a head (`… hit an exception: Traceback (most recent call last):`, a bare `Traceback …`,
`terminate called …`) starts an `errors` record; the following adjacent lines continue it while they are
traceback frames / the exception line, unrecognised text before the exception line, or blank lines that
more of the record follows. A chained exception ("During handling of the above exception …" + a new bare
`Traceback …`) stays one record; a bare `Traceback …` right after a recognised SGLang line that announces
it (`[ts] ERROR:    Exception in ASGI application`) makes that line the record's first line. A frame with no
head before it is stored as unparsed ('traceback line without a traceback head').
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from speclogs.ingest.classify import NEW_PREFIX, Claims, Engine, explain_miss, is_server_args, repeat
from speclogs.ingest.jsonfiles import json_text
from speclogs.ingest.reprs import parse_server_args
from speclogs.ingest.summary import FileAccount

ERRORS_TABLE = "errors"
# grammar table names that cannot be SQL table names as they are (FOREIGN is an SQL keyword)
TABLE_RENAMES = {"foreign": "foreign_lines"}
HEAD, FRAME, END = "traceback_head", "traceback_frame", "traceback_end"
ROLE_COLUMN = "record"
LAUNCH_EVENT_KINDS = ("server_args", "ready", "cuda_graph_end", "sigterm")
DRIFT_EXAMPLES_PER_PATTERN = 20  # per file: the near misses kept with their text and pyparsing's reason
_FRAGMENT = " (fragment; the same line also holds parsed records)"


@dataclass
class ChunkResult:
    """A chunk parsed into table frames, every row with `file` (its file's index) and its line_no in that file."""

    tables: dict[str, pl.DataFrame]
    files: list[FileAccount]
    byte_end: int = 0  # bytes of the file read when this chunk was cut (for progress)
    request_lines: pl.DataFrame | None = None  # its --log-requests lines, read (requests.read_request_lines, for RequestLog)


@dataclass(frozen=True)
class ChunkFiles:
    """Where a chunk's files are: `starts[f]` is the chunk line number of file f's first line, `lines[f]` how many it
    has; a number between two files belongs to none (so no record joins them). A streamed chunk's launches are
    numbered by `number_launches` once the chunks before it are done (`numbered` False)."""

    starts: tuple[int, ...]
    lines: tuple[int, ...]
    numbered: bool = True

    def index_of(self, line_no: pl.Series) -> pl.Series:
        return (pl.Series(self.starts, dtype=pl.Int64).search_sorted(line_no, side="right") - 1).cast(pl.Int32).alias("file")


def assemble(engine: Engine, claims: Claims, raw_lines: pl.DataFrame, files: ChunkFiles, *, blank: Sequence[int],
             too_long: Sequence[tuple[int, int]], outer_prefixes: tuple[tuple[int, str], ...] = ()) -> ChunkResult:
    patterns = {c.name: c.pattern for c in engine.patterns}
    headers = [frame for name, frame in claims.frames.items() if is_server_args(patterns[name])]
    launch_starts = sorted(line_no for frame in headers for line_no in frame["line_no"].to_list())
    errors = {name: frame for name, frame in claims.frames.items() if patterns[name].table == ERRORS_TABLE}
    records, continuation_keys, orphan_keys = _group_errors(engine, claims, errors, blank, raw_lines)

    by_table: dict[str, list[pl.DataFrame]] = {}
    for name, frame in claims.frames.items():
        if name not in errors:
            by_table.setdefault(TABLE_RENAMES.get(patterns[name].table, patterns[name].table), []).append(frame)
    tables = {  # each pattern's frame is in line order already; several patterns' frames need a merge
        table: frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed").sort(["line_no", "piece"])
        for table, frames in by_table.items()
    }
    if records:
        tables[ERRORS_TABLE] = _errors_frame(records, raw_lines)
    if claims.server_args_text:
        tables["server_args"] = _server_args_frame(claims, headers)

    # every physical line is parsed, continuation or unparsed
    claimed = [frame.get_column("line_no") for name, frame in claims.frames.items()
               if name not in errors or patterns[name].constants.get(ROLE_COLUMN, HEAD) == HEAD]
    continuation_lines = {line for line, _ in continuation_keys}
    parsed = _distinct_lines(claimed, raw_lines.get_column("line_no"), continuation_lines)
    unparsed: dict[int, str] = {}  # line_no → why (its first piece's reason)
    unmatched = [((line_no, piece), "SGLang line, no pattern matched" if prefixed else "no pattern matched")
                 for line_no, piece, _text, prefixed in claims.unclaimed.iter_rows()]
    for key, reason in unmatched + [(key, "traceback line without a traceback head") for key in sorted(orphan_keys)]:
        if key not in continuation_keys:
            unparsed.setdefault(key[0], reason)
    unparsed |= {line_no: "empty line" for line_no in blank if line_no not in continuation_lines}
    unparsed |= {line_no: f"line too long to parse ({size:,} bytes; its text is kept whole)" for line_no, size in too_long}
    if unparsed:
        frame = pl.DataFrame(list(unparsed.items()), schema={"line_no": pl.Int64, "reason": pl.Utf8}, orient="row").sort("line_no")
        fragment = pl.col("line_no").is_in(parsed.implode()) | pl.col("line_no").is_in(list(continuation_lines))
        tables["unparsed_lines"] = frame.join(raw_lines, on="line_no", how="left", maintain_order="left").with_columns(
            pl.col("raw").fill_null(""), pl.lit(0, dtype=pl.Int32).alias("piece"),
            pl.when(fragment).then(pl.col("reason") + _FRAGMENT).otherwise(pl.col("reason")).alias("reason"))

    # what a capture tool put before the text (docker compose service, Ray actor, kubectl pod, journald unit, …), and
    # the prefixes other than SGLang's that messages were found after
    if outer_prefixes or claims.prefixes is not None:
        prefixes = [pl.DataFrame([(line_no, 0, prefix) for line_no, prefix in outer_prefixes],
                                 schema={"line_no": pl.Int64, "piece": pl.Int32, "prefix": pl.Utf8}, orient="row")]
        if claims.prefixes is not None:
            prefixes.append(claims.prefixes.select(pl.col("line_no").cast(pl.Int64), pl.col("piece").cast(pl.Int32), "prefix"))
        tables["outer_prefixes"] = pl.concat(prefixes).sort("line_no", "piece", maintain_order=True)
    if claims.drift.height:  # format drift: the first few near misses per pattern and file, with pyparsing's reason
        tables["parse_drift"] = _drift_examples(engine, claims.drift, files)

    # every row's file, its line number in that file, and its launch there
    starts = pl.Series("starts", launch_starts, dtype=pl.Int64)
    tables = {table: _in_files(frame, files, starts) for table, frame in tables.items()}
    launches: dict[int, list[int]] = {}
    for line_no, index in zip(launch_starts, files.index_of(starts).to_list() if launch_starts else ()):
        launches.setdefault(index, []).append(line_no - files.starts[index] + 1)
    drift: dict[int, dict[str, int]] = {}
    if claims.drift.height:
        for index, pattern, count in claims.drift.group_by(files.index_of(claims.drift.get_column("line_no")), "pattern").len().iter_rows():
            drift.setdefault(index, {})[pattern] = count
    run_facts, launch_facts = _run_facts(tables), _launch_facts(tables)
    per_file = _count_per_file(files, parsed, pl.Series(sorted(continuation_lines), dtype=pl.Int64), claims.prefixed)
    accounts = [
        FileAccount(total, parsed_count, continuation_count, total - parsed_count - continuation_count,
                    drift=drift.get(index, {}), prefixed_pieces=prefixed_count, launch_starts=tuple(launches.get(index, ())),
                    launch_facts=tuple(launch_facts.get(index, ())), run_facts=run_facts.get(index, {}))
        for index, (total, (parsed_count, continuation_count, prefixed_count)) in enumerate(zip(files.lines, per_file))
    ]
    return ChunkResult(tables=tables, files=accounts)


def number_launches(result: ChunkResult, launches_before: int) -> ChunkResult:
    """A streamed chunk's launches numbered after those of the chunks before it, in place."""
    numbered = (pl.col("launch_no") + launches_before).clip(lower_bound=1).cast(pl.Int32)
    result.tables = {table: frame.with_columns(numbered) if "launch_no" in frame.columns else frame
                     for table, frame in result.tables.items()}
    result.files = [replace(account, launch_facts=tuple((max(1, launch_no + launches_before), fact, ts)
                                                        for launch_no, fact, ts in account.launch_facts))
                    for account in result.files]
    if result.request_lines is not None:
        result.request_lines = result.request_lines.with_columns(numbered)
    return result


def _distinct_lines(claimed: list[pl.Series], line_nos: pl.Series, minus: set[int]) -> pl.Series:
    """The line numbers (of `line_nos`, consecutive) in any of `claimed` and not in `minus`, in order (marks on the
    chunk's lines: cheaper than a hashed unique)."""
    first = line_nos[0] if line_nos.len() else 0
    mark = np.zeros(line_nos.len(), dtype=bool)
    for column in claimed:
        mark[column.to_numpy() - first] = True
    if minus:
        mark[np.fromiter(minus, dtype=np.int64, count=len(minus)) - first] = False
    return pl.Series("line_no", np.flatnonzero(mark) + first, dtype=pl.Int64)


def _in_files(frame: pl.DataFrame, files: ChunkFiles, launch_starts: pl.Series) -> pl.DataFrame:
    """A frame of chunk line numbers → with `file`, the line numbers in that file and the launch_no; without `piece`."""
    line_no = frame.get_column("line_no")
    if len(files.starts) == 1 and files.starts[0] == 1:  # a whole file, or a streamed one's chunk: numbers are its own
        launch = launch_starts.search_sorted(line_no, side="right").cast(pl.Int64)
        if files.numbered:
            launch = launch.clip(lower_bound=1)
        return _with_series(frame, repeat(0, frame.height, pl.Int32, "file"), launch.cast(pl.Int32).alias("launch_no"))
    index = files.index_of(line_no)
    base = pl.Series(files.starts, dtype=pl.Int64).gather(index)
    before_file = launch_starts.search_sorted(base, side="left")
    up_to_line = launch_starts.search_sorted(line_no, side="right")
    shifted = [(line_no - base + 1).alias("line_no")]
    if "last_line_no" in frame.columns:
        shifted.append((frame.get_column("last_line_no") - base + 1).alias("last_line_no"))
    launch = (up_to_line - before_file).cast(pl.Int64).clip(lower_bound=1).cast(pl.Int32).alias("launch_no")
    return _with_series(frame, *shifted, index, launch)


def _with_series(frame: pl.DataFrame, *series: pl.Series) -> pl.DataFrame:
    """`frame` without `piece`, with `series` in place of its columns of the same names (else after them), without a
    pass of polars' query engine (this runs for every table of every chunk)."""
    columns = {name: frame.get_column(name) for name in frame.columns if name != "piece"}
    columns.update((s.name, s) for s in series)
    return pl.DataFrame(list(columns.values()))


def _count_per_file(files: ChunkFiles, *line_nos: pl.Series) -> list[tuple[int, ...]]:  # per file: how many of each
    n = len(files.starts)
    return list(zip(*([numbers.len()] + [0] * (n - 1) if n == 1 or not numbers.len()
                      else np.bincount(files.index_of(numbers).to_numpy(), minlength=n).tolist() for numbers in line_nos)))


def _drift_examples(engine: Engine, drift: pl.DataFrame, files: ChunkFiles) -> pl.DataFrame:
    """The first DRIFT_EXAMPLES_PER_PATTERN near misses per pattern and file, each with pyparsing's reason."""
    picked = (
        drift.with_columns(files.index_of(drift.get_column("line_no")))
        .sort("file", "pattern", "line_no", "piece")
        .filter(pl.int_range(pl.len()).over("file", "pattern") < DRIFT_EXAMPLES_PER_PATTERN)
    )
    errors = [f"no prefix grammar reads the prefix of: {text}" if name.startswith(NEW_PREFIX)
              else explain_miss(engine.pattern(name).pattern, text)
              for name, text in picked.select("pattern", "text").iter_rows()]
    return (picked.drop("file").with_columns(pl.Series("error", errors, dtype=pl.Utf8))
            .select("line_no", "piece", "pattern", "error", "text"))


def _launch_facts(tables: dict[str, pl.DataFrame]) -> dict[int, list[tuple[int, str, object]]]:
    """Per file: (launch_no, event, ts) of the events launches are summarised by, only the earliest and the latest of
    each (not a tuple for every /health request)."""
    parts: list[pl.DataFrame] = []
    events = tables.get("server_events")
    if events is not None and "kind" in events.columns and "ts" in events.columns:
        picked = events.filter(pl.col("kind").is_in(LAUNCH_EVENT_KINDS) & pl.col("ts").is_not_null())
        parts.append(picked.select("file", "launch_no", pl.col("kind").alias("fact"), "ts"))
    http = tables.get("http_requests")
    if http is not None and {"path", "status", "ts"} <= set(http.columns):
        health = http.filter(pl.col("path").str.starts_with("/health") & (pl.col("status") == 200) & pl.col("ts").is_not_null())
        parts.append(health.select("file", "launch_no", pl.lit("health_200").alias("fact"), "ts"))
    if not parts:
        return {}
    spans = (pl.concat(parts).group_by("file", "launch_no", "fact")
             .agg(pl.col("ts").min().alias("first_ts"), pl.col("ts").max().alias("last_ts")).sort("file", "launch_no", "fact"))
    facts: dict[int, list[tuple[int, str, object]]] = {}
    for index, launch_no, fact, first_ts, last_ts in spans.rows():
        facts.setdefault(index, []).extend(((launch_no, fact, first_ts), (launch_no, fact, last_ts)))
    return facts


@dataclass
class _Record:
    head: dict
    members: list[tuple[int, int]]  # (line_no, piece), head first
    ended: bool = False
    chained: bool = False  # a frame ('During handling of the above exception …') came after the exception line
    exception_type: str | None = None
    exception_message: str | None = None
    last_line: int = 0
    pending: list[tuple[int, int]] = field(default_factory=list)  # blank lines kept only if the record goes on

    def reaches(self, line_no: int) -> bool:
        last = self.pending[-1][0] if self.pending else self.last_line
        return line_no <= last + 1

    def take(self, line_no: int, piece: int, continuation: set[tuple[int, int]]) -> None:
        taken = [*self.pending, (line_no, piece)]
        self.members += taken
        continuation.update(taken)
        self.pending.clear()
        self.last_line = line_no


def _group_errors(engine: Engine, claims: Claims, error_frames: dict[str, pl.DataFrame], blank: Sequence[int],
                  raw_lines: pl.DataFrame) -> tuple[list[_Record], set[tuple[int, int]], set[tuple[int, int]]]:
    """Multi-line error records (the rules: the module docstring) → (records, continuation keys, orphan frame keys)."""
    events: list[tuple[int, int, str, dict, str]] = []
    for name, frame in error_frames.items():
        scope = engine.pattern(name).pattern.scope
        events += [(row["line_no"], row["piece"], row.get(ROLE_COLUMN) or HEAD, row, scope) for row in frame.iter_rows(named=True)]
    if not events:
        return [], set(), set()
    events += [(line_no, piece, "text", {}, "line") for line_no, piece, _text, prefixed in claims.unclaimed.iter_rows() if not prefixed]
    events += [(line_no, 0, "blank", {}, "line") for line_no in blank]
    events.sort(key=lambda e: (e[0], e[1]))
    records: list[_Record] = []
    continuation: set[tuple[int, int]] = set()
    orphans: set[tuple[int, int]] = set()
    bare_heads: list[_Record] = []
    current: _Record | None = None
    for line_no, piece, role, row, scope in events:
        adjacent = current is not None and current.reaches(line_no)
        if role == HEAD:
            bare = scope == "line" and row.get("kind") == "traceback"
            if bare and adjacent and (not current.ended or current.chained):
                current.take(line_no, piece, continuation)
                current.ended = current.chained = False
                continue
            current = _Record(head=row, members=[(line_no, piece)], last_line=line_no)
            records.append(current)
            if bare:
                bare_heads.append(current)
        elif role in (FRAME, END) and adjacent:
            current.take(line_no, piece, continuation)
            if role == END:
                current.ended = True
                current.chained = False
                if row.get("exception_type"):
                    current.exception_type = row["exception_type"]
                    current.exception_message = row.get("exception_message")
            elif current.ended:
                current.chained = True
        elif role in (FRAME, END):
            orphans.add((line_no, piece))
            current = None
        elif role == "blank" and adjacent:
            current.pending.append((line_no, piece))
        elif role == "text" and adjacent and (not current.ended or current.chained):
            current.take(line_no, piece, continuation)
        else:
            current = None  # an unrelated line closes the record
    if bare_heads:
        _attach_to_previous_line(engine, claims, bare_heads, raw_lines, continuation)
    return records, continuation, orphans


def _attach_to_previous_line(engine: Engine, claims: Claims, bare_heads: list[_Record], raw_lines: pl.DataFrame,
                             continuation: set[tuple[int, int]]) -> None:
    # '[ts] ERROR:    Exception in ASGI application' + 'Traceback …': the SGLang line is where the record begins
    wanted = sorted({record.members[0][0] - 1 for record in bare_heads if record.members[0][1] == 0})
    raw = dict(raw_lines.filter(pl.col("line_no").is_in(wanted)).iter_rows())
    prefixed = {row["line_no"]: row for name, frame in claims.frames.items() if engine.pattern(name).pattern.scope == "message"
                for row in frame.filter(pl.col("line_no").is_in(wanted) & (pl.col("piece") == 0))
                .select("line_no", "ts", "ts_text", "rank_tags", "tp_rank").iter_rows(named=True)}
    for record in bare_heads:
        line_no, piece = record.members[0]
        head = prefixed.get(line_no - 1)
        previous = raw.get(line_no - 1, "")
        if piece != 0 or head is None or not ("Exception" in previous or "Error" in previous or previous.rstrip().endswith(":")):
            continue
        continuation.add((line_no, piece))
        record.members.insert(0, (line_no - 1, 0))
        record.head = {"kind": "traceback", "ts": head["ts"], "ts_text": head["ts_text"], "rank_tags": head["rank_tags"] or "",
                       "tp_rank": head["tp_rank"]}


_ERROR_COLUMNS = {
    "line_no": pl.Int64, "piece": pl.Int32, "last_line_no": pl.Int64, "ts": pl.Datetime("us"), "ts_text": pl.Utf8,
    "tp_rank": pl.Int32, "rank_tags": pl.Utf8, "kind": pl.Utf8, "first_line": pl.Utf8, "last_line": pl.Utf8,
    "exception_type": pl.Utf8, "text": pl.Utf8, "exception_message": pl.Utf8, "component": pl.Utf8,
}


def _errors_frame(records: list[_Record], raw_lines: pl.DataFrame) -> pl.DataFrame:
    wanted = sorted({line for record in records for line, _ in record.members})
    raw = dict(raw_lines.filter(pl.col("line_no").is_in(wanted)).iter_rows())
    rows = []
    for record in records:
        head = record.head
        lines = sorted({line for line, _ in record.members})
        texts = [raw.get(line, "") for line in lines]
        rows.append((lines[0], min(record.members)[1], lines[-1], head.get("ts"), head.get("ts_text"), head.get("tp_rank"),
                     head.get("rank_tags"), head.get("kind") or "traceback", texts[0], texts[-1],
                     record.exception_type or head.get("exception_type"), "\n".join(texts),
                     record.exception_message or head.get("exception_message"), head.get("component")))
    return pl.DataFrame(rows, schema=_ERROR_COLUMNS, orient="row")


def _server_args_frame(claims: Claims, header_frames: list[pl.DataFrame]) -> pl.DataFrame:
    ts_by_key = {(line_no, piece): ts for frame in header_frames if "ts" in frame.columns
                 for line_no, piece, ts in frame.select("line_no", "piece", "ts").iter_rows()}
    rows = [(line_no, piece, ts_by_key.get((line_no, piece)), *item)
            for (line_no, piece), message in sorted(claims.server_args_text.items())
            for item in _parsed_server_args(message.split("=", 1)[1] if "=" in message else message)]
    return pl.DataFrame(rows, orient="row", schema={"line_no": pl.Int64, "piece": pl.Int32, "ts": pl.Datetime("us"),
                                                    "name": pl.Utf8, "value": pl.Utf8, "value_json": pl.Utf8})


@functools.lru_cache(maxsize=256)
def _parsed_server_args(body: str) -> list[tuple[str, str, str | None]]:
    """parse_server_args, value as JSON text, remembered per text (the same configuration is dumped at every restart)."""
    return [(name, text, None if value is None and text != "None" else json_text(value)) for name, text, value in parse_server_args(body)]


def _run_facts(tables: dict[str, pl.DataFrame]) -> dict[int, dict[str, object]]:
    """Per file: what a log says about its run: model path, speculative algorithm, TP size (its first launch), host."""
    facts: dict[int, dict[str, object]] = {}
    server_args = tables.get("server_args")
    if server_args is not None and server_args.height:
        first = server_args.filter(pl.col("line_no") == pl.col("line_no").min().over("file"))
        names = ("model_path", "speculative_algorithm", "tp_size")
        facts = {index: dict.fromkeys(names) for index in first.get_column("file").unique().to_list()}
        wanted = first.filter(pl.col("name").is_in(names) & pl.col("value_json").is_not_null())
        for index, name, value_json in wanted.select("file", "name", "value_json").iter_rows():
            value = json.loads(value_json)
            facts[index][name] = value if name != "tp_size" or isinstance(value, int) else None
    nccl = tables.get("nccl_events")
    if nccl is not None and "host" in nccl.columns:
        hosts = nccl.filter(pl.col("host").is_not_null()).group_by("file", maintain_order=True).agg(pl.col("host").first())
        for index, host in hosts.iter_rows():
            facts.setdefault(index, {})["hostname"] = host
    return facts
