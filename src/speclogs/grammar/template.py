"""The template syntax of grammar files (grammars/README.md, "Template syntax"): text → AST (Lit, Slot, Group),
and its one compiler to the pattern's two forms. Every shape is a regex; the regex form (what polars
runs) joins the nodes as a regex does, the definition (pyparsing) joins the same shapes as PEG does, never giving
characters back: the validator holds the two to the same values on every sample.
"""

from __future__ import annotations

import re
from collections.abc import Callable
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
class Group:
    branches: tuple[tuple, ...]  # {|a|b}: its alternatives; {?a}: its one body
    optional: bool


# A template's tokens: an escaped character, a group's opening ({? or {|), a group's '|' or '}', a placeholder, text.
_TOKENS = re.compile(r"\\(?P<esc>.)|\{(?P<open>[?|])|(?P<close>[|}])|\{(?P<slot>[^{}]*)\}|(?P<text>[^\\{}|]+)|(?P<bad>.)", re.S)
_BAD = {"\\": ("template ends with a lone backslash", "write \\\\ for a backslash"),
        "{": ("unclosed placeholder", "write {name} or {name:shape}"),
        "}": ("unbalanced '}'", "escape a literal brace as \\}"),
        "|": ("'|' inside an optional part {?…}", "use {|a|b} for alternatives")}


def parse_template(template: str, where: str) -> tuple:
    """Template text → tuple of Lit / Slot / Group nodes; GrammarError names `where`."""
    groups: list[tuple[str, list[list]]] = [("", [[]])]  # the open groups ('?', '|'; '' the template), their branches
    for token in _TOKENS.finditer(template):
        kind, value, nodes = token.lastgroup, token.group(token.lastgroup), groups[-1][1][-1]
        if kind == "close" and value == "|" and groups[-1][0] == "|":
            groups[-1][1].append([])
        elif kind == "close" and value == "}" and len(groups) > 1:
            opener, branches = groups.pop()
            if opener == "|" and len(branches) < 2:
                raise GrammarError(f"{where}: alternatives {{|…}} need at least two branches", hint="write {|a|b}")
            groups[-1][1][-1].append(Group(tuple(map(tuple, branches)), optional=opener == "?"))
        elif kind == "open":
            groups.append((value, [[]]))
        elif kind == "slot":
            name, _, shape = value.partition(":")
            if not (name == "_" or name.isidentifier()):
                raise GrammarError(f"{where}: bad placeholder {{{value}}} at column {token.start() + 1}",
                                   hint="placeholders are {name}, {name:shape} or {_:shape}; escape literal braces as \\{ \\}")
            if name == "_" and not shape:
                raise GrammarError(f"{where}: {{_}} needs a shape, e.g. {{_:int}}",
                                   hint="an uncaptured slot has no field to take its type from")
            nodes.append(Slot(name, shape or None))
        elif kind in ("esc", "text") or value == "|" and len(groups) == 1:  # a '|' outside every group is text
            if nodes and isinstance(nodes[-1], Lit):
                value = nodes.pop().text + value
            nodes.append(Lit(value))
        else:
            message, hint = _BAD[value]
            raise GrammarError(f"{where}: {message} at column {token.start() + 1} of template {template!r}", hint=hint)
    if len(groups) > 1:
        raise GrammarError(f"{where}: unclosed '{{' in template {template!r}", hint="every {?…} and {|…} needs its closing }")
    return tuple(groups[0][1][0])


def leaves(nodes: tuple):
    """The Lit and Slot nodes of a template, in order, through every optional part and alternative."""
    for node in nodes:
        if isinstance(node, Group):
            for branch in node.branches:
                yield from leaves(branch)
        else:
            yield node


def slot_names(nodes: tuple) -> list[str]:
    """Captured field names in template order (duplicates kept, so the caller can report them)."""
    return [node.name for node in leaves(nodes) if isinstance(node, Slot) and node.name != "_"]


def check_rest_is_last(nodes: tuple, where: str, fields: dict, *, followed: bool = False) -> None:
    """A `rest`/`text` slot eats the whole line; pyparsing never gives characters back, so nothing may follow it
    (a regex would backtrack and the two forms would disagree)."""
    for i, node in enumerate(nodes):
        after = followed or i + 1 < len(nodes)
        if isinstance(node, Slot) and after and (shape := node.shape or getattr(fields.get(node.name), "shape", None)) in ("rest", "text"):
            raise GrammarError(f"{where}: {{{node.name}:{shape}}} takes the rest of the line but the template goes on after it",
                               hint="put {…:rest} last, or use a shape that stops (e.g. not_chars) before the text that follows")
        for body in node.branches if isinstance(node, Group) else ():
            check_rest_is_last(body, where, fields, followed=after)


