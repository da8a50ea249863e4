"""Compile a pyparsing element to a regex that Python re, Rust regex (polars) and RE2 (DuckDB) all accept.

The walk knows the few element kinds the template builder makes (And, MatchFirst, Opt, ZeroOrMore, OneOrMore,
Combine, Group, Suppress, Literal, Word, CharsNotIn, Regex, Empty, StringEnd); anything else raises, so a
definition that cannot be lowered is caught when the grammar loads, not when a log is parsed.
Results names become named groups `(?P<name>…)`.
"""

from __future__ import annotations

import re

import pyparsing as pp

from speclogs.errors import GrammarError

# Characters with a meaning in a regex outside a class. '-', '#', ' ', '&', '~' are left as they are:
# RE2 rejects some escapes Python accepts, and these are literals anyway.
_META = set("\\.^$|?*+()[]{}")
_CLASS_META = set("\\]^-[")
_FORBIDDEN = (
    (re.compile(r"\(\?[=!]|\(\?<[=!]"), "lookaround"),
    (re.compile(r"\\[1-9]"), "backreference"),
    (re.compile(r"\\[dDwWsS]"), r"\d \w \s classes (write [0-9] …: their meaning differs between engines)"),
    (re.compile(r"\(\?>|[*+?}][+]"), "atomic group / possessive quantifier"),
)


def escape(text: str) -> str:
    return "".join("\\" + ch if ch in _META else ch for ch in text)


def char_class(chars: set[str] | str, *, negate: bool = False) -> str:
    """A set of characters → '[0-9A-Z_a-z]' style class with ranges."""
    codes = sorted({ord(c) for c in chars})
    parts: list[str] = []
    i = 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        lo, hi = chr(codes[i]), chr(codes[j])
        lo_e = "\\" + lo if lo in _CLASS_META else lo
        hi_e = "\\" + hi if hi in _CLASS_META else hi
        if j - i >= 2:
            parts.append(f"{lo_e}-{hi_e}")
        else:
            parts.extend("\\" + chr(c) if chr(c) in _CLASS_META else chr(c) for c in codes[i : j + 1])
        i = j + 1
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


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


def _repeat(min_len: int, max_len: int) -> str:
    unbounded = max_len >= 2**31
    if unbounded:
        return "+" if min_len == 1 else ("*" if min_len == 0 else f"{{{min_len},}}")
    if min_len == max_len:
        return "" if min_len == 1 else f"{{{min_len}}}"
    return f"{{{min_len},{max_len}}}"


def _group(body: str) -> str:
    """Wrap for a quantifier unless it is already one atom."""
    if len(body) == 1 or (len(body) == 2 and body[0] == "\\"):
        return body
    if body.startswith("[") and body.endswith("]") and body.count("[") == 1 and body.count("]") == 1:
        return body
    return f"(?:{body})"


def check_regex_subset(pattern: str, where: str) -> None:
    for rx, what in _FORBIDDEN:
        if rx.search(pattern):
            raise GrammarError(
                f"{where}: regex {pattern!r} uses {what}, which is not in the subset that Python re, polars and DuckDB share",
                hint="use plain classes like [0-9], no lookaround or backreferences",
            )


def lower(element: pp.ParserElement, where: str) -> str:
    """pyparsing element → regex body (no anchors). Raises GrammarError on anything it cannot lower."""
    names: set[str] = set()
    return _lower(element, where, names, in_repeat=False)


def _lower(e: pp.ParserElement, where: str, names: set[str], *, in_repeat: bool) -> str:
    body = _lower_body(e, where, names, in_repeat=in_repeat)
    name = e.resultsName
    if name:
        if in_repeat:
            raise GrammarError(
                f"{where}: field '{name}' sits inside a repetition; a regex group can hold only one value",
                hint="capture the whole repeated part as one text field instead",
            )
        if name in names:
            raise GrammarError(
                f"{where}: field '{name}' is captured twice in one pattern (Python re and Rust regex forbid duplicate group names)",
                hint="split the alternatives into two [[pattern]] entries, or capture the field once outside the alternatives",
            )
        names.add(name)
        return f"(?P<{name}>{body})"
    return body


def _lower_body(e: pp.ParserElement, where: str, names: set[str], *, in_repeat: bool) -> str:
    def sub(x: pp.ParserElement, repeat: bool = in_repeat) -> str:
        return _lower(x, where, names, in_repeat=repeat)

    if isinstance(e, pp.And):
        return "".join(sub(x) for x in e.exprs)
    if isinstance(e, pp.MatchFirst):
        if all(type(x) in (pp.Literal, pp.core._SingleCharLiteral) and not x.resultsName for x in e.exprs):
            return literal_alternation([x.match for x in e.exprs])
        return "(?:" + "|".join(sub(x) for x in e.exprs) + ")"
    if isinstance(e, pp.Opt):
        inner = sub(e.expr)
        return _group(inner) + "?" if inner else ""
    if isinstance(e, (pp.ZeroOrMore, pp.OneOrMore)):
        if getattr(e, "not_ender", None) is not None:
            raise GrammarError(f"{where}: repetition with stop_on cannot be lowered to a regex", hint="drop stop_on")
        inner = sub(e.expr, repeat=True)
        return _group(inner) + ("*" if isinstance(e, pp.ZeroOrMore) else "+")
    if isinstance(e, (pp.Combine, pp.Group, pp.Suppress)):
        return sub(e.expr)
    if isinstance(e, pp.Literal):  # includes the single-character literal subclass
        return escape(e.match)
    if isinstance(e, pp.Word):
        if e.asKeyword:
            raise GrammarError(f"{where}: Word(as_keyword=True) cannot be lowered", hint="use a plain Word")
        init, body = set(e.init_chars), set(e.bodyChars)
        if init == body:
            return char_class(init) + _repeat(e.minLen, e.maxLen)
        return char_class(init) + char_class(body) + _repeat(max(e.minLen - 1, 0), max(e.maxLen - 1, 0))
    if isinstance(e, pp.CharsNotIn):
        return char_class(e.notChars, negate=True) + _repeat(e.minLen, e.maxLen)
    if isinstance(e, pp.Regex):
        check_regex_subset(e.pattern, where)
        return e.pattern if e.pattern in (".*", ".+") else f"(?:{e.pattern})"
    if isinstance(e, pp.StringEnd):
        return "$"
    if isinstance(e, pp.StringStart):
        return "^"
    if isinstance(e, pp.Empty):
        return ""
    raise GrammarError(
        f"{where}: cannot lower pyparsing element {type(e).__name__} ({e}) to a regex",
        hint="grammar templates only build And/MatchFirst/Opt/Literal/Word/CharsNotIn/Regex elements",
    )
