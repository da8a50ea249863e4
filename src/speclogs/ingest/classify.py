"""Classify pieces of text with the grammars' compiled regexes: `Claims`, one frame per pattern with the typed
values of the pieces it claimed (first matching pattern wins), plus the pieces nobody claimed.

SGLang's prefix is split off every line that has it; on the other lines a message pattern with a distinctive gate
finds its message wherever it starts after a blank, and what stands before it is read by the other prefix grammars
(or kept as a new prefix shape: drift). Then one scope at a time, in priority order, each pattern's gate literal
selects candidate rows, its regex (with an empty `_hit` group) runs on those only, and claimed rows leave the set.
A piece that passes a gate, fails its regex and ends up with a more generic pattern or none is a near miss (drift).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from speclogs.errors import GrammarError
from speclogs.grammar import GrammarSet, Pattern, cast_expr, split_rank_tags
from speclogs.grammar.fields import FIELDS_SLOT, OUTPUT_COLUMNS as FIELD_LIST_TYPES
from speclogs.ingest.lines import Wrappers, wrappers_of

RANK_COLUMNS = ("dp_rank", "tp_rank", "pp_rank", "ep_rank", "attn_cp_rank", "moe_dp_rank")
_COMPACT_BELOW = 0.7  # compact the working set when fewer than this share of its rows are still unclaimed
_PRESENCE_BELOW_ROWS = 20_000  # from this few rows on, find the gates that occur with one multi-literal search
NEAR_MISS_GATE_CHARS = 3  # a gate with fewer non-blank characters ('', '] ', ':  ') says nothing of what a line is

_DTYPES = {"int": pl.Int64, "float": pl.Float64, "pct": pl.Float64, "bool": pl.Boolean, "str": pl.Utf8}
_TS_FORMAT = "%Y-%m-%d %H:%M:%S"
NEW_PREFIX = "new prefix: "  # a drift entry's name for a prefix no prefix grammar reads, before its shape
# What a prefix no grammar reads may still say: a date and time (ISO 8601 or with a blank), SGLang's rank tags.
_ANY_TS = r"(?P<day>[0-9]{4}-[0-9]{2}-[0-9]{2})[ T](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,](?P<frac>[0-9]+))?"
_ANY_RANK_TAG = r"\b(?:ATTN_CP|MOE_DP|DP|TP|PP|EP)-?[0-9]+\b"


@dataclass(frozen=True)
class CompiledPattern:
    pattern: Pattern
    hit_regex: str
    # the typed frame's columns after line_no and piece: (name, dtype, source, constant), source one of "meta" (a
    # prefix column), "value" (a field), "constant", "text" (the matched text)
    columns: tuple[tuple[str, pl.DataType, str, object], ...]

    @property
    def name(self) -> str:
        return self.pattern.name

    @property
    def schema(self) -> dict[str, pl.DataType]:
        return {name: dtype for name, dtype, _, _ in self.columns}


@dataclass(frozen=True)
class Engine:
    """A GrammarSet compiled for classification."""

    grammars: GrammarSet
    prefix_regex: str  # '^(?P<_pfx>…)' capturing the prefix span (not the message) plus ts/ms/rank_tags
    patterns: tuple[CompiledPattern, ...]
    scopes: tuple[tuple[str, tuple[CompiledPattern, ...], tuple[str, ...]], ...]  # (scope, its patterns, their gates)
    by_name: dict[str, CompiledPattern]
    drift_winners: dict[str, frozenset[str]]  # pattern → the more generic ones whose claiming its near misses is drift
    wrappers: Wrappers
    finders: tuple[tuple[str, str, bool], ...]  # (gate, regex, at_gate) of each message pattern that finds its message
    prefix_heads: tuple[str, ...]  # each prefix grammar's regex without its message: it must read a whole prefix

    def pattern(self, name: str) -> CompiledPattern:
        return self.by_name[name]


@dataclass
class Claims:
    """The classification of one chunk's pieces."""

    frames: dict[str, pl.DataFrame]  # pattern name → line_no, piece, prefix columns (message scope), fields, constants
    unclaimed: pl.DataFrame  # line_no, piece, text, prefixed (Boolean)
    prefixed: pl.Series  # line_no of every piece read as (prefix, message)
    drift: pl.DataFrame  # line_no, piece, pattern, text: pieces that look like a pattern's lines but went elsewhere
    server_args_text: dict[tuple[int, int], str] = field(default_factory=dict)  # (line_no, piece) → message
    prefixes: pl.DataFrame | None = None  # line_no, piece, prefix: the prefixes other than SGLang's, as printed


