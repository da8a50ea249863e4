"""Claims → table frames: multi-line error records, launches, server_args rows, unparsed rows, line accounting.

Shared by both parse paths (they differ only in how pieces are classified), so everything decided here —
which lines continue a traceback, which launch a line belongs to, which lines count as parsed — is the
same for both.

Launches: a log file is split at each `server_args=` line (launch_no 1, 2, …). Lines before the first
server_args line (SGLang prints warnings there) belong to launch 1; a file without any has one launch.

Tracebacks: a head (`… hit an exception: Traceback (most recent call last):`, a bare `Traceback …`,
`terminate called …`) starts an `errors` record; the following adjacent lines continue it while they are
traceback frames / the exception line, unrecognised text before the exception line, or blank lines that
more of the record follows. A chained exception ("During handling of the above exception …" + a new bare
`Traceback …`) stays one record; a bare `Traceback …` right after a recognised SGLang line that announces
it (`[ts] ERROR:    Exception in ASGI application`) makes that line the record's first line. A frame with no
head before it is stored as unparsed ('traceback line without a traceback head').
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import polars as pl

from speclogs.grammar import parse_server_args, split_rank_tags
from speclogs.redact import REDACTED, SUSPECT, redact_line, secret_name
from speclogs.ingest.classify import Claims, Engine, NearMiss, is_server_args

ERRORS_TABLE = "errors"
# grammar table names that cannot be SQL table names as they are (FOREIGN is an SQL keyword)
TABLE_RENAMES = {"foreign": "foreign_lines"}
HEAD, FRAME, END = "traceback_head", "traceback_frame", "traceback_end"
ROLE_COLUMN = "record"

REASON_UNMATCHED_SGLANG = "SGLang line, no pattern matched"
REASON_UNMATCHED = "no pattern matched"
REASON_EMPTY = "empty line"
REASON_ORPHAN_FRAME = "traceback line without a traceback head"
_FRAGMENT = " (fragment; the same line also holds parsed records)"


@dataclass
class ChunkResult:
    """One chunk of a log parsed into table frames (no run_id / source_file yet: the store adds them)."""

    tables: dict[str, pl.DataFrame]
    total_lines: int
    parsed_lines: int
    continuation_lines: int
    unparsed_lines: int
    prefixed_pieces: int
    launch_starts: list[int]  # line numbers of server_args lines in this chunk
    near_miss_counts: dict[str, int] = field(default_factory=dict)
    near_misses: list[NearMiss] = field(default_factory=list)
    run_facts: dict[str, object] = field(default_factory=dict)
    launch_facts: list[tuple[int, str, object]] = field(default_factory=list)  # (launch_no, fact, ts)
    byte_end: int = 0  # offset in the (decompressed) text where this chunk ends


LAUNCH_EVENT_KINDS = ("server_args", "ready", "cuda_graph_end", "sigterm")


def assemble(
    engine: Engine,
    claims: Claims,
    raw_lines: pl.DataFrame,
    *,
    total_lines: int,
    blank: tuple[int, ...] | list[int],
    too_long: tuple[tuple[int, int], ...] | list[tuple[int, int]],
    launches_before: int,
    outer_prefixes: tuple[tuple[int, str], ...] = (),
) -> ChunkResult:
    """Build the table frames of one chunk. `raw_lines` is (line_no, raw) for every physical line of the chunk."""
    patterns = {c.name: c.pattern for c in engine.patterns}
    launch_starts = sorted(
        line_no for name, frame in claims.frames.items() if is_server_args(patterns[name]) for line_no in frame["line_no"].to_list()
    )

    # 1. error records out of heads / frames / ends and the unclaimed or blank lines around them
    error_frames = {name: frame for name, frame in claims.frames.items() if patterns[name].table == ERRORS_TABLE}
    records, continuation_keys, orphan_keys = _group_errors(engine, claims, error_frames, blank, raw_lines)

    # 2. typed tables
    by_table: dict[str, list[pl.DataFrame]] = {}
    for name, frame in claims.frames.items():
        table = patterns[name].table
        if table == ERRORS_TABLE:
            continue
        table = TABLE_RENAMES.get(table, table)
        by_table.setdefault(table, []).append(frame)
    tables = {  # each pattern's frame is in line order already; several patterns' frames need a merge
        table: frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed").sort(["line_no", "piece"])
        for table, frames in by_table.items()
    }
    if records:
        tables[ERRORS_TABLE] = _errors_frame(records, raw_lines)

    # 3. server_args name/value rows
    if claims.server_args_text:
        header_frames = [frame for name, frame in claims.frames.items() if is_server_args(patterns[name])]
        tables["server_args"] = _server_args_frame(claims, header_frames)

    # 4. line accounting: every physical line is parsed, continuation or unparsed
    claimed = [
        frame.get_column("line_no")
        for name, frame in claims.frames.items()
        if patterns[name].table != ERRORS_TABLE or _is_head(patterns[name])
    ]
    continuation_lines = {line for line, _ in continuation_keys}
    parsed = pl.concat(claimed).unique() if claimed else pl.Series("line_no", [], dtype=pl.Int64)
    if continuation_lines:
        parsed = parsed.filter(~parsed.is_in(list(continuation_lines)))
    unparsed_rows: list[tuple[int, str]] = []
    seen_unparsed: set[int] = set()
    for line_no, piece, _text, prefixed in claims.unclaimed.iter_rows():
        if (line_no, piece) in continuation_keys or line_no in seen_unparsed:
            continue
        seen_unparsed.add(line_no)
        unparsed_rows.append((line_no, REASON_UNMATCHED_SGLANG if prefixed else REASON_UNMATCHED))
    for line_no, _piece in sorted(orphan_keys):
        if line_no not in seen_unparsed:
            seen_unparsed.add(line_no)
            unparsed_rows.append((line_no, REASON_ORPHAN_FRAME))
    for line_no in blank:
        if line_no not in continuation_lines:
            unparsed_rows.append((line_no, REASON_EMPTY))
    for line_no, size in too_long:
        unparsed_rows.append((line_no, f"line too long to parse ({size:,} bytes; its text is kept whole)"))
    if unparsed_rows:
        frame = _unparsed_frame(unparsed_rows, raw_lines)
        fragment = frame.get_column("line_no").is_in(parsed.implode()) | frame.get_column("line_no").is_in(list(continuation_lines))
        if fragment.any():
            frame = frame.with_columns(
                pl.when(fragment).then(pl.col("reason") + _FRAGMENT).otherwise(pl.col("reason")).alias("reason")
            )
        tables["unparsed_lines"] = frame
    continuation_only = len(continuation_lines)  # a line with a continuation piece counts as continuation
    parsed_count = parsed.len()
    unparsed_count = total_lines - parsed_count - continuation_only

    # 5. what a capture tool put before the text (docker compose service, Ray actor, kubectl pod, journald unit, …)
    if outer_prefixes:
        tables["outer_prefixes"] = pl.DataFrame(
            [(line_no, 0, prefix) for line_no, prefix in outer_prefixes],
            schema={"line_no": pl.Int64, "piece": pl.Int32, "prefix": pl.Utf8}, orient="row",
        )

    # 6. secrets never stored: the text kept and the server arguments, redacted (speclogs.redact)
    tables = redacted(tables)

    # 7. launch numbers for every table
    for table, frame in tables.items():
        tables[table] = _with_launch(frame, launch_starts, launches_before).drop("piece", strict=False)

    return ChunkResult(
        tables=tables,
        total_lines=total_lines,
        parsed_lines=parsed_count,
        continuation_lines=continuation_only,
        unparsed_lines=unparsed_count,
        prefixed_pieces=claims.prefixed_pieces,
        launch_starts=launch_starts,
        near_miss_counts=dict(claims.near_miss_counts),
        near_misses=list(claims.near_misses),
        run_facts=_run_facts(tables),
        launch_facts=_launch_facts(tables),
    )


# The text a row keeps of its line, where a secret could be (typed numbers and the batch lines' labels cannot hold one).
FREE_TEXT_TABLES = frozenset({"server_events", "foreign_lines", "nccl_events", "bench_summary", "errors", "unparsed_lines",
                              "outer_prefixes", "http_requests", "spec_cycles"})


def redacted(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """The tables with every secret the text holds replaced by <redacted>: a server argument by its name, any text
    column by what redact_line finds (only the few rows its cheap test picks are looked at in Python)."""
    out = {}
    for table, frame in tables.items():
        if table == "server_args" and frame.height:
            secret = frame.get_column("name").map_elements(secret_name, return_dtype=pl.Boolean)
            if secret.any():
                frame = frame.with_columns(
                    pl.when(secret & pl.col("value").is_not_null() & ~pl.col("value").is_in(["None", "''", '""']))
                    .then(pl.lit(REDACTED)).otherwise(pl.col(column)).alias(column) for column in ("value",)
                ).with_columns(
                    pl.when(secret & pl.col("value_json").is_not_null() & (pl.col("value_json") != "null"))
                    .then(pl.lit('"' + REDACTED + '"')).otherwise(pl.col("value_json")).alias("value_json")
                )
        elif table in FREE_TEXT_TABLES and frame.height:
            columns = [name for name, dtype in frame.schema.items() if dtype == pl.Utf8]
            frame = frame.with_columns(_redacted_column(frame.get_column(name)) for name in columns)
        out[table] = frame
    return out


def _redacted_column(texts: pl.Series) -> pl.Series:
    suspect = texts.str.contains(SUSPECT.pattern).fill_null(False)
    if not suspect.any():
        return texts
    at = suspect.arg_true()
    return texts.scatter(at, pl.Series([redact_line(text) for text in texts.gather(at).to_list()], dtype=pl.Utf8))


def _launch_facts(tables: dict[str, pl.DataFrame]) -> list[tuple[int, str, object]]:
    """The few timestamped events launches are summarised by: server_args, ready, cuda_graph_end, sigterm, /health 200.

    Launches use only the earliest and latest time of each event, so a chunk reports just those two per
    (launch_no, event) rather than a tuple for every /health request."""
    parts: list[pl.DataFrame] = []
    events = tables.get("server_events")
    if events is not None and "kind" in events.columns and "ts" in events.columns:
        picked = events.filter(pl.col("kind").is_in(LAUNCH_EVENT_KINDS) & pl.col("ts").is_not_null())
        parts.append(picked.select("launch_no", pl.col("kind").alias("fact"), "ts"))
    http = tables.get("http_requests")
    if http is not None and {"path", "status", "ts"} <= set(http.columns):
        health = http.filter(pl.col("path").str.starts_with("/health") & (pl.col("status") == 200) & pl.col("ts").is_not_null())
        parts.append(health.select("launch_no", pl.lit("health_200").alias("fact"), "ts"))
    if not parts:
        return []
    spans = (
        pl.concat(parts)
        .group_by("launch_no", "fact")
        .agg(pl.col("ts").min().alias("first_ts"), pl.col("ts").max().alias("last_ts"))
        .sort("launch_no", "fact")
    )
    facts: list[tuple[int, str, object]] = []
    for launch_no, fact, first_ts, last_ts in spans.rows():
        facts.append((launch_no, fact, first_ts))
        if last_ts != first_ts:
            facts.append((launch_no, fact, last_ts))
    return facts


def _is_head(pattern) -> bool:
    return pattern.constants.get(ROLE_COLUMN, HEAD) == HEAD


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
        for key in self.pending:
            self.members.append(key)
            continuation.add(key)
        self.pending.clear()
        self.members.append((line_no, piece))
        continuation.add((line_no, piece))
        self.last_line = line_no


def _group_errors(
    engine: Engine,
    claims: Claims,
    error_frames: dict[str, pl.DataFrame],
    blank,
    raw_lines: pl.DataFrame,
) -> tuple[list[_Record], set[tuple[int, int]], set[tuple[int, int]]]:
    """Multi-line error records. Rules (see the module docstring): a head opens a record; frames, the exception
    line, and unrecognised text before the exception line continue it while adjacent; blank lines are kept
    only when the record continues after them; a bare 'Traceback (most recent call last):' right after an
    open record (or after a chained-exception line) continues it, and right after a recognised SGLang line
    (e.g. 'ERROR:    Exception in ASGI application') makes that line the record's first line."""
    events: list[tuple[int, int, str, dict, str]] = []
    scopes = {c.name: c.pattern.scope for c in engine.patterns}
    unclaimed = claims.unclaimed
    for name, frame in error_frames.items():
        for row in frame.iter_rows(named=True):
            events.append((row["line_no"], row["piece"], row.get(ROLE_COLUMN) or HEAD, row, scopes[name]))
    if not events:
        return [], set(), set()
    for line_no, piece, _text, prefixed in unclaimed.iter_rows():
        if not prefixed:
            events.append((line_no, piece, "text", {}, "line"))
    for line_no in blank:
        events.append((line_no, 0, "blank", {}, "line"))
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
                             continuation) -> None:
    """'[ts] ERROR:    Exception in ASGI application' + 'Traceback …': the SGLang line is where the record begins."""
    wanted = {record.members[0][0] - 1 for record in bare_heads if record.members[0][1] == 0}
    raw = dict(raw_lines.filter(pl.col("line_no").is_in(list(wanted))).iter_rows())
    prefixed: dict[int, dict] = {}  # line_no → the prefix columns of the SGLang line there
    for name, frame in claims.frames.items():
        if engine.pattern(name).pattern.scope != "message" or not frame.height:
            continue
        for row in frame.filter(pl.col("line_no").is_in(list(wanted)) & (pl.col("piece") == 0)).select(
            "line_no", "ts", "ts_text", "rank_tags", "tp_rank"
        ).iter_rows(named=True):
            prefixed[row["line_no"]] = row
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


