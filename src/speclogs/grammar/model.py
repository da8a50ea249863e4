"""The grammar data model: fields, patterns, the loaded set, and problems found by the validator."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from speclogs.errors import GrammarError

if TYPE_CHECKING:
    import polars as pl
    import pyparsing as pp

    from speclogs.grammar.fields import FieldList

FIELD_TYPES = ("int", "float", "bool", "str", "pct")
FIELD_ROLES = ("key", "measure", "label")
SCOPES = ("message", "line")

# The rank tags SGLang puts inside the prefix brackets, as (tag text, column).
# Longest tag first so that 'MOE_DP3' is never read as 'DP' by a consumer scanning left to right.
RANK_TAGS: tuple[tuple[str, str], ...] = (
    ("ATTN_CP", "attn_cp_rank"),
    ("MOE_DP", "moe_dp_rank"),
    ("DP", "dp_rank"),
    ("TP", "tp_rank"),
    ("PP", "pp_rank"),
    ("EP", "ep_rank"),
)

# One regex per rank column, to run on the prefix's `rank_tags` group (e.g. ' DP0 TP1'): group 1 is the rank.
# The leading '(?:^| )' keeps 'DP' from matching inside 'MOE_DP'.
RANK_TAG_REGEXES: dict[str, str] = {column: f"(?:^| ){tag}(-?[0-9]+)" for tag, column in RANK_TAGS}


@dataclass(frozen=True)
class Field:
    """One column a pattern fills: its type decides how the regex text is cast."""

    name: str
    type: str  # 'int' | 'float' | 'bool' | 'str' | 'pct'
    unit: str | None
    role: str  # 'key' | 'measure' | 'label'
    description: str = ""


@dataclass(frozen=True)
class GrammarProblem:
    """A validation failure, located at a line of a grammar file."""

    file: str
    line: int
    sample: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        if self.sample is None:
            return f"{where}: {self.message}"
        return f"{where}: {self.message}\n    sample: {self.sample}"


def cast_expr(raw: pl.Expr, type_name: str) -> pl.Expr:
    """A captured string → the field type's value, as every ingested row is cast (unparseable → NULL): int → BIGINT,
    float/pct → DOUBLE (the group never includes '%'), bool → 'True', str as is."""
    import polars as pl

    if type_name == "int":
        return raw.cast(pl.Int64, strict=False)
    if type_name == "float":
        return raw.cast(pl.Float64, strict=False)
    if type_name == "pct":
        return raw.str.strip_chars_end("%").cast(pl.Float64, strict=False)
    if type_name == "bool":
        return raw == "True"
    return raw.cast(pl.Utf8)


def split_rank_tags(rank_tags: str | None) -> dict[str, int | None]:
    """' DP0 TP1' → {'dp_rank': 0, 'tp_rank': 1, 'pp_rank': None, …} (the tags are an unordered set)."""
    ranks: dict[str, int | None] = {column: None for _, column in RANK_TAGS}
    for token in (rank_tags or "").split():
        for tag, column in RANK_TAGS:
            rest = token[len(tag):]
            if token.startswith(tag) and rest.lstrip("-").isdigit():
                ranks[column] = int(rest)
                break
    return ranks


# Columns computed from captured ones, by name (a grammar file says `derive = "rank_tags"`).
DERIVES: dict[str, Callable[[dict], dict]] = {"rank_tags": lambda values: split_rank_tags(values.get("rank_tags"))}


def bundled_grammar_dir() -> Path:
    """grammars/ at the repository root, or speclogs/_grammars inside an installed wheel."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[1] / "_grammars", here.parents[3] / "grammars"):
        if candidate.is_dir():
            return candidate
    raise GrammarError(
        "the bundled grammar files are missing (looked for speclogs/_grammars and <repo>/grammars)",
        hint="reinstall speclogs, or run from a checkout that has grammars/",
    )


@dataclass(frozen=True, eq=False)
class Sample:
    """A real line a pattern must parse, with the values it must give (`line_no` is its line in the grammar file)."""

    line: str
    expect: dict[str, object]
    line_no: int
    null: tuple[str, ...] = ()  # columns that must come out NULL


