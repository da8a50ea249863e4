"""The definition of a pattern: its template's AST built into a pyparsing element (no whitespace skipping anywhere;
typed parse actions on fields). The validator holds every sample to it and near misses are explained with it; the
ingest runs the compiled regex (lower.py), so pyparsing is imported only where a definition is used.
"""

from __future__ import annotations

import pyparsing as pp

from speclogs.errors import GrammarError
from speclogs.grammar.template import Alternatives, Lit, Optional_, Slot, resolve_slot


def exact_tree(element: pp.ParserElement) -> pp.ParserElement:
    """No whitespace skipping anywhere in the tree, in place (pyparsing's recursive=True copies every node)."""
    stack = [element]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        e.leave_whitespace(recursive=False)
        stack.extend(getattr(e, "exprs", ()) or ())
        inner = getattr(e, "expr", None)
        if isinstance(inner, pp.ParserElement):
            stack.append(inner)
    return element


_DIGITS = pp.Word(pp.nums)


def _int_element() -> pp.ParserElement:
    return pp.Combine(pp.Opt(pp.Literal("-")) + _DIGITS.copy())


def _float_element() -> pp.ParserElement:
    return pp.Combine(pp.Opt(pp.Literal("-")) + _DIGITS.copy() + pp.Opt(pp.Literal(".") + _DIGITS.copy()))


def _timestamp_element() -> pp.ParserElement:
    """'YYYY-MM-DD HH:MM:SS' | 'MM-DD HH:MM:SS' (diffusion server) | 'HH:MM:SS' (≤0.3.0), factored on the first two
    digits so that the next character alone picks the form (a one-pass regex)."""

    def digits(n: int) -> pp.ParserElement:
        return pp.Word(pp.nums, exact=n)

    year_rest = digits(2) + "-" + digits(2) + "-" + digits(2) + " " + digits(2)  # 'YY-MM-DD HH' after 'YY'
    day_rest = pp.Literal("-") + digits(2) + " " + digits(2)  # '-DD HH' after 'MM'
    return pp.Combine(digits(2) + pp.Opt(pp.MatchFirst([year_rest, day_rest])) + ":" + digits(2) + ":" + digits(2))


def _rank_tags_element() -> pp.ParserElement:
    from speclogs.grammar.model import RANK_TAGS

    tag = pp.MatchFirst([pp.Literal(t) for t, _ in RANK_TAGS])
    return pp.Combine(pp.ZeroOrMore(pp.Literal(" ") + tag + pp.Opt(pp.Literal("-")) + _DIGITS.copy()))


BUILTIN_SHAPES = {  # the elements of template.SHAPE_TYPES' shapes
    "int": _int_element,
    "float": _float_element,
    "pct": _float_element,
    "bool": lambda: pp.MatchFirst([pp.Literal("True"), pp.Literal("False")]),
    "token": lambda: pp.CharsNotIn(" "),
    "word": lambda: pp.Word(pp.alphanums + "_"),
    "tocomma": lambda: pp.CharsNotIn(","),
    "rest": lambda: pp.Regex(r".*"),
    "text": lambda: pp.Regex(r".+"),
    "timestamp": _timestamp_element,
    "ranktags": _rank_tags_element,
}

_CASTS = {
    "int": lambda t: int(t[0]),
    "float": lambda t: float(t[0]),
    "pct": lambda t: float(t[0]),
    "bool": lambda t: t[0] == "True",
}


def file_shape_element(spec: dict) -> pp.ParserElement:
    """A shape of a grammar file's [shapes] table (values, regex, chars or not_chars; lower.file_shape_regex checked it)."""
    if "values" in spec:  # longest first: pyparsing takes the first alternative that matches, as the regex's trie does
        return pp.MatchFirst([pp.Literal(v) for v in sorted(spec["values"], key=len, reverse=True)])
    if "regex" in spec:
        return pp.Regex(spec["regex"])
    return pp.Word(spec["chars"]) if "chars" in spec else pp.CharsNotIn(spec["not_chars"])


def build_element(
    nodes: tuple,
    *,
    field_types: dict[str, str],
    field_shapes: dict[str, str | None],
    file_shapes: dict[str, pp.ParserElement],
    where: str,
) -> pp.ParserElement:
    """Template AST → pyparsing element (no whitespace skipping anywhere; typed parse actions on fields)."""

    def slot(node: Slot) -> pp.ParserElement:
        shape, shape_type = resolve_slot(node, field_types=field_types, field_shapes=field_shapes,
                                         file_shapes=file_shapes.keys(), where=where)
        if shape in file_shapes:
            element = file_shapes[shape].copy()
        else:
            element = BUILTIN_SHAPES[shape]()
        if node.name == "_":
            return element.set_name(f"_:{shape}")
        cast = _CASTS.get(field_types[node.name])
        if cast is not None:
            element = element.add_parse_action(cast)
        return element.set_name(node.name)(node.name)

    def seq(items: tuple) -> pp.ParserElement:
        parts = []
        for node in items:
            if isinstance(node, Lit):
                parts.append(pp.Literal(node.text))
            elif isinstance(node, Slot):
                parts.append(slot(node))
            elif isinstance(node, Optional_):
                body = seq(node.body)
                parts.append(pp.Opt(body).set_name(f"[{body.name}]"))
            elif isinstance(node, Alternatives):
                parts.append(pp.MatchFirst([seq(b) for b in node.branches]))
            else:  # pragma: no cover - the parser only makes the four node types
                raise GrammarError(f"{where}: internal: unknown template node {node!r}")
        if not parts:
            return pp.Empty()
        if len(parts) == 1:
            return parts[0]
        return pp.And(parts)

    return seq(nodes)


def pattern_element(nodes: tuple, name: str, *, field_types: dict[str, str], field_shapes: dict[str, str | None],
                    shape_specs: dict[str, dict], where: str) -> pp.ParserElement:
    """The whole pattern: the template's element, then the end of the text."""
    file_shapes = {k: file_shape_element(v) for k, v in shape_specs.items()}
    element = build_element(nodes, field_types=field_types, field_shapes=field_shapes, file_shapes=file_shapes, where=where)
    full = exact_tree(pp.And([element, pp.StringEnd()])).parse_with_tabs()
    full.set_name(name)
    return full
