"""Compile a template (its AST, speclogs.grammar.template) to the pattern's regex, which polars (Rust regex) runs and
Python's re reads the same way. Each node gets the regex of the element the definition (definition.py) gives it; the
validator holds the two to the same values on every sample. Fields become named groups `(?P<name>…)`.
"""

from __future__ import annotations

import re

from speclogs.errors import GrammarError

# Characters with a meaning in a regex outside a class. '-', '#', ' ', '&', '~' are left as they are:
# Rust regex rejects some escapes Python accepts, and these are literals anyway.
_META = set("\\.^$|?*+()[]{}")
_CLASS_META = set("\\]^-[")

# The regex of each built-in shape's pyparsing element (template.BUILTIN_SHAPES), in the same order of alternatives.
BUILTIN_SHAPE_REGEXES = {
    "int": "-?[0-9]+",
    "float": r"-?[0-9]+(?:\.[0-9]+)?",
    "pct": r"-?[0-9]+(?:\.[0-9]+)?",
    "bool": "(?:False|True)",
    "token": "[^ ]+",
    "word": "[0-9A-Z_a-z]+",
    "tocomma": "[^,]+",
    "rest": ".*",
    "text": ".+",
    "timestamp": "[0-9]{2}(?:(?:[0-9]{2}-[0-9]{2}-[0-9]{2} [0-9]{2}|-[0-9]{2} [0-9]{2}))?:[0-9]{2}:[0-9]{2}",
    "ranktags": "(?: (?:ATTN_CP|MOE_DP|DP|TP|PP|EP)-?[0-9]+)*",
}


def escape(text: str) -> str:
    return "".join("\\" + ch if ch in _META else ch for ch in text)


def char_class(chars: str, *, negate: bool = False) -> str:
    """A set of characters → a regex class ('[=]', '[^:]')."""
    return "[" + ("^" if negate else "") + "".join("\\" + c if c in _CLASS_META else c for c in sorted(set(chars))) + "]"


def literal_alternation(words: list[str]) -> str:
    """Alternatives of plain literals as a prefix-factored group: 'cuda graph|cpu graph' → 'c(?:uda|pu) graph'.

    No two branches start with the same character, so the regex stays one-pass (Rust regex then uses its
    fast one-pass engine for captures). The set of matched strings is unchanged; where one word is a prefix of
    another the longer one is tried first, as pyparsing does with the longest-first value lists.
    """
    if len(words) != len(set(words)):
        words = list(dict.fromkeys(words))
    return "(?:" + _trie(sorted(words, key=len, reverse=True)) + ")" if len(words) > 1 else escape(words[0])


def _trie(words: list[str]) -> str:
    ends = "" in words
    words = [w for w in words if w]
    groups: dict[str, list[str]] = {}
    for w in words:
        groups.setdefault(w[0], []).append(w)
    branches = []
    for members in groups.values():
        if len(members) == 1:
            branches.append(escape(members[0]))
            continue
        common = members[0]
        for m in members[1:]:
            while not m.startswith(common):
                common = common[:-1]
        branches.append(escape(common) + _group_alt([m[len(common):] for m in members]))
    body = "|".join(branches)
    if ends:
        return f"(?:{body})?" if len(branches) > 1 or len(body) > 1 else f"{body}?"
    return body


def _group_alt(rest: list[str]) -> str:
    inner = _trie(rest)
    if "" in rest:
        return inner  # already wrapped as optional
    return f"(?:{inner})" if "|" in inner else inner


def _group(body: str) -> str:
    """Wrap for a quantifier unless it is already one atom."""
    if len(body) == 1 or (len(body) == 2 and body[0] == "\\"):
        return body
    if body.startswith("[") and body.endswith("]") and body.count("[") == 1 and body.count("]") == 1:
        return body
    return f"(?:{body})"


def file_shape_regex(spec: dict, where: str) -> str:
    """The regex of a shape declared in a grammar file's [shapes] table (definition.file_shape_element builds its element)."""
    if "values" in spec:
        values = spec["values"]
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
            raise GrammarError(f"{where}: shape 'values' must be a non-empty list of non-empty strings",
                               hint='values = ["cuda graph", "npu graph"]')
        return literal_alternation(sorted(values, key=len, reverse=True))
    if "regex" in spec:
        check_regex(spec["regex"], where)
        return spec["regex"] if spec["regex"] in (".*", ".+") else f"(?:{spec['regex']})"
    if "chars" in spec:
        return char_class(spec["chars"]) + "+"
    if "not_chars" in spec:
        return char_class(spec["not_chars"], negate=True) + "+"
    raise GrammarError(f"{where}: a shape needs one of values, chars, not_chars, regex",
                       hint='e.g. hexaddr = { chars = "0123456789abcdefx" }')


def template_regex(nodes: tuple, shape_of, where: str) -> str:
    """The anchored regex of a template's nodes. `shape_of(slot)` gives a slot's shape regex (and raises GrammarError
    for a shape or type that does not fit, as building the definition does)."""
    from speclogs.grammar.template import Alternatives, Lit, Optional_, Slot

    names: set[str] = set()

    def seq(items: tuple) -> str:
        return "".join(node_regex(node) for node in items)

    def node_regex(node) -> str:
        if isinstance(node, Lit):
            return escape(node.text)
        if isinstance(node, Slot):
            body = shape_of(node)
            if node.name == "_":
                return body
            if node.name in names:
                raise GrammarError(
                    f"{where}: field '{node.name}' is captured twice in one pattern (the regex engines forbid duplicate group names)",
                    hint="split the alternatives into two [[pattern]] entries, or capture the field once outside the alternatives",
                )
            names.add(node.name)
            return f"(?P<{node.name}>{body})"
        if isinstance(node, Optional_):
            inner = seq(node.body)
            return _group(inner) + "?" if inner else ""
        if isinstance(node, Alternatives):
            if all(len(branch) == 1 and isinstance(branch[0], Lit) for branch in node.branches):
                return literal_alternation([branch[0].text for branch in node.branches])
            return "(?:" + "|".join(seq(branch) for branch in node.branches) + ")"
        raise GrammarError(f"{where}: internal: unknown template node {node!r}")  # the parser makes only these four

    return "^" + seq(nodes) + "$"


# What Python's re (pyparsing, the definition) and Rust's regex (polars, the executor) read differently or not at all.
_UNSHARED = re.compile(r"\(\?[=!<][^P]|\(\?<[=!]|\\[1-9]|\\[dwsDWSbB]|[*+?}]\?|\(\?[a-zA-Z]")


def check_regex(text: str, where: str) -> None:
    """Refuse a regex that Python's re does not compile, or that polars would run differently from pyparsing."""
    try:
        re.compile(text)
    except re.error as error:
        raise GrammarError(f"{where}: regex {text!r}: {error}", hint="write a plain regex: literals, [..] classes, groups, | and "
                           "greedy repeats") from None
    found = _UNSHARED.search(text)
    if found is not None:
        raise GrammarError(f"{where}: regex {text!r} uses {found.group()!r}, which Python and polars read differently",
                           hint="use literals, [..] classes (write [0-9] for \\d), (?:..), (?P<name>..), |, greedy * + ? {m,n}")