@dataclass(frozen=True, eq=False)
class CounterSample:
    """A line the pattern must NOT match; `claimed_by` names the pattern that should take it instead (or None)."""

    line: str
    claimed_by: str | None
    line_no: int


@dataclass(frozen=True, eq=False)
class Pattern:
    """One line shape: its pyparsing element (the definition), the regex compiled from it, and what it fills."""

    name: str
    family: str
    table: str
    scope: str
    gate: str
    regex: str  # the compiled form (anchored; polars runs it)
    build: Callable[[], pp.ParserElement] = field(repr=False)  # the pyparsing element, built when first asked for
    constants: dict[str, object] = field(default_factory=dict)
    fields: tuple[Field, ...] = ()
    description: str = ""
    versions: str = ""
    source: str = ""  # 'file:line' of the pattern's definition
    samples: tuple[Sample, ...] = ()
    counter_samples: tuple[CounterSample, ...] = ()
    # Columns computed from captured ones (the prefix's rank tags → dp_rank, tp_rank, …).
    derive: Callable[[dict], dict] | None = field(default=None, repr=False)
    group: str = ""  # the [[pattern]] name this one was expanded from (= name unless the pattern uses expand)
    text_column: str | None = None  # the column its rows keep the matched text in (the message, or the whole line)
    field_list: FieldList | None = None  # set when the template ends with {fields}: that text is read by its labels
    template: str = ""  # the template text the element was built from

    @property
    def element(self) -> pp.ParserElement:
        """The definition (`build` keeps it once built: an ingest runs only the regex, never pyparsing)."""
        return self.build()

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column a match fills: fields, constants, derived columns (a field list's columns for {fields})."""
        names = [name for name in self.field_names if self.field_list is None or name != "fields"]
        if self.field_list is not None:
            names += [name for name in self.field_list.columns if name not in names]
        names += [k for k in self.constants if k not in names]
        if self.derive is not None:
            names += [k for k in self.derive({}) if k not in names]
        return tuple(names)

    def finish(self, values: dict) -> dict:
        """Captured values (fields) → the row's values: the field list read, constants, derived columns."""
        if self.field_list is not None:
            values.update(self.field_list.read(values.pop("fields") or ""))
        values.update(self.constants)
        if self.derive is not None:
            values.update(self.derive(values))
        return values

    def parse(self, text: str) -> dict | None:
        """The definition: pyparsing over the whole text → typed dict (constants and derived columns included), or None."""
        import pyparsing as pp

        try:
            result = self.element.parse_string(text, parse_all=True)
        except pp.ParseBaseException:
            return None
        values: dict[str, object] = {}
        for f in self.fields:
            value = result.get(f.name)
            values[f.name] = value if value is None or not isinstance(value, pp.ParseResults) else value[0]
        return self.finish(values)


@dataclass(frozen=True, eq=False)
class GrammarSet:
    """Every loaded pattern. `prefix` splits an SGLang line; `patterns` are in priority order (first match wins);
    `prefixes` (SGLang's first) read what stands before a message found elsewhere on a line; `wrappers` are what
    capture tools put before a line."""

    prefix: Pattern
    patterns: list[Pattern]
    files: tuple[str, ...] = ()
    prefixes: tuple[Pattern, ...] = ()
    wrappers: tuple[Pattern, ...] = ()
    rank_tag_regexes: dict[str, str] = field(default_factory=lambda: dict(RANK_TAG_REGEXES))

    def for_scope(self, scope: str) -> list[Pattern]:
        return [p for p in self.patterns if p.scope == scope]

    def by_name(self, name: str) -> Pattern:
        for p in self.patterns:
            if p.name == name:
                return p
        if name == self.prefix.name:
            return self.prefix
        raise KeyError(name)

    def classify(self, text: str, scope: str) -> tuple[Pattern, dict] | None:
        """The definition over all patterns of `scope` (pyparsing): the first that parses the text, with its values."""
        for p in self.patterns:
            if p.scope != scope or (p.gate and p.gate not in text):
                continue
            values = p.parse(text)
            if values is not None:
                return p, values
        return None