def compile_engine(grammars: GrammarSet) -> Engine:
    regex = grammars.prefix.regex
    cut = regex.find("(?P<message>")
    if cut < 0 or not regex.startswith("^"):
        raise GrammarError(f"the prefix grammar ({grammars.prefix.source or 'prefix'}) must be anchored and end with a message capture",
                           hint="its template must end with {message}")
    patterns = tuple(CompiledPattern(p, "^(?P<_hit>)" + p.regex.removeprefix("^"), _columns(p)) for p in grammars.patterns)
    # a near miss is drift when a strictly more generic pattern (its gate inside the near miss's) claims the piece
    drift_winners = {c.name: frozenset(w.name for w in patterns if w.pattern.scope == c.pattern.scope
                                       and w.pattern.gate != c.pattern.gate and w.pattern.gate in c.pattern.gate)
                     for c in patterns}
    scopes = tuple((name, own, tuple(dict.fromkeys(c.pattern.gate for c in own if c.pattern.gate)))
                   for name in ("message", "line") for own in [tuple(c for c in patterns if c.pattern.scope == name)])
    # A prefix is anything up to a blank: a message found mid-word is not one. A message that starts with its
    # pattern's gate starts where the gate first occurs: a literal split finds it, and an anchored match (no
    # captures) tests it; the others are searched for with a lazy prefix group.
    finders = tuple((p.gate, p.regex, True) if p.template.startswith(p.gate) else (p.gate, "^(?P<_pfx>.*?[ \t])" + p.regex[1:], False)
                    for p in grammars.patterns if p.scope == "message" and distinctive_gate(p.gate))
    heads = tuple("^(?P<_hit>)" + p.regex[1:p.regex.find("(?P<message>")] + "$" for p in grammars.prefixes)
    return Engine(grammars=grammars, prefix_regex="^(?P<_pfx>" + regex[1:cut] + ")", patterns=patterns, scopes=scopes,
                  by_name={c.name: c for c in patterns}, drift_winners=drift_winners, wrappers=wrappers_of(grammars.wrappers),
                  finders=finders, prefix_heads=heads)


def _columns(p: Pattern) -> tuple[tuple[str, pl.DataType, str, object], ...]:
    """(name, dtype, source, constant) of each column of a pattern's typed frame, in order."""
    columns: dict[str, tuple[pl.DataType, str, object]] = {}
    if p.scope == "message":
        columns.update({"ts": (pl.Datetime("us"), "meta", None), "ts_text": (pl.Utf8, "meta", None),
                        "rank_tags": (pl.Utf8, "meta", None)})
        columns.update((name, (pl.Int32, "meta", None)) for name in RANK_COLUMNS)
    columns.update((name, (dtype, "value", None)) for name, dtype in _value_types(p).items())
    for name, value in p.constants.items():
        columns.setdefault(name, ({bool: pl.Boolean, int: pl.Int64, float: pl.Float64}.get(type(value), pl.Utf8), "constant", value))
    for name in p.derive({}) if p.derive is not None else ():
        columns.setdefault(name, (pl.Int32 if name.endswith("_rank") else pl.Utf8, "value", None))
    if p.text_column is not None:
        columns[p.text_column] = (pl.Utf8, "text", None)
    return tuple((name, *source) for name, source in columns.items())


def _value_types(p: Pattern) -> dict[str, pl.DataType]:
    """The typed values a pattern's rows carry: its fields, a field list's columns in place of the list."""
    types = {f.name: _DTYPES.get(f.type, pl.Utf8) for f in p.fields if p.field_list is None or f.name != FIELDS_SLOT}
    for name in p.field_list.columns if p.field_list is not None else ():
        types[name] = _DTYPES.get(FIELD_LIST_TYPES.get(name) or p.field_list.types.get(name, "str"), pl.Utf8)
    return types


def is_server_args(pattern: Pattern) -> bool:  # the `server_args=…` dump, where launches begin
    return pattern.constants.get("kind") == "server_args" or pattern.table == "server_args_header" or pattern.family == "server_args"