def discarded_slots(nodes: tuple, shape_specs: dict[str, dict]) -> list[str]:
    """The shapes of the uncaptured slots that can match content (a letter or a digit): what a pattern drops from the
    line unless its rows keep the text. Padding shapes (`spaces = { chars = " " }`, rules of '-' or '=') drop none."""
    def holds_content(spec: dict | None) -> bool:  # every built-in shape, and a regex, can match a digit or a letter
        listed = None if spec is None else spec.get("chars", "") + "".join(spec.get("values", ()))
        return not listed or any(c.isalnum() for c in listed)

    return [node.shape for node in leaves(nodes)
            if isinstance(node, Slot) and node.name == "_" and holds_content(shape_specs.get(node.shape or ""))]


# ---------------------------------------------------------------------------------------------------------------
# shapes: regexes that Python's re (pyparsing) and Rust's regex (polars) read the same way

# The built-in shapes: the type of value each matches, and its regex.
SHAPES = {
    "int": ("int", "-?[0-9]+"),
    "float": ("float", r"-?[0-9]+(?:\.[0-9]+)?"),
    "pct": ("pct", r"-?[0-9]+(?:\.[0-9]+)?"),
    "bool": ("bool", "(?:False|True)"),
    "token": ("str", "[^ ]+"),
    "word": ("str", "[0-9A-Z_a-z]+"),
    "tocomma": ("str", "[^,]+"),
    "rest": ("str", ".*"),
    "text": ("str", ".+"),
    # 'YYYY-MM-DD HH:MM:SS' | 'MM-DD HH:MM:SS' (diffusion server) | 'HH:MM:SS' (≤0.3.0), factored on the first two digits
    "timestamp": ("str", "[0-9]{2}(?:(?:[0-9]{2}-[0-9]{2}-[0-9]{2} [0-9]{2}|-[0-9]{2} [0-9]{2}))?:[0-9]{2}:[0-9]{2}"),
    "ranktags": ("str", "(?: (?:ATTN_CP|MOE_DP|DP|TP|PP|EP)-?[0-9]+)*"),  # model.RANK_TAGS, longest first
}
# Characters with a meaning in a regex outside a class. '-', '#', ' ', '&', '~' are left as they are:
# Rust regex rejects some escapes Python accepts, and these are literals anyway.
_META = set("\\.^$|?*+()[]{}")
_CLASS_META = set("\\]^-[")
# What Python's re (pyparsing, the definition) and Rust's regex (polars, the executor) read differently or not at all.
_UNSHARED = re.compile(r"\(\?[=!<][^P]|\(\?<[=!]|\\[1-9]|\\[dwsDWSbB]|[*+?}]\?|\(\?[a-zA-Z]")


def escape(text: str) -> str:
    return "".join("\\" + ch if ch in _META else ch for ch in text)


def char_class(chars: str, *, negate: bool = False) -> str:
    """A set of characters → a regex class ('[=]', '[^:]')."""
    return "[" + ("^" if negate else "") + "".join("\\" + c if c in _CLASS_META else c for c in sorted(set(chars))) + "]"


def literal_alternation(words: list[str]) -> str:
    """Alternatives of plain literals as a prefix-factored group: 'cuda graph|cpu graph' → 'c(?:uda|pu) graph'. No two
    branches start with the same character, so the regex stays one-pass (Rust regex then uses its fast one-pass engine
    for captures). Where one word is a prefix of another the longer one is tried first."""
    words = list(dict.fromkeys(words))
    return "(?:" + _trie(sorted(words, key=len, reverse=True)) + ")" if len(words) > 1 else escape(words[0])


def _trie(words: list[str]) -> str:
    groups: dict[str, list[str]] = {}
    for w in words:
        if w:
            groups.setdefault(w[0], []).append(w)
    branches = []
    for members in groups.values():
        common = members[0]
        for m in members[1:]:
            while not m.startswith(common):
                common = common[:-1]
        rest = [m[len(common):] for m in members]
        inner = _trie(rest) if len(members) > 1 else ""
        branches.append(escape(common) + (f"(?:{inner})" if "|" in inner and "" not in rest else inner))
    body = "|".join(branches)
    if "" in words:  # the empty word: the group is optional
        return f"(?:{body})?" if len(branches) > 1 or len(body) > 1 else f"{body}?"
    return body