def _errors_frame(records: list[_Record], raw_lines: pl.DataFrame) -> pl.DataFrame:
    wanted = sorted({line for record in records for line, _ in record.members})
    raw = dict(raw_lines.filter(pl.col("line_no").is_in(wanted)).iter_rows())
    rows = []
    for record in records:
        head = record.head
        lines = sorted({line for line, _ in record.members})
        first_piece = min(record.members)[1]
        texts = [raw.get(line, "") for line in lines]
        rows.append(
            {
                "line_no": lines[0],
                "piece": first_piece,
                "last_line_no": lines[-1],
                "ts": head.get("ts"),
                "ts_text": head.get("ts_text"),
                "tp_rank": head.get("tp_rank"),
                "rank_tags": head.get("rank_tags"),
                "kind": head.get("kind") or "traceback",
                "first_line": texts[0],
                "last_line": texts[-1],
                "exception_type": record.exception_type or head.get("exception_type"),
                "text": "\n".join(texts),
                "exception_message": record.exception_message or head.get("exception_message"),
                "component": head.get("component"),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "line_no": pl.Int64,
            "piece": pl.Int32,
            "last_line_no": pl.Int64,
            "ts": pl.Datetime("us"),
            "ts_text": pl.Utf8,
            "tp_rank": pl.Int32,
            "rank_tags": pl.Utf8,
            "kind": pl.Utf8,
            "first_line": pl.Utf8,
            "last_line": pl.Utf8,
            "exception_type": pl.Utf8,
            "text": pl.Utf8,
            "exception_message": pl.Utf8,
            "component": pl.Utf8,
        },
        orient="row",
    )