def distinctive_gate(gate: str) -> bool:
    """Whether passing `gate` makes a line look like the pattern's: only then is failing its regex a near miss."""
    return len(gate.strip()) >= NEAR_MISS_GATE_CHARS


def explain_miss(pattern: Pattern, text: str) -> str:
    """pyparsing's own account of why `text` is not a `pattern` line (exact column and expected element)."""
    import pyparsing as pp

    try:
        pattern.element.parse_string(text, parse_all=True)
    except pp.ParseBaseException as error:
        return f"{error.msg} at col {error.col}"
    return "the compiled regex rejects it but pyparsing accepts it (grammar compiler bug)"


def repeat(value: object, n: int, dtype: pl.DataType, name: str = "") -> pl.Series:  # far cheaper than pl.repeat
    return pl.Series(name, [value], dtype=dtype).new_from_index(0, n)


def classify(engine: Engine, pieces: pl.DataFrame, file_starts: tuple[int, ...] = (1,)) -> Claims:
    """Classify the piece frame (line_no, piece, text) of a chunk whose files start at the lines `file_starts`."""
    groups = pieces.get_column("text").str.extract_groups(engine.prefix_regex).struct.unnest()
    prefixed = groups.get_column("_pfx").is_not_null()
    prefix_groups = groups.filter(prefixed)
    message = pieces.get_column("text").filter(prefixed).str.slice(prefix_groups.get_column("_pfx").str.len_chars())
    heads = pieces.filter(prefixed).select("line_no", "piece").with_columns(
        message.alias("message"), prefix_groups.get_column("ts").alias("ts_text"),
        prefix_groups.get_column("ms").alias("frac"), prefix_groups.get_column("rank_tags"))
    others = _find_messages(engine, pieces.filter(~prefixed))
    if others is not None:
        heads = pl.concat([heads, others.drop("prefix", "shape")]).sort("line_no", "piece")
        prefixed = prefixed.scatter(pieces.with_row_index("at").join(others, on=["line_no", "piece"]).get_column("at"), True)
    ts = heads.get_column("ts_text").str.to_datetime(_TS_FORMAT, strict=False, time_unit="us").alias("ts")
    ts, ts_text = _dated(heads, ts, file_starts) if ts.null_count() else (ts, repeat(None, ts.len(), pl.Utf8, "ts_text"))
    frac = heads.get_column("frac")
    if frac.null_count() < frac.len():  # the fraction of a second as printed: milliseconds, microseconds, …
        micros = frac.str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int64, strict=False).fill_null(0)
        ts = ts + pl.select(pl.duration(microseconds=micros)).to_series()
    msg_meta = _with_ranks(heads.select("line_no", "piece", ts, ts_text, pl.col("rank_tags").fill_null("")))
    line_rows = pieces.filter(~prefixed)
    inputs = {"message": (heads.get_column("message").alias("src"), msg_meta),
              "line": (line_rows.get_column("text").alias("src"), line_rows.select("line_no", "piece"))}
    found = _Found(eligible=set().union(*engine.drift_winners.values()))
    unclaimed = pl.concat(_classify_scope(patterns, gates, *inputs[name], found).with_columns(pl.lit(name == "message").alias("prefixed"))
                          for name, patterns, gates in engine.scopes).sort(["line_no", "piece"])
    if unclaimed.filter(pl.col("prefixed")).height:  # an unclaimed message's text is its whole piece, prefix included
        full = pieces.select("line_no", "piece", pl.col("text").alias("full"))
        unclaimed = unclaimed.join(full, on=["line_no", "piece"], how="left", maintain_order="left").with_columns(
            pl.when(pl.col("prefixed")).then(pl.col("full")).otherwise(pl.col("text")).alias("text")).drop("full")
    drift = _drift(engine, found.near_ids, found.winners, unclaimed)
    if others is not None and others.get_column("shape").null_count() < others.height:
        new = others.filter(pl.col("shape").is_not_null()).join(pieces, on=["line_no", "piece"])
        drift = pl.concat([drift, new.select("line_no", "piece", (NEW_PREFIX + pl.col("shape")).alias("pattern"), "text")])
    return Claims(frames=found.frames, unclaimed=unclaimed, prefixed=heads.get_column("line_no"), drift=drift,
                  server_args_text=found.server_args_text, prefixes=None if others is None else others.select("line_no", "piece", "prefix"))