def file_shape_regex(spec: dict, where: str) -> str:
    """The regex of a shape declared in a grammar file's [shapes] table."""
    if not isinstance(spec, dict):
        raise GrammarError(f"{where} must be a table, got {spec!r}", hint='e.g. status = { values = ["a", "b"] }')
    if "values" in spec:
        values = spec["values"]
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
            raise GrammarError(f"{where}: shape 'values' must be a non-empty list of non-empty strings",
                               hint='values = ["cuda graph", "npu graph"]')
        return literal_alternation(values)
    if "regex" in spec:
        text = spec["regex"]
        try:
            re.compile(text)
        except re.error as error:
            raise GrammarError(f"{where}: regex {text!r}: {error}", hint="write a plain regex: literals, [..] classes, "
                               "groups, | and greedy repeats") from None
        if found := _UNSHARED.search(text):
            raise GrammarError(f"{where}: regex {text!r} uses {found.group()!r}, which Python and polars read differently",
                               hint="use literals, [..] classes (write [0-9] for \\d), (?:..), (?P<name>..), |, greedy * + ? {m,n}")
        return text if text in (".*", ".+") else f"(?:{text})"
    if "chars" in spec:
        return char_class(spec["chars"]) + "+"
    if "not_chars" in spec:
        return char_class(spec["not_chars"], negate=True) + "+"
    raise GrammarError(f"{where}: a shape needs one of values, chars, not_chars, regex",
                       hint='e.g. hexaddr = { chars = "0123456789abcdefx" }')


def slot_regex(node: Slot, *, fields: dict, file_shapes: dict[str, str], where: str) -> str:
    """A slot's shape regex; GrammarError when the slot names no field, the shape does not exist, or its type does not
    fit the field's (a file shape matches text)."""
    if node.name != "_" and node.name not in fields:
        raise GrammarError(f"{where}: placeholder {{{node.name}}} names no declared field", hint="add it to [[field]] or fix the name")
    ftype = "str" if node.name == "_" else fields[node.name].type
    shape = node.shape or fields[node.name].shape or ("token" if ftype == "str" else ftype)
    if shape not in file_shapes and shape not in SHAPES:
        raise GrammarError(f"{where}: unknown shape '{shape}' in placeholder {{{node.name}:{shape}}}",
                           hint="built-in shapes: " + ", ".join(SHAPES) + "; or declare it under [shapes]")
    shape_type, regex = ("str", file_shapes[shape]) if shape in file_shapes else SHAPES[shape]
    if node.name != "_" and shape_type != ftype and (ftype, shape_type) != ("float", "int"):
        raise GrammarError(f"{where}: field '{node.name}' is {ftype} but shape '{shape}' gives "
                           f"{'text' if shape_type == 'str' else shape_type}", hint="use a shape of the field's type, or change its type")
    return regex


# ---------------------------------------------------------------------------------------------------------------
# the two forms


def template_regex(nodes: tuple, shape_of: Callable[[Slot], str]) -> str:
    """The anchored regex of a template's nodes (fields as named groups); `shape_of(slot)` gives a slot's regex."""
    def seq(items: tuple) -> str:
        return "".join(node_regex(node) for node in items)

    def node_regex(node) -> str:
        if isinstance(node, Lit):
            return escape(node.text)
        if isinstance(node, Slot):
            return shape_of(node) if node.name == "_" else f"(?P<{node.name}>{shape_of(node)})"
        if node.optional:
            inner = seq(node.branches[0])
            if not inner:
                return ""
            atom = len(inner) == 1 or (len(inner) == 2 and inner[0] == "\\") or re.fullmatch(r"\[[^][]*\]", inner)
            return (inner if atom else f"(?:{inner})") + "?"
        if all(len(branch) == 1 and isinstance(branch[0], Lit) for branch in node.branches):
            return literal_alternation([branch[0].text for branch in node.branches])
        return "(?:" + "|".join(seq(branch) for branch in node.branches) + ")"

    return "^" + seq(nodes) + "$"


_CASTS = {"int": lambda t: int(t[0]), "float": lambda t: float(t[0]), "pct": lambda t: float(t[0]), "bool": lambda t: t[0] == "True"}


def template_element(nodes: tuple, name: str, shape_of: Callable[[Slot], str], fields: dict):
    """The definition: the template as a pyparsing element over the whole text (no whitespace skipping anywhere; each
    field a results name with a typed parse action)."""
    import pyparsing as pp

    def exact(element: pp.ParserElement) -> pp.ParserElement:
        return element.leave_whitespace(recursive=False)

    def slot(node: Slot) -> pp.ParserElement:
        element = exact(pp.Regex(shape_of(node)))
        if node.name == "_":
            return element.set_name(f"_:{node.shape}")
        cast = _CASTS.get(fields[node.name].type)
        if cast is not None:
            element.add_parse_action(cast)
        return element.set_name(node.name)(node.name)

    def seq(items: tuple) -> pp.ParserElement:
        parts = []
        for node in items:
            if isinstance(node, Lit):
                parts.append(exact(pp.Literal(node.text)))
            elif isinstance(node, Slot):
                parts.append(slot(node))
            elif node.optional:
                parts.append(exact(pp.Opt(seq(node.branches[0]))))
            else:
                parts.append(exact(pp.MatchFirst([seq(branch) for branch in node.branches])))
        return parts[0] if len(parts) == 1 else exact(pp.And(parts) if parts else pp.Empty())

    return exact(pp.And([seq(nodes), exact(pp.StringEnd())])).parse_with_tabs().set_name(name)