def _server_args_frame(claims: Claims, header_frames: list[pl.DataFrame]) -> pl.DataFrame:
    ts_by_key: dict[tuple[int, int], object] = {}
    for frame in header_frames:
        if "ts" in frame.columns:
            for line_no, piece, ts in frame.select("line_no", "piece", "ts").iter_rows():
                ts_by_key[(line_no, piece)] = ts
    columns: dict[str, list] = {"line_no": [], "piece": [], "ts": [], "name": [], "value": [], "value_json": []}
    for (line_no, piece), message in sorted(claims.server_args_text.items()):
        body = message.split("=", 1)[1] if "=" in message else message
        parsed = _parsed_server_args(body)
        count = len(parsed)
        columns["line_no"] += [line_no] * count
        columns["piece"] += [piece] * count
        columns["ts"] += [ts_by_key.get((line_no, piece))] * count
        columns["name"] += [name for name, _, _ in parsed]
        columns["value"] += [text for _, text, _ in parsed]
        columns["value_json"] += [value for _, _, value in parsed]
    return pl.DataFrame(
        columns,
        schema={"line_no": pl.Int64, "piece": pl.Int32, "ts": pl.Datetime("us"), "name": pl.Utf8, "value": pl.Utf8, "value_json": pl.Utf8},
    )