@dataclass
class _Found:  # what classifying the scopes of one chunk found, pattern by pattern
    eligible: set[str]  # patterns whose claims can make another pattern's near miss drift
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    near_ids: dict[str, pl.DataFrame] = field(default_factory=dict)  # line_no, piece, src
    winners: dict[str, pl.DataFrame] = field(default_factory=dict)  # line_no, piece
    server_args_text: dict[tuple[int, int], str] = field(default_factory=dict)


def _classify_scope(patterns: tuple[CompiledPattern, ...], gates: tuple[str, ...], src: pl.Series, meta: pl.DataFrame,
                    found: _Found) -> pl.DataFrame:
    work = _Work(src, meta, gates)
    for compiled, candidates, at in work.each(patterns, lambda compiled: compiled.pattern.gate):
        extracted = work.src.gather(at).str.extract_groups(compiled.hit_regex)
        hit = extracted.struct.field("_hit").is_not_null()
        rows = work.rows.gather(at)
        hits = int(hit.sum())
        if hits:
            values = (extracted.filter(hit) if hits < at.len() else extracted).struct.unnest()
            values = values.select(cast_expr(pl.col(f.name), f.type) for f in compiled.pattern.fields if f.name in values.columns)
            matched, texts = work.meta.gather(rows.filter(hit)), work.src.gather(at.filter(hit))
            found.frames[compiled.name] = _typed_frame(compiled, matched, values, texts)
            if compiled.name in found.eligible:
                found.winners[compiled.name] = matched.select("line_no", "piece")
            if is_server_args(compiled.pattern):
                found.server_args_text.update(zip(matched.select("line_no", "piece").iter_rows(), texts.to_list()))
        if hits < at.len() and distinctive_gate(compiled.pattern.gate):
            missed = ~hit
            found.near_ids[compiled.name] = work.meta.gather(rows.filter(missed)).select("line_no", "piece").with_columns(
                work.src.gather(at.filter(missed)).alias("src"))
        work.claim(candidates, hit)
    left = work.meta.gather(work.rows.filter(work.alive)).select("line_no", "piece")
    return left.with_columns(work.src.filter(work.alive).alias("text"))


class _Work:
    """The rows of one scope still to classify: their text (`src`) and index into the scope's metadata (`rows`);
    compacted when enough were claimed. Once few rows are left, one multi-literal search finds which gates occur in
    them at all, so the patterns whose gate does not occur (most, in most chunks) cost no pass of their own."""

    def __init__(self, src: pl.Series, meta: pl.DataFrame, gates: tuple[str, ...]) -> None:
        self.src = src.alias("src")
        self.meta = meta
        self.rows = pl.int_range(0, meta.height, dtype=pl.UInt32, eager=True)
        self.alive = repeat(True, meta.height, pl.Boolean)
        self.alive_count = meta.height
        self._all_gates = gates
        self._gates: dict[str, pl.Series] = {}
        self._present: frozenset[str] | None = None
        self._find_present()

    def each(self, items, gate_of):
        """(item, its candidates: the alive rows that contain its gate, their positions in `src`) for each item whose
        gate some row contains, while rows are left; the caller claims the rows it takes."""
        for item in items:
            gate = gate_of(item)
            if self.alive_count == 0:
                return
            if gate and (self._present is None or gate in self._present) and gate not in self._gates:
                self._gates[gate] = self.src.str.contains(gate, literal=True)
            candidates = self.alive & self._gates[gate] if gate in self._gates else None if gate else self.alive
            if candidates is not None and candidates.any():
                yield item, candidates, candidates.arg_true()

    def claim(self, candidates: pl.Series, hit: pl.Series) -> None:
        claimed = repeat(False, self.src.len(), pl.Boolean).scatter(candidates.arg_true(), hit)
        self.alive = self.alive & ~claimed
        self.alive_count = int(self.alive.sum())
        if self.alive_count < _COMPACT_BELOW * self.src.len():
            keep = self.alive
            self.src = self.src.filter(keep)
            self.rows = self.rows.filter(keep)
            self._gates = {gate: mask.filter(keep) for gate, mask in self._gates.items()}
            self.alive = repeat(True, self.alive_count, pl.Boolean)
            self._find_present()

    def _find_present(self) -> None:
        if self._present is not None or self.src.len() > _PRESENCE_BELOW_ROWS or not self._all_gates:
            return
        found = self.src.str.extract_many(list(self._all_gates), overlapping=True)
        self._present = frozenset(found.explode().drop_nulls().unique().to_list())


