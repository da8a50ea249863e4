"""The template syntax of grammar files (grammars/README.md, "Template syntax"): text → AST (Lit, Slot, Optional_,
Alternatives), and the checks on it. lower.py compiles the AST to the pattern's regex; definition.py builds it into
the pattern's pyparsing element."""

from __future__ import annotations

from dataclasses import dataclass

from speclogs.errors import GrammarError

# ---------------------------------------------------------------------------------------------------------------
# AST


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Slot:
    name: str  # '_' = not captured
    shape: str | None


@dataclass(frozen=True)
class Optional_:
    body: tuple


@dataclass(frozen=True)
class Alternatives:
    branches: tuple[tuple, ...]


def parse_template(template: str, where: str) -> tuple:
    """Template text → tuple of Lit / Slot / Optional_ / Alternatives nodes; GrammarError names `where`."""
    nodes, pos, stop = _parse_seq(template, 0, in_group=False, where=where)
    if pos != len(template):
        raise GrammarError(
            f"{where}: unexpected '{template[pos]}' at column {pos + 1} of template {template!r}",
            hint="a '}' or '|' outside {?…} / {|…} must be escaped as \\} or write it inside a group",
        )
    return nodes


def _parse_seq(s: str, pos: int, *, in_group: bool, where: str) -> tuple[tuple, int, str | None]:
    nodes: list = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            nodes.append(Lit("".join(buf)))
            buf.clear()

    while pos < len(s):
        ch = s[pos]
        if ch == "\\":
            if pos + 1 >= len(s):
                raise GrammarError(f"{where}: template ends with a lone backslash", hint="write \\\\ for a backslash")
            buf.append(s[pos + 1])
            pos += 2
        elif ch == "{":
            flush()
            node, pos = _parse_group(s, pos, where)
            nodes.append(node)
        elif in_group and ch in "|}":
            flush()
            return tuple(nodes), pos, ch
        elif ch == "}":
            raise GrammarError(
                f"{where}: unbalanced '}}' at column {pos + 1} of template {s!r}", hint="escape a literal brace as \\}"
            )
        else:
            buf.append(ch)
            pos += 1
    flush()
    if in_group:
        raise GrammarError(f"{where}: unclosed '{{' in template {s!r}", hint="every {?…} and {|…} needs its closing }")
    return tuple(nodes), pos, None


def _parse_group(s: str, pos: int, where: str) -> tuple[object, int]:
    start = pos
    pos += 1
    if pos < len(s) and s[pos] == "?":
        body, pos, stop = _parse_seq(s, pos + 1, in_group=True, where=where)
        if stop != "}":
            raise GrammarError(
                f"{where}: '|' inside an optional part {{?…}} at column {pos + 1}", hint="use {|a|b} for alternatives"
            )
        return Optional_(body), pos + 1
    if pos < len(s) and s[pos] == "|":
        branches = []
        pos += 1
        while True:
            body, pos, stop = _parse_seq(s, pos, in_group=True, where=where)
            branches.append(body)
            pos += 1
            if stop == "}":
                break
        if len(branches) < 2:
            raise GrammarError(f"{where}: alternatives {{|…}} need at least two branches", hint="write {|a|b}")
        return Alternatives(tuple(branches)), pos
    end = s.find("}", pos)
    if end < 0:
        raise GrammarError(f"{where}: unclosed placeholder starting at column {start + 1} of {s!r}", hint="write {name} or {name:shape}")
    inner = s[pos:end]
    name, _, shape = inner.partition(":")
    if not (name == "_" or name.isidentifier()):
        raise GrammarError(
            f"{where}: bad placeholder {{{inner}}} at column {start + 1}",
            hint="placeholders are {name}, {name:shape} or {_:shape}; escape literal braces as \\{ \\}",
        )
    if name == "_" and not shape:
        raise GrammarError(f"{where}: {{_}} needs a shape, e.g. {{_:int}}", hint="an uncaptured slot has no field to take its type from")
    return Slot(name, shape or None), end + 1


_GREEDY_TO_END = ("rest", "text")


