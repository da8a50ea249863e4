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

SCOPES = ("message", "line")

# The rank tags SGLang puts inside the prefix brackets, as (tag text, column); longest first, so that 'MOE_DP3' is
# never read as 'DP'.
RANK_TAGS: tuple[tuple[str, str], ...] = (
    ("ATTN_CP", "attn_cp_rank"), ("MOE_DP", "moe_dp_rank"), ("DP", "dp_rank"), ("TP", "tp_rank"), ("PP", "pp_rank"),
    ("EP", "ep_rank"),
)


@dataclass(frozen=True)
class Field:
    """One column a pattern fills: its type decides how the regex text is cast."""

    name: str
    type: str  # 'int' | 'float' | 'bool' | 'str' | 'pct'
    unit: str | None = None
    role: str = "measure"  # 'key' | 'measure' | 'label'
    shape: str | None = None  # what its placeholders match unless they name a shape (None: the type's own)
    description: str = ""


@dataclass(frozen=True)
class GrammarProblem:
    """A validation failure, located at a line of a grammar file."""

    file: str
    line: int
    sample: str | None
    message: str

    def __str__(self) -> str:
        shown = f"{self.file}:{self.line}: {self.message}"
        return shown if self.sample is None else f"{shown}\n    sample: {self.sample}"


def cast_expr(raw: pl.Expr, type_name: str) -> pl.Expr:
    """A captured string → the field type's value, as every ingested row is cast (unparseable → NULL): int → BIGINT,
    float/pct → DOUBLE (the group never includes '%'), bool → 'True', str as is."""
    import polars as pl

    if type_name == "bool":
        return raw == "True"
    return raw.cast({"int": pl.Int64, "float": pl.Float64, "pct": pl.Float64}.get(type_name, pl.Utf8), strict=False)


def split_rank_tags(rank_tags: str | None) -> dict[str, int | None]:
    """' DP0 TP1' → {'dp_rank': 0, 'tp_rank': 1, 'pp_rank': None, …} (the tags are an unordered set)."""
    ranks: dict[str, int | None] = {column: None for _, column in RANK_TAGS}
    for token in (rank_tags or "").split():
        tag, column = next(((tag, column) for tag, column in RANK_TAGS if token.startswith(tag)), ("", ""))
        if column and token[len(tag):].lstrip("-").isdigit():
            ranks[column] = int(token[len(tag):])
    return ranks


# Columns computed from captured ones, by name (a grammar file says `derive = "rank_tags"`).
DERIVES: dict[str, Callable[[dict], dict]] = {"rank_tags": lambda values: split_rank_tags(values.get("rank_tags"))}


def bundled_grammar_dir() -> Path:
    """grammars/ at the repository root, or speclogs/_grammars inside an installed wheel."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[1] / "_grammars", here.parents[3] / "grammars"):
        if candidate.is_dir():
            return candidate
    raise GrammarError("the bundled grammar files are missing (looked for speclogs/_grammars and <repo>/grammars)",
                       hint="reinstall speclogs, or run from a checkout that has grammars/")


@dataclass(frozen=True, eq=False)
class Sample:
    """A real line a pattern must parse, with the values it must give and the columns that must come out NULL; or, as
    a counter-sample, must not match (`claimed_by`: the pattern that should take it instead)."""

    line: str
    line_no: int  # its line in the grammar file
    expect: dict[str, object] = field(default_factory=dict)
    null: tuple[str, ...] = ()
    claimed_by: str | None = None


@dataclass(frozen=True, eq=False)
class Pattern:
    """One line shape: its pyparsing element (the definition), the regex compiled from the same template, and what it
    fills."""

    name: str
    family: str
    table: str
    scope: str
    gate: str
    regex: str  # the compiled form (anchored; polars runs it)
    build: Callable[[], pp.ParserElement] = field(repr=False)  # the pyparsing element, built when first asked for
    constants: dict[str, object] = field(default_factory=dict)
    fields: tuple[Field, ...] = ()
    versions: str = ""
    source: str = ""  # 'file:line' of the pattern's definition
    samples: tuple[Sample, ...] = ()
    counter_samples: tuple[Sample, ...] = ()
    # Columns computed from captured ones (the prefix's rank tags → dp_rank, tp_rank, …).
    derive: Callable[[dict], dict] | None = field(default=None, repr=False)
    group: str = ""  # the [[pattern]] name this one was expanded from (= name unless the pattern uses expand)
    text_column: str | None = None  # the column its rows keep the matched text in (the message, or the whole line)
    field_list: FieldList | None = None  # set when the template ends with {fields}: that text is read by its labels
    template: str = ""  # the template text the element was built from
    priority: int = 100  # its file's: the lower, the earlier it is tried
    kind: str | None = None  # its file's: 'prefix' | 'wrapper' (what stands before a message or a line) or None

    @property
    def element(self) -> pp.ParserElement:
        """The definition (`build` keeps it once built: an ingest runs only the regex, never pyparsing)."""
        return self.build()

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column a match fills: fields, constants, derived columns (a field list's columns for {fields})."""
        names = [f.name for f in self.fields if self.field_list is None or f.name != "fields"]
        names += [*(self.field_list.columns if self.field_list is not None else ()), *self.constants,
                  *(self.derive({}) if self.derive is not None else ())]
        return tuple(dict.fromkeys(names))

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
        values = {f.name: result.get(f.name) for f in self.fields}
        return self.finish({k: v[0] if isinstance(v, pp.ParseResults) else v for k, v in values.items()})


@dataclass(frozen=True, eq=False)
class GrammarSet:
    """Every loaded pattern. `prefix` splits an SGLang line; `patterns` are in priority order (first match wins);
    `prefixes` (SGLang's first) read what stands before a message found elsewhere on a line; `wrappers` are what
    capture tools put before a line."""

    prefix: Pattern
    patterns: list[Pattern]
    prefixes: tuple[Pattern, ...] = ()
    wrappers: tuple[Pattern, ...] = ()

    def for_scope(self, scope: str) -> list[Pattern]:
        return [p for p in self.patterns if p.scope == scope]

    def by_name(self, name: str) -> Pattern:
        return {p.name: p for p in (self.prefix, *self.patterns)}[name]

    def classify(self, text: str, scope: str, *, before: Pattern | None = None) -> tuple[Pattern, dict] | None:
        """The definition over the patterns of `scope` (up to `before`): the first that parses the text, with its values."""
        for p in self.for_scope(scope):
            if p is before:
                return None
            if not p.gate or p.gate in text:
                values = p.parse(text)
                if values is not None:
                    return p, values
        return None