def _find_messages(engine: Engine, rows: pl.DataFrame) -> pl.DataFrame | None:
    """The lines without SGLang's prefix on which a message pattern finds its message after another prefix."""
    if not rows.height or not engine.finders:
        return None
    work = _Work(rows.get_column("text"), rows.select("line_no", "piece"), tuple(dict.fromkeys(g for g, _, _ in engine.finders)))
    parts = []
    for (gate, regex, at_gate), candidates, at in work.each(engine.finders, lambda finder: finder[0]):
        text = work.src.gather(at)
        if at_gate:
            split = text.str.splitn(gate, 2).struct.unnest()
            prefix = split.get_column("field_0")
            message = gate + split.get_column("field_1")
            hit = (prefix.str.ends_with(" ") | prefix.str.ends_with("\t")) & message.str.contains(regex)
        else:
            prefix = text.str.extract_groups(regex).struct.field("_pfx")
            hit = prefix.is_not_null()
            message = text.str.slice(prefix.str.len_chars().fill_null(0))
        if hit.any():
            parts.append(work.meta.gather(work.rows.gather(at).filter(hit)).with_columns(
                prefix.filter(hit).alias("prefix"), message.filter(hit).alias("message")))
        work.claim(candidates, hit)
    if not parts:
        return None
    found = pl.concat(parts)
    return pl.concat([found, _read_prefixes(engine, found.get_column("prefix"))], how="horizontal")


def _read_prefixes(engine: Engine, prefix: pl.Series) -> pl.DataFrame:
    """ts_text, frac, rank_tags of each prefix by the first prefix grammar that reads all of it; else what it shows
    of a time and rank tags, and its shape (digits as <n>) to name it by in the drift view."""
    empty = prefix.clear(prefix.len())
    out = pl.DataFrame({"ts_text": empty, "frac": empty, "rank_tags": empty, "shape": empty})
    left = pl.int_range(0, prefix.len(), dtype=pl.UInt32, eager=True)
    for regex in engine.prefix_heads:
        if not left.len():
            break
        hit = prefix.gather(left).str.contains(regex)  # a match test first: most prefixes fail most grammars
        if hit.any():
            at = left.filter(hit)
            read = prefix.gather(at).str.extract_groups(regex).struct.unnest()
            for column, names in (("ts_text", ("ts",)), ("frac", ("frac", "ms")), ("rank_tags", ("rank_tags",))):
                name = next((n for n in names if n in read.columns), None)
                if name is not None:
                    out = out.with_columns(out.get_column(column).scatter(at, read.get_column(name).cast(pl.Utf8)))
            left = left.filter(~hit)
    if left.len():
        unknown = prefix.gather(left)
        ts = unknown.str.extract_groups(_ANY_TS).struct.unnest()
        tags = unknown.str.extract_all(_ANY_RANK_TAG).list.join(" ")
        out = out.with_columns(
            out.get_column("ts_text").scatter(left, ts.select(pl.concat_str("day", "time", separator=" ")).to_series()),
            out.get_column("frac").scatter(left, ts.get_column("frac")),
            out.get_column("rank_tags").scatter(left, pl.select(pl.when(tags != "").then(" " + tags)).to_series()),
            out.get_column("shape").scatter(left, unknown.str.replace_all("[0-9]+", "<n>")))
    # ISO 8601's T, and glog's MMDD, as the timestamps SGLang prints
    ts_text = out.get_column("ts_text").str.replace(r"^([0-9]{4}-[0-9]{2}-[0-9]{2})T", "${1} ").str.replace(
        r"^([0-9]{2})([0-9]{2}) ", "${1}-${2} ")
    return out.with_columns(ts_text)