_SERVER_ARGS_CACHE: dict[str, list] = {}


def _parsed_server_args(body: str) -> list:
    """parse_server_args, remembered per text (the same configuration is dumped again at every restart)."""
    cached = _SERVER_ARGS_CACHE.get(body)
    if cached is None:
        if len(_SERVER_ARGS_CACHE) > 256:
            _SERVER_ARGS_CACHE.clear()
        cached = _SERVER_ARGS_CACHE[body] = [
            (name, text, to_json_text(value, text)) for name, text, value in parse_server_args(body)
        ]
    return cached


def to_json_text(value: object, repr_text: str | None = None) -> str | None:
    """A Python literal as JSON text for a JSON column (non-finite floats as strings); None when unknown."""
    if value is None:
        return "null" if repr_text == "None" else None
    try:
        return json.dumps(_json_safe(value), allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(str(value))


def _json_safe(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _unparsed_frame(rows: list[tuple[int, str]], raw_lines: pl.DataFrame) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema={"line_no": pl.Int64, "reason": pl.Utf8}, orient="row").sort("line_no")
    frame = frame.join(raw_lines, on="line_no", how="left", maintain_order="left")
    return frame.with_columns(
        pl.col("raw").fill_null(""),
        pl.lit(0, dtype=pl.Int32).alias("piece"),
    )


def _with_launch(frame: pl.DataFrame, launch_starts: list[int], launches_before: int) -> pl.DataFrame:
    if not launch_starts or (len(launch_starts) == 1 and launches_before == 0):
        # a single launch in view (lines before the first server_args belong to launch 1)
        return frame.with_columns(pl.lit(max(1, launches_before), dtype=pl.Int32).alias("launch_no"))
    if launch_starts:
        starts = pl.Series("starts", launch_starts, dtype=pl.Int64)
        within = starts.search_sorted(frame.get_column("line_no"), side="right").cast(pl.Int32)
        launch = (within + launches_before).clip(lower_bound=1)
    else:
        launch = pl.Series([max(1, launches_before)] * frame.height, dtype=pl.Int32)
    return frame.with_columns(launch.alias("launch_no").cast(pl.Int32))


def _run_facts(tables: dict[str, pl.DataFrame]) -> dict[str, object]:
    """What a log says about its run: model path, speculative algorithm, TP size (first launch), host."""
    facts: dict[str, object] = {}
    server_args = tables.get("server_args")
    if server_args is not None and server_args.height:
        first_line = server_args.get_column("line_no")[0]
        wanted = {"model_path", "speculative_algorithm", "tp_size"}
        values: dict[str, object] = {}
        rows = zip(
            server_args.get_column("line_no").to_list(),
            server_args.get_column("name").to_list(),
            server_args.get_column("value_json").to_list(),
        )
        for line_no, name, value_json in rows:
            if line_no != first_line:
                break
            if name in wanted and value_json is not None:
                values[name] = json.loads(value_json)
        facts["model_path"] = values.get("model_path")
        facts["speculative_algorithm"] = values.get("speculative_algorithm")
        tp_size = values.get("tp_size")
        facts["tp_size"] = tp_size if isinstance(tp_size, int) else None
    nccl = tables.get("nccl_events")
    if nccl is not None and "host" in nccl.columns:
        hosts = nccl.get_column("host").drop_nulls()
        if hosts.len():
            facts["hostname"] = hosts[0]
    return facts
