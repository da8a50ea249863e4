"""The grammars' compiled form: a regex in a small subset that polars (Rust regex), DuckDB (RE2) and the native
matcher all run the same way, and its syntax tree.

lower.py writes every pattern's regex in this subset; `parse_regex` reads one back into nodes (the native matcher
builds its program from them, and the loader uses it to refuse a user's `regex` shape outside the subset).

The subset: literal characters and `\\x` escapes of punctuation (plus `\\t`, `\\n`, `\\r`); `.`; classes `[a-z_]` /
`[^ ]` (the native matcher runs ASCII members only; a scope with another class runs on polars); groups `(?:…)`,
`(?P<name>…)`, `(…)`; alternation `|`; greedy `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`; anchors `^` and `$`. Not in it:
lazy or possessive repeats, lookaround, backreferences, `\\d \\w \\s` (their meaning differs between the engines),
inline flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from speclogs.errors import GrammarError

INFINITE = -1  # Repeat.high of `*`, `+`, `{m,}`


class Char(NamedTuple):
    """One literal character (a tuple: a regex has thousands, and they are made fast)."""

    char: str


@dataclass(frozen=True)
class CharSet:
    """A class: the characters in `members`; `negated` matches every other character."""

    members: frozenset[str]
    negated: bool = False

    def matches(self, char: str) -> bool:
        return (char in self.members) != self.negated


ANY = CharSet(frozenset("\n"), negated=True)  # '.'


@dataclass(frozen=True)
class Group:
    body: tuple
    index: int | None = None  # capture group number (1, 2, … in order of their '('), None: not capturing
    name: str | None = None


@dataclass(frozen=True)
class Alternation:
    branches: tuple[tuple, ...]


@dataclass(frozen=True)
class Repeat:
    body: tuple
    low: int
    high: int  # INFINITE: no upper bound


@dataclass(frozen=True)
class Start:
    """`^`"""


@dataclass(frozen=True)
class End:
    """`$`"""


@dataclass(frozen=True)
class Regex:
    """A parsed regex: its nodes, and its capture groups (name → number; `groups` counts them all)."""

    text: str
    nodes: tuple
    names: dict[str, int]
    groups: int


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r"}
_SPECIAL = frozenset("\\()[]|.^$*+?{")
_MAX_REPEAT = 1000


def parse_regex(text: str) -> Regex:
    """Parse a regex of the subset; GrammarError (saying what and where) for anything outside it."""
    parser = _Parser(text)
    nodes = parser.alternation()
    if parser.pos != len(text):
        parser.fail("unbalanced ')'")
    return Regex(text=text, nodes=nodes, names=dict(parser.names), groups=parser.groups)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.groups = 0
        self.names: dict[str, int] = {}

    def fail(self, what: str):
        raise GrammarError(
            f"regex {self.text!r}: {what} at column {self.pos + 1}",
            hint="grammar regexes use a subset that polars, DuckDB and the native matcher share: literals, [..] classes, "
            "(?:..), (?P<name>..), |, greedy * + ? {m,n}, ^ $; write [0-9] for \\d",
        )

    def peek(self) -> str | None:
        return self.text[self.pos] if self.pos < len(self.text) else None

    def alternation(self) -> tuple:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else (Alternation(tuple(branches)),)

    def sequence(self) -> tuple:
        items: list = []
        text = self.text
        while (char := self.peek()) is not None and char not in "|)":
            if char not in _SPECIAL:  # a run of plain characters: all but the last are never quantified
                end = self.pos
                while end < len(text) and text[end] not in _SPECIAL:
                    end += 1
                if end < len(text) and text[end] in "*+?{":
                    end -= 1
                if end > self.pos:
                    items.extend(Char(c) for c in text[self.pos : end])
                    self.pos = end
                    continue
            atom = self.atom()
            items.append(self.quantified(atom))
        return tuple(items)

    def quantified(self, atom):
        char = self.peek()
        if char is None or char not in "*+?{":
            return atom
        if isinstance(atom, (Start, End)):
            self.fail("a repeated anchor")
        if char == "{":
            low, high = self.bounds()
        else:
            self.pos += 1
            low, high = {"*": (0, INFINITE), "+": (1, INFINITE), "?": (0, 1)}[char]
        if self.peek() in ("?", "+"):
            self.fail("a lazy or possessive repeat")
        if self.peek() is not None and self.peek() in "*{":
            self.fail("a repeat of a repeat")
        return Repeat((atom,), low, high)

    def bounds(self) -> tuple[int, int]:
        end = self.text.find("}", self.pos)
        inner = self.text[self.pos + 1 : end] if end > 0 else ""
        low_text, comma, high_text = inner.partition(",")
        if not low_text.isdigit() or (high_text and not high_text.isdigit()):
            self.fail("a malformed {m,n}")
        low = int(low_text)
        high = (int(high_text) if high_text else INFINITE) if comma else low
        if max(low, high) > _MAX_REPEAT or (high != INFINITE and high < low):
            self.fail("a repeat count out of range")
        self.pos = end + 1
        return low, high

    def atom(self):
        char = self.text[self.pos]
        if char == "(":
            return self.group()
        if char == "[":
            return self.char_set()
        self.pos += 1
        if char == ".":
            return ANY
        if char == "^":
            return Start()
        if char == "$":
            return End()
        if char == "\\":
            return Char(self.escape())
        if char in "*+?{":
            self.pos -= 1
            self.fail("a repeat with nothing to repeat")
        return Char(char)

    def escape(self) -> str:
        if self.pos >= len(self.text):
            self.fail("a trailing backslash")
        char = self.text[self.pos]
        self.pos += 1
        if char in _ESCAPES:
            return _ESCAPES[char]
        if char.isalnum():
            self.pos -= 2
            self.fail(f"the escape \\{char}")
        return char

    def group(self) -> Group:
        start = self.pos
        self.pos += 1
        index = name = None
        if self.text.startswith("?:", self.pos):
            self.pos += 2
        elif self.text.startswith("?P<", self.pos):
            end = self.text.find(">", self.pos)
            name = self.text[self.pos + 3 : end] if end > 0 else ""
            if not name.isidentifier() or name in self.names:
                self.fail(f"a bad or repeated group name {name!r}")
            self.pos = end + 1
            self.groups += 1
            index = self.names[name] = self.groups
        elif self.peek() == "?":
            self.fail("a group kind other than (?: and (?P<name>")
        else:
            self.groups += 1
            index = self.groups
        body = self.alternation()
        if self.peek() != ")":
            self.pos = start
            self.fail("an unclosed '('")
        self.pos += 1
        return Group(body, index, name)

    def char_set(self) -> CharSet | Char:
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        members: set[str] = set()
        first = True
        while True:
            char = self.peek()
            if char is None:
                self.pos = start
                self.fail("an unclosed '['")
            if char == "]" and not first:
                self.pos += 1
                break
            first = False
            low = self.set_char()
            if self.peek() == "-" and self.pos + 1 < len(self.text) and self.text[self.pos + 1] != "]":
                self.pos += 1
                high = self.set_char()
                if ord(high) < ord(low):
                    self.fail("a class range out of order")
                members.update(chr(code) for code in range(ord(low), ord(high) + 1))
            else:
                members.add(low)
        if len(members) == 1 and not negated:
            return Char(next(iter(members)))
        return CharSet(frozenset(members), negated)

    def set_char(self) -> str:
        char = self.text[self.pos]
        self.pos += 1
        if char == "\\":
            return self.escape()
        if char == "[":
            self.fail("a nested '[' (write \\[)")
        return char