def _dated(heads: pl.DataFrame, ts: pl.Series, file_starts: tuple[int, ...]) -> tuple[pl.Series, pl.Series]:
    """(ts, ts_text) when some timestamps did not type (ts_text: as printed, for those rows): a time without a date
    (≤0.3.0) gets the date of the nearest dated row of its file before it (a day later when the clock went back), else
    after it; a 'MM-DD HH:MM:SS' gets its year so; else ts stays NULL."""
    missing = ts.is_null()
    texts = heads.get_column("ts_text").filter(missing)
    file = pl.Series(file_starts, dtype=pl.Int64).search_sorted(heads.get_column("line_no"), side="right")
    frame = pl.DataFrame({"ts": ts, "file": file}).with_columns(
        pl.col("ts").forward_fill().over("file").alias("before"), pl.col("ts").backward_fill().over("file").alias("after")
    ).filter(missing).with_columns(texts.alias("ts_text"))
    time_only = pl.col("ts_text").str.len_chars() == 8
    month_day = pl.col("ts_text").str.len_chars() == 14
    reference = pl.coalesce("before", "after")
    with_date = (
        pl.when(time_only).then(reference.dt.strftime("%Y-%m-%d ") + pl.col("ts_text"))
        .when(month_day).then(reference.dt.strftime("%Y-") + pl.col("ts_text"))
        .otherwise(None)
        .str.to_datetime(_TS_FORMAT, strict=False, time_unit="us")
    )
    rolled = pl.when(time_only & pl.col("before").is_not_null() & (with_date < pl.col("before"))).then(
        with_date + pl.duration(days=1)).otherwise(with_date)
    resolved = frame.select(rolled.alias("ts"), "ts_text")
    at = missing.arg_true()
    return ts.scatter(at, resolved.get_column("ts")), repeat(None, ts.len(), pl.Utf8, "ts_text").scatter(at, resolved.get_column("ts_text"))


def _with_ranks(work: pl.DataFrame) -> pl.DataFrame:
    """Rank tags are few distinct strings: split each once (the grammar's own split) and map them; a rank no tag
    mentions (e.g. DP in a TP-only log) is a NULL column without a pass over the rows."""
    split = {tags: split_rank_tags(tags) for tags in work.get_column("rank_tags").unique().to_list()}
    mappings = {column: {tags: ranks.get(column) for tags, ranks in split.items()} for column in RANK_COLUMNS}
    return work.with_columns(
        pl.col("rank_tags").replace_strict(mapping, default=None, return_dtype=pl.Int32).alias(column)
        if any(value is not None for value in mapping.values()) else pl.lit(None, dtype=pl.Int32).alias(column)
        for column, mapping in mappings.items())


def _typed_frame(compiled: CompiledPattern, matched: pl.DataFrame, values: pl.DataFrame, texts: pl.Series) -> pl.DataFrame:
    """The claimed rows' typed frame, made of Series without a pass of polars' query engine (it runs per pattern)."""
    p = compiled.pattern
    if p.field_list is not None and FIELDS_SLOT in values.columns:  # the rare rows no shape took: read in Python
        read = [p.field_list.read(text or "") for text in values.get_column(FIELDS_SLOT).to_list()]
        types = _value_types(p)
        listed = {name: types[name] for name in p.field_list.columns}
        values = pl.concat([values.drop(FIELDS_SLOT), pl.DataFrame(read, schema=listed, orient="row")], how="horizontal")
    out = [matched.get_column("line_no").cast(pl.Int64), matched.get_column("piece").cast(pl.Int32)]
    for name, dtype, source, constant in compiled.columns:
        if source == "meta":
            column = matched.get_column(name)
        elif source == "text":
            column = texts
        elif source == "value" and name in values.columns:
            column = values.get_column(name)
        else:  # a constant, or a value whose group took no part (NULL)
            column = repeat(constant, matched.height, dtype, name)
        out.append(column.alias(name).cast(dtype))
    return pl.DataFrame(out)


def _drift(engine: Engine, near_ids: dict[str, pl.DataFrame], winners: dict[str, pl.DataFrame], unclaimed: pl.DataFrame) -> pl.DataFrame:
    """Gate passed, regex failed, and the piece went to a more generic pattern (or to none): drift."""
    parts = []
    unclaimed_keys = unclaimed.select("line_no", "piece")
    for name, ids in near_ids.items():
        ends = [winners[w] for w in engine.drift_winners.get(name, ()) if w in winners] + [unclaimed_keys]
        drift = ids.join(pl.concat(ends), on=["line_no", "piece"], how="semi")
        if drift.height:
            parts.append(drift.select("line_no", "piece", pl.lit(name).alias("pattern"), pl.col("src").alias("text")))
    if not parts:
        return pl.DataFrame(schema={"line_no": pl.Int64, "piece": pl.Int32, "pattern": pl.Utf8, "text": pl.Utf8})
    return pl.concat(parts).sort("pattern", "line_no", "piece")