def check_rest_is_last(nodes: tuple, where: str, field_shapes: dict[str, str | None] | None = None, *, followed: bool = False) -> None:
    """A `rest`/`text` token eats the whole line; pyparsing never gives characters back, so nothing may follow it
    (a regex would backtrack and the two paths would disagree)."""
    field_shapes = field_shapes or {}
    for i, node in enumerate(nodes):
        after = followed or i + 1 < len(nodes)
        if isinstance(node, Slot):
            shape = node.shape or field_shapes.get(node.name)
            if shape in _GREEDY_TO_END and after:
                raise GrammarError(
                    f"{where}: {{{node.name}:{shape}}} takes the rest of the line but the template goes on after it",
                    hint="put {…:rest} last, or use a shape that stops (e.g. not_chars) before the text that follows",
                )
        elif isinstance(node, Optional_):
            check_rest_is_last(node.body, where, field_shapes, followed=after)
        elif isinstance(node, Alternatives):
            for branch in node.branches:
                check_rest_is_last(branch, where, field_shapes, followed=after)


def leaves(nodes: tuple):
    """The Lit and Slot nodes of a template, in order, through every optional part and alternative."""
    for node in nodes:
        if isinstance(node, Optional_):
            yield from leaves(node.body)
        elif isinstance(node, Alternatives):
            for branch in node.branches:
                yield from leaves(branch)
        else:
            yield node


def slot_names(nodes: tuple) -> list[str]:
    """Captured field names in template order (duplicates kept, so the caller can report them)."""
    return [node.name for node in leaves(nodes) if isinstance(node, Slot) and node.name != "_"]


# The built-in shapes and the type of value each matches (their regexes: lower.py; their pyparsing elements:
# definition.py).
SHAPE_TYPES = {
    "int": "int", "float": "float", "pct": "pct", "bool": "bool", "token": "str", "word": "str", "tocomma": "str",
    "rest": "str", "text": "str", "timestamp": "str", "ranktags": "str",
}


def resolve_slot(node: Slot, *, field_types: dict[str, str], field_shapes: dict[str, str | None], file_shapes,
                 where: str) -> tuple[str, str]:
    """A slot's shape name and the type of what it matches ('str' for file shapes); GrammarError when the slot names
    no field, the shape does not exist, or its type does not fit the field's."""
    shape = node.shape
    if shape is None:
        if node.name not in field_types:
            raise GrammarError(f"{where}: placeholder {{{node.name}}} names no declared field", hint="add it to [[field]] or fix the name")
        shape = field_shapes.get(node.name) or ("token" if field_types[node.name] == "str" else field_types[node.name])
    if shape in file_shapes:
        shape_type = "str"
    elif shape in SHAPE_TYPES:
        shape_type = SHAPE_TYPES[shape]
    else:
        raise GrammarError(
            f"{where}: unknown shape '{shape}' in placeholder {{{node.name}:{shape}}}",
            hint="built-in shapes: " + ", ".join(SHAPE_TYPES) + "; or declare it under [shapes]",
        )
    if node.name == "_":
        return shape, shape_type
    if node.name not in field_types:
        raise GrammarError(f"{where}: placeholder {{{node.name}}} names no declared field", hint="add it to [[field]] or fix the name")
    ftype = field_types[node.name]
    if shape_type != "str" and shape_type != ftype and not (ftype == "float" and shape_type == "int"):
        raise GrammarError(
            f"{where}: field '{node.name}' is {ftype} but placeholder shape '{shape}' gives {shape_type}",
            hint="use the field's own shape or change the field's type",
        )
    if shape_type == "str" and ftype != "str":
        raise GrammarError(
            f"{where}: field '{node.name}' is {ftype} but shape '{shape}' gives text",
            hint="typed fields use int, float, pct or bool shapes",
        )
    return shape, shape_type


def discarded_slots(nodes: tuple, shape_specs: dict[str, dict]) -> list[str]:
    """The shapes of the uncaptured slots that can match content (a letter or a digit): what a pattern drops from the
    line unless its rows keep the text. Padding shapes (`spaces = { chars = " " }`, rules of '-' or '=') drop none."""
    return [node.shape for node in leaves(nodes)
            if isinstance(node, Slot) and node.name == "_" and _holds_content(node.shape, shape_specs)]


def _holds_content(shape: str | None, shape_specs: dict[str, dict]) -> bool:
    spec = shape_specs.get(shape or "")
    if spec is None:
        return True  # every built-in shape can match a digit or a letter
    if "chars" in spec:
        return any(c.isalnum() for c in spec["chars"])
    if "values" in spec:
        return any(c.isalnum() for value in spec["values"] for c in value)
    return True
