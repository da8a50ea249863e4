"""The native matcher (ingest/native.py + the extension module built from _native.c) gives exactly what polars gives
(and Python `re`, the oracle these tests hold both to): the same rows, the same captures, the same typed values;
what it cannot decide it leaves to polars. And with it off (SPECLOGS_NATIVE=0, or the extension not built)
everything still runs, with the same results.

Inputs are the real fixture logs, the messages after their prefix, and variants of them made deterministically
(truncations, broken numbers, non-ASCII, CR, ...)."""

from __future__ import annotations

import itertools
import random
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from conftest import ROOT, cli_env
from speclogs import ingest_paths
from speclogs.grammar import cast_expr, load_grammars
from speclogs.ingest import lines, native
from speclogs.ingest.classify import classify, compile_engine
from speclogs.ingest.lines import build_lines

ALL_LOGS = sorted((ROOT / "fixtures").glob("**/*.log"))
SERVER_LOGS = [path for path in ALL_LOGS if "excerpts" not in path.parts]  # whole server logs from the device
NATIVE_ON = native.available()
needs_native = pytest.mark.skipif(not NATIVE_ON, reason=f"native matcher unavailable: {native.unavailable_reason()}")

# numbers that break a reader: int64 bounds and past them, signs, leading zeros, more digits than a double holds
INT_EDGES = ("9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809",
             "1" * 30, "-0", "007", "0" * 30 + "1")
FLOAT_EDGES = ("0.1", "-0", "-0.0", "007", "123456789012345678.5", "1.0000000000000000000000001", "9007199254740993",
               "9007199254740992", "0.0000000000000000000001", "0.00000000000000000000001", "1" * 30,
               "2599879358118702.80", "896031015877463.607")  # the last two: a double of the digits, divided, rounds wrong
BROKEN_NUMBERS = ("1.", "-", "--5", "1.2.3", "1" * 30, "-" + "9" * 30, ".5", "")


# ----------------------------------------------------------------------------------------------------------------
# helpers


def native_match(series: pl.Series, prog: native.Program, fields: dict[str, str]):
    """(hit rows, typed columns of the hits native converted, positions in the hits it left to polars), or None
    when some row is undecided."""
    found = native.classify(series, native.Patterns([(prog, "", fields)]))
    if found is None:
        return None
    rows = np.flatnonzero(found.winner == 0)
    columns, left = native.values(found, rows, 0)
    return rows, columns, np.asarray(left, dtype=np.int64)


def decided_match(strings: list[str], prog: native.Program, fields: dict[str, str], series: pl.Series | None = None):
    """native_match over `strings`, bisecting around undecided rows: ({row: {group: value}}, left rows, undecided rows)."""
    got: dict[int, dict] = {}
    left_rows: list[int] = []
    undecided: list[int] = []
    series = pl.Series("s", strings, dtype=pl.Utf8) if series is None else series

    def run(at: np.ndarray | None) -> None:
        result = native_match(series if at is None else series.gather(at), prog, fields)
        if result is None:
            at = np.arange(len(strings)) if at is None else at
            if len(at) == 1:
                undecided.append(int(at[0]))
                return
            run(at[: len(at) // 2])
            run(at[len(at) // 2 :])
            return
        rows, columns, left = result
        positions = rows if at is None else at[rows]
        kept = np.delete(positions, left)
        lists = [(name, columns[name].to_list()) for name in columns]
        for k, row in enumerate(kept.tolist()):
            got[row] = {name: values[k] for name, values in lists}
        left_rows.extend(positions[left].tolist())

    run(None)
    return got, sorted(left_rows), undecided


def re_matches(regex: str, strings: list[str]) -> dict[int, dict]:
    """{row: groupdict} of the strings Python's re.match matches."""
    matches = list(map(re.compile(regex).match, strings))
    hit = np.flatnonzero(np.fromiter(map(bool, matches), dtype=bool, count=len(strings)))
    return {i: matches[i].groupdict() for i in hit.tolist()}


def exact(values: list) -> list:
    """Floats by their bits (-0.0 is not 0.0, no rounding slack); everything else as it is."""
    return [v.hex() if isinstance(v, float) else v for v in values]


def same_claims(a, b) -> None:
    assert sorted(a.frames) == sorted(b.frames)
    for name in a.frames:
        left, right = a.frames[name].sort("line_no", "piece"), b.frames[name].sort("line_no", "piece")
        assert left.schema == right.schema, name
        assert left.equals(right), name
        assert_frame_equal(left, right, check_exact=True)
    assert a.unclaimed.equals(b.unclaimed)
    assert a.unclaimed.schema == b.unclaimed.schema
    assert a.prefixed.sort().equals(b.prefixed.sort())
    assert_frame_equal(a.drift, b.drift, check_exact=True)
    assert a.server_args_text == b.server_args_text


def piece_frame(texts: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {"line_no": range(1, len(texts) + 1), "piece": [0] * len(texts), "text": texts},
        schema={"line_no": pl.Int64, "piece": pl.Int32, "text": pl.Utf8},
    )


class NativeCalls:
    """Records what native.classify returned (it still runs for real): proves the native path was taken."""

    def __init__(self, monkeypatch) -> None:
        self.results: list = []
        real = native.classify

        def spy(*args, **kwargs):
            result = real(*args, **kwargs)
            self.results.append(result)
            return result

        monkeypatch.setattr(native, "classify", spy)

    @property
    def decided(self) -> int:
        return sum(r is not None for r in self.results)


# ----------------------------------------------------------------------------------------------------------------
# shared inputs


@pytest.fixture(scope="module")
def engine():
    return compile_engine(load_grammars())


@pytest.fixture(scope="module")
def polars_engine():
    """The same grammars with every scope on polars (what runs where the extension is not built)."""
    return compile_engine(load_grammars(), use_native=False)


@pytest.fixture(scope="module")
def fixture_pieces() -> list[str]:
    texts: list[str] = []
    for path in ALL_LOGS:
        texts += build_lines(path.read_bytes()).frame.get_column("text").to_list()
    assert len(ALL_LOGS) >= 20 and len(texts) > 20_000
    return texts


@pytest.fixture(scope="module")
def fixture_messages(engine, fixture_pieces) -> list[str]:
    prefix = re.compile(engine.prefix_regex)
    messages = [text[m.end():] for text in fixture_pieces if (m := prefix.match(text))]
    assert len(messages) > 5_000
    return messages


def variants(text: str, rng: random.Random) -> list[str]:
    """Broken copies of a real line: what a reader of the format must turn down or read exactly."""
    out = [text[: rng.randrange(len(text))]] if text else []
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    if digits:
        i = rng.choice(digits)
        out += [text[:i] + c + text[i + 1 :] for c in ("-", ".", "x", "é", "日")]
        numbers = list(re.finditer(r"[0-9]+(?:\.[0-9]+)?", text))
        for value in rng.sample(BROKEN_NUMBERS + INT_EDGES + FLOAT_EDGES, 8):
            number = rng.choice(numbers)
            out.append(text[: number.start()] + value + text[number.end() :])
    spaces = [i for i, c in enumerate(text) if c == " "]
    if spaces:
        i = rng.choice(spaces)
        out.append(text[:i] + " " + text[i:])
    if "," in text:
        out += [text.replace(",", "", 1), text.replace(",", "")]
    if text:
        i = rng.randrange(len(text) + 1)
        out += [text[:i] + "\r" + text[i:], text[:i] + "\x1b[0m" + text[i:], text[:i] + "\x00" + text[i:]]
    return out


@pytest.fixture(scope="module")
def pool(fixture_pieces, fixture_messages) -> list[str]:
    """Every distinct fixture piece and message, and broken variants of one line of each shape."""
    real = list(dict.fromkeys(fixture_pieces + fixture_messages))
    shapes: dict[str, str] = {}
    for text in real:
        shapes.setdefault(re.sub(r"[0-9]+", "0", text), text)
    rng = random.Random(20261130)
    made = ["", "x" * 12, "x" * 13, "é" * 6, "é" * 7, "[2026-11-30 10:17:21]", "[2026-11-30 10:17:21] ", "日本語のテキスト"]
    for text in shapes.values():
        made += variants(text, rng)
    strings = list(dict.fromkeys(real + made))
    assert all("\n" not in s for s in strings)  # pieces never hold one ('$' differs there between re and polars)
    return strings


# ----------------------------------------------------------------------------------------------------------------
# 1. matching: every grammar regex, and hand-written ones, as Python re matches them


@needs_native
def test_every_grammar_regex_matches_and_captures_like_python_re(engine, pool):
    prefix = native.program(engine.grammars.prefix.regex)
    regexes = [("prefix", engine.grammars.prefix.regex, prefix)]
    regexes += [(c.name, c.pattern.regex, c.native) for c in engine.patterns]
    assert all(prog is not None for _, _, prog in regexes), "every bundled regex is in the native subset"
    assert {"ts", "ms", "rank_tags", "message"} <= prefix.groups.keys() and engine.prefix_native is not None
    failures = []
    undecided_total = 0
    hits_total = 0
    series = pl.Series("s", pool, dtype=pl.Utf8)
    for name, regex, prog in regexes:
        expected = re_matches(regex, pool)
        got, left, undecided = decided_match(pool, prog, {group: "str" for group in prog.groups}, series)
        assert left == [], f"{name}: text is always taken"
        for i in undecided:
            expected.pop(i, None)
        undecided_total += len(undecided)
        hits_total += len(expected)
        if got != expected:
            wrong = sorted(set(got) ^ set(expected) | {i for i in set(got) & set(expected) if got[i] != expected[i]})
            failures.append((name, [(pool[i], got.get(i), expected.get(i)) for i in wrong[:3]]))
    assert failures == []
    assert hits_total > 30_000  # the pool really exercises the patterns
    assert undecided_total <= len(pool) // 100


@needs_native
def test_prefix_regex_on_fixture_lines_gives_re_ts_ranks_and_message(engine, fixture_pieces):
    """The prefix program run the way the ingest runs it (typed fields) on every fixture line."""
    prog = native.program(engine.grammars.prefix.regex)
    fields = {"ts": "str", "ms": "int", "rank_tags": "str", "message": "str"}
    series = pl.Series("text", fixture_pieces)
    result = native_match(series, prog, fields)
    assert result is not None
    rows, columns, left = result
    assert len(left) == 0
    compiled = re.compile(engine.grammars.prefix.regex)
    matches = [(i, m) for i, s in enumerate(fixture_pieces) if (m := compiled.match(s))]
    assert rows.tolist() == [i for i, _ in matches]
    assert columns["ts"].to_list() == [m["ts"] for _, m in matches]
    assert columns["rank_tags"].to_list() == [m["rank_tags"] for _, m in matches]
    assert columns["message"].to_list() == [m["message"] for _, m in matches]
    assert columns["ms"].to_list() == [None if m["ms"] is None else int(m["ms"]) for _, m in matches]
    assert columns["ms"].dtype == pl.Int64


HAND_WRITTEN = [
    # alternation with shared prefixes: the first alternative that lets the rest match wins
    (r"^(?P<w>abc|abd|ab)(?P<rest>.*)$", ["abc", "abd", "ab", "abx", "a", "abcd", ""]),
    (r"^(?P<a>fo|foo|foobar)(?P<b>bar)?$", ["foobar", "foo", "fo", "fobar", "foobarbar", "f"]),
    (r"^(?P<a>foo|foobar)(?P<b>baz|barbaz)$", ["foobarbaz", "foobaz", "foobarbarbaz"]),
    # optional groups: a group that did not take part is None
    (r"^(?P<a>x)?(?P<b>[^ ]+) (?P<c>[^ ]+)?$", ["x y z", "y z", "xy ", " z", "x  z", "é日 本"]),
    (r"^(?:(?P<k>[a-z]+)=)?(?P<v>[0-9]+)$", ["a=1", "1", "=1", "ab=", "ab=12"]),
    # [^ ]+ over non-ASCII text: classes match characters, not bytes
    (r"^(?P<a>[^ ]+) (?P<b>[^ ]+)$", ["é 日", "日本語 テキスト", "a\u00e9b c", "é\u20ac\U0001f600 x", "é  x"]),
    (r"^(?P<a>[^a]+)a(?P<b>.)$", ["éa日", "日日a日", "éaé", "a日"]),
    # bounded repeats counted in characters
    (r"^(?P<a>[^ ]{2,3})(?P<b>.*)$", ["é", "éé", "ééé", "éééé", "日本語テ", "ab", "a", "\U0001f600\U0001f600x"]),
    (r"^(?P<a>.{2,3})(?P<b>.{1,2})$", ["日本", "日本語", "日本語テ", "日本語テキ", "日本語テキス", "ab"]),
    # '.*' then a literal: the run gives characters back until the rest matches
    (r"^(?P<a>.*)x(?P<b>.*)$", ["axbxc", "x", "xx", "日x本x語", "no", "éxé"]),
    (r"^(?P<a>.*)é(?P<b>.?)$", ["aéb", "ééé", "é", "e", "éé日"]),
    (r"^(?P<a>.*), (?P<b>[0-9]+)$", ["a, 1, 2", "x, 12", ", 1", "a,1", "a, 1x"]),
    # a repeated group, and a capture inside one (the last iteration's)
    (r"^(?:ab)*c", ["c", "abc", "ababc", "abac", "ab", "abab"]),
    (r"^(?P<g>(?:ab)*)c$", ["c", "abc", "ababc", "abababc", "ac"]),
    (r"^(?:(?P<a>a)|b)*c", ["abc", "bac", "c", "bbc", "aac"]),
    (r"^(?P<a>(?:ab|a)*)b$", ["ab", "abb", "aab", "ababb", "b"]),
    # a number followed by something that can start with a digit or '.': no one-step number there
    (r"^(?P<a>[0-9]+)(?P<b>[0-9])$", ["12", "1", "123", "1234567", "1a", ""]),
    (r"^(?P<a>-?[0-9]+(?:\.[0-9]+)?)\.(?P<b>[0-9]+)$", ["1.5.2", "1.2", "-1.2.3", "12.", "1..2"]),
    (r"^(?P<a>-?[0-9]+(?:\.[0-9]+)?)(?P<b>[0-9.]*)$", ["1.5.2", "12", "1.", "-3.25x", "-.5"]),
    (r"^(?P<a>-?[0-9]+)(?P<b>-?[0-9]+)$", ["1-2", "12", "-1-2", "-12", "1--2"]),
    # numbers where they are exact
    (r"^(?P<a>-?[0-9]+(?:\.[0-9]+)?), (?P<b>[0-9]+)$", ["1.5, 2", "-1, 2", "1., 2", "--1, 2", "1.2.3, 4", ".5, 1"]),
    (r"^(?P<n>-?[0-9]+)(?: (?P<t>.*))?$", ["5", "-5 ok", "5 ", "- 5", "5x"]),
    (r"^(?P<a>.*)(?P<b>[0-9]+)$", ["abc123", "1", "12", "a"]),
    # empty text, a class with ']' and '-', '$' after a run
    (r"^(?P<a>[^\]]*)\](?P<b>[\-.0-9]+)$", ["x]1.5", "]-", "a]b", "日]9"]),
    (r"^(?P<a>a*)(?P<b>a*)$", ["", "a", "aaa", "ab"]),
    (r"^(?P<a>[é])(?P<b>.)", ["éx", "ex", "é"]),
    (r"^(?P<a>(?:x[0-9]){1,3})(?P<b>x?[0-9]*)$", ["x1x2x3x4", "x1", "x1x", "x12"]),
]


@needs_native
@pytest.mark.parametrize("regex,strings", HAND_WRITTEN, ids=[regex for regex, _ in HAND_WRITTEN])
def test_hand_written_regex_matches_like_python_re(regex, strings):
    prog = native.program(regex)
    assert prog is not None
    rng = random.Random(regex)
    alphabet = ["a", "b", "c", "x", "0", "1", "9", ".", "-", " ", ",", "]", "=", "é", "日"]
    strings = list(dict.fromkeys(strings + ["".join(rng.choice(alphabet) for _ in range(rng.randrange(8))) for _ in range(400)]))
    expected = re_matches(regex, strings)
    got, left, undecided = decided_match(strings, prog, {group: "str" for group in prog.groups})
    assert undecided == [] and left == []
    assert got == expected
    assert expected  # each case has hits


@needs_native
def test_number_step_only_where_no_shorter_number_could_match():
    """OP_NUM reads a whole number in one step; it must not be used where the rest can start with a digit."""
    def opcodes(regex: str) -> set[int]:
        return set(native.program(regex).code[:, 0].tolist())

    assert native.OP_NUM not in opcodes(r"^(?P<a>[0-9]+)(?P<b>[0-9])$")
    assert native.OP_NUM not in opcodes(r"^(?P<a>[0-9]+(?:\.[0-9]+)?)\.x$")
    assert native.OP_NUM not in opcodes(r"^(?P<a>-?[0-9]+)(?P<b>.*)$")  # anything may follow
    assert native.OP_NUM in opcodes(r"^(?P<a>-?[0-9]+(?:\.[0-9]+)?), (?P<b>[0-9]+)$")
    assert native.OP_NUM in opcodes(r"^(?P<a>-?[0-9]+)\]")


class RandomRegex:
    """Random regexes of the native subset: literals, classes, '.', the number shapes, capturing and plain groups,
    alternation, greedy repeats."""

    ATOMS = ("a", "b", "0", "1", r"\.", "-", " ", "é", "ab", "a1", "[ab]", "[^ ]", "[0-9]", "[^a]", ".", "[.0-9]", "[^,]")
    NUMBERS = (r"-?[0-9]+(?:\.[0-9]+)?", r"-?[0-9]+", r"[0-9]+(?:\.[0-9]+)?", r"[0-9]+")
    REPEATS = ("*", "+", "?", "{2}", "{1,2}", "{0,3}", "{2,}")

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.groups = 0

    def regex(self) -> str:
        self.groups = 0
        return "^" + self.alternation(0) + self.rng.choice(["", "$"])

    def alternation(self, depth: int) -> str:
        return "|".join(self.sequence(depth) for _ in range(self.rng.choice([1, 1, 1, 2, 3])))

    def sequence(self, depth: int) -> str:
        return "".join(self.repeat(depth) for _ in range(self.rng.randrange(1, 4)))

    def repeat(self, depth: int) -> str:
        atom = self.atom(depth)
        return atom if self.rng.random() < 0.55 else atom + self.rng.choice(self.REPEATS)

    def atom(self, depth: int) -> str:
        r = self.rng.random()
        if depth > 2 or r < 0.35:
            return self.rng.choice(self.ATOMS)
        if r < 0.5:
            return self.rng.choice(self.NUMBERS) if self.rng.random() < 0.5 else "(?:" + self.alternation(depth + 1) + ")"
        if r < 0.8:
            self.groups += 1
            body = self.rng.choice(self.NUMBERS) if self.rng.random() < 0.4 else self.alternation(depth + 1)
            return f"(?P<g{self.groups}>{body})"
        return "(?:" + self.alternation(depth + 1) + ")"


@needs_native
def test_random_regexes_match_like_polars_and_re():
    """Native must equal polars (whose place it takes) always, and Python re wherever re and polars agree."""
    rng = random.Random(99)
    alphabet = ["a", "b", "0", "1", ".", "-", " ", "é"]
    strings = sorted({"".join(t) for n in range(4) for t in itertools.product(alphabet, repeat=n)}
                     | {"".join(rng.choice(alphabet) for _ in range(rng.randrange(4, 14))) for _ in range(800)})
    series = pl.Series("s", strings)
    generator = RandomRegex(20261130)
    compared = 0
    for _ in range(350):
        regex = generator.regex()
        prog = native.program(regex)
        if prog is None:
            continue
        result = native_match(series, prog, {g: "str" for g in prog.groups})
        if result is None:
            continue  # some row undecided: polars does them all
        rows, columns, _ = result
        lists = {g: columns[g].to_list() for g in prog.groups}
        got = {int(r): {g: lists[g][k] for g in prog.groups} for k, r in enumerate(rows)}
        extracted = series.str.extract_groups("^(?P<_hit_>)" + regex[1:]).struct.unnest()
        hit = extracted.get_column("_hit_").is_not_null().to_list()
        polars_lists = {g: extracted.get_column(g).to_list() for g in prog.groups}
        polars = {i: {g: polars_lists[g][i] for g in prog.groups} for i in range(len(strings)) if hit[i]}
        assert got == polars, regex
        python = re_matches(regex, strings)
        if python == polars:
            assert got == python, regex
        compared += 1
    assert compared > 90


@pytest.mark.parametrize("regex", [r"^\d+", r"^(?=x)x", "abc", r"^a+?", r"(?i)^abc", r"^\w+", r"^a\b", r"^(a)\1",
                                   r"^(?>a)", r"^a*+", r"^\s", r"^(?:a*)*b", r"^[^é]", r"^é+", r"^(?P<a>.*?)x",
                                   r"^a|b", r"^(?i:a)b", r"^\Aab"])
def test_regex_outside_the_subset_has_no_program(regex):
    re.compile(regex)  # valid for re: it stays on polars
    assert native.program(regex) is None


@needs_native
def test_where_re_and_polars_disagree_native_follows_polars():
    """An empty iteration of a bounded repeat: Python re stops the loop there, Rust's regex (polars, the fast path
    native replaces) takes the next alternative. No bundled regex has this shape; native must side with polars."""
    regex = r"^(?P<a>| 0){0,2}-"
    strings = [" 0-", " 0 0-", "-", "x-"]
    polars_groups = pl.Series(strings).str.extract_groups(regex).struct.field("a").to_list()
    assert polars_groups == [" 0", " 0", "", None]
    assert re.match(regex, " 0-")["a"] == ""  # re differs
    got, left, undecided = decided_match(strings, native.program(regex), {"a": "str"})
    assert left == [] and undecided == []
    assert {strings[i]: v["a"] for i, v in got.items()} == {" 0-": " 0", " 0 0-": " 0", "-": ""}


# ----------------------------------------------------------------------------------------------------------------
# 2. typed values as polars casts them


HOT = ("decode_batch_common", "prefill_batch_common", "prefill_batch_059_common", "uvicorn_access")


def _hot_inputs(engine, name: str, messages: list[str]) -> list[str]:
    compiled = engine.pattern(name)
    regex = re.compile(compiled.hit_regex)
    prefix = re.compile(engine.prefix_regex)
    samples = [s.line[m.end():] for s in compiled.pattern.samples if (m := prefix.match(s.line))]
    base = list(dict.fromkeys([s for s in messages if regex.match(s)] + [s for s in samples if regex.match(s)]))
    assert base, name
    numeric = [f.name for f in compiled.pattern.fields if f.type in ("int", "float", "pct")]
    made = []
    for text in base[:3] + samples:
        m = regex.match(text)
        if m is None:
            continue
        for field in numeric:
            start, end = m.span(field)
            if start < 0:
                continue
            for value in INT_EDGES + FLOAT_EDGES + BROKEN_NUMBERS:
                made.append(text[:start] + value + text[end:])
    return list(dict.fromkeys(base + made))


@needs_native
@pytest.mark.parametrize("name", HOT)
def test_hot_pattern_typed_values_equal_polars_casts(engine, fixture_messages, name):
    compiled = engine.pattern(name)
    fields = {f.name: f.type for f in compiled.pattern.fields}
    strings = _hot_inputs(engine, name, fixture_messages)
    src = pl.Series("src", strings)
    result = native_match(src, compiled.native, fields)
    assert result is not None
    rows, columns, left = result
    extracted = src.str.extract_groups(compiled.hit_regex).struct.unnest()
    polars_hits = np.flatnonzero(extracted.get_column("_hit").is_not_null().to_numpy())
    assert rows.tolist() == polars_hits.tolist()
    kept = np.delete(np.arange(len(rows)), left)
    assert len(kept) + len(left) == len(rows) and len(set(kept.tolist()) | set(left.tolist())) == len(rows)
    typed = extracted.gather(rows).select(cast_expr(pl.col(f), t).alias(f) for f, t in fields.items())
    assert sorted(columns) == sorted(fields)
    for field in fields:
        assert columns[field].dtype == typed.get_column(field).dtype, field
        assert exact(columns[field].to_list()) == exact(typed.get_column(field).gather(kept).to_list()), field
    if name != "uvicorn_access":  # floats past 2^53 or with > 22 decimals are left to polars
        assert len(left) > 0
        left_text = [strings[rows[j]] for j in left]
        assert any("123456789012345678.5" in t or "1.0000000000000000000000001" in t for t in left_text)
    # the edge values really were read: overflow is NULL, '-0' and '007' are numbers
    if name == "decode_batch_common":
        running = dict(zip([strings[r] for r in rows[kept]], columns["running_req"].to_list()))
        over = next(t for t in running if "#running-req: 9223372036854775808," in t)
        assert running[over] is None
        assert running[next(t for t in running if "#running-req: 9223372036854775807," in t)] == 2**63 - 1
        assert running[next(t for t in running if "#running-req: 007," in t)] == 7


@needs_native
def test_every_pattern_typed_values_equal_polars_casts(engine, pool):
    """All patterns, their own field types, on the pool rows holding their gate."""
    checked = 0
    for compiled in engine.patterns:
        gate = compiled.pattern.gate
        strings = [s for s in pool if gate in s] if gate else pool
        if not strings:
            continue
        fields = {f.name: f.type for f in compiled.pattern.fields}
        src = pl.Series("src", strings, dtype=pl.Utf8)
        result = native_match(src, compiled.native, fields)
        if result is None:
            continue  # undecided: polars does the chunk (its rows are compared in the test above)
        rows, columns, left = result
        extracted = src.str.extract_groups(compiled.hit_regex).struct.unnest()
        assert rows.tolist() == np.flatnonzero(extracted.get_column("_hit").is_not_null().to_numpy()).tolist(), compiled.name
        if not len(rows):
            continue
        kept = np.delete(np.arange(len(rows)), left)
        typed = extracted.gather(rows[kept]).select(cast_expr(pl.col(f), t).alias(f) for f, t in fields.items())
        for field in fields:
            assert exact(columns[field].to_list()) == exact(typed.get_column(field).to_list()), (compiled.name, field)
        checked += len(kept)
    assert checked > 20_000


@needs_native
def test_every_field_type_on_hand_written_values_equals_polars_casts():
    """int, float, pct, bool and text read from loose captures (anything the class allows): what C takes equals
    polars' cast, what it does not take is left to polars; plain numbers are always taken."""
    regex = r"^(?P<_hit>)(?P<i>[^ ]*) (?P<f>[^ ]*) (?P<p>[^ ]*) (?P<b>[^ ]*)(?: (?P<t>.*))?$"
    fields = {"i": "int", "f": "float", "p": "pct", "b": "bool", "t": "str"}
    values = ["0", "-0", "007", "1", "-1", "42", "0.5", "-2.25", "1.", ".5", "+5", "1e5", "1_000", " ", "", "-", "x",
              "nan", "inf", "True", "true", "False", "TrueX", "Tru", "12.5%", "5%%", "%", "-3%", "é", "日",
              *INT_EDGES, *FLOAT_EDGES]
    rng = random.Random(7)
    strings = [" ".join(rng.choice(values) or "0" for _ in range(4)) + rng.choice(["", " tail é", " "]) for _ in range(3000)]
    strings += [f"{v} {v} {v} {v} {v}" for v in values if " " not in v]
    plain = ["1 0.5 12.5% True", "-0 -2.25 -3% False tail é", "007 42 1 x", "9223372036854775807 0.1 0 True"]
    strings += plain
    src = pl.Series("src", strings)
    result = native_match(src, native.program(regex), fields)
    assert result is not None
    rows, columns, left = result
    extracted = src.str.extract_groups(regex).struct.unnest()
    assert rows.tolist() == np.flatnonzero(extracted.get_column("_hit").is_not_null().to_numpy()).tolist()
    kept = np.delete(rows, left)
    typed = extracted.gather(kept).select(cast_expr(pl.col(f), t).alias(f) for f, t in fields.items())
    for field in fields:
        assert exact(columns[field].to_list()) == exact(typed.get_column(field).to_list()), field
        assert columns[field].dtype == typed.get_column(field).dtype
    assert 0 < len(left) < len(rows)
    assert set(range(len(strings) - len(plain), len(strings))) <= set(kept.tolist())  # plain numbers: read in C


# ----------------------------------------------------------------------------------------------------------------
# 3. classify: native and polars give the same claims


def _fixture_line(engine, name: str) -> str:
    return next(s.line for s in engine.pattern(name).pattern.samples if s.line.startswith("[20"))


def odd_log(engine) -> bytes:
    decode = _fixture_line(engine, "decode_batch_common")
    prefill = _fixture_line(engine, "prefill_batch_common")
    access = _fixture_line(engine, "uvicorn_access")
    args = next(s for s in (SERVER_LOGS[0].read_text().splitlines()) if "server_args=" in s)
    broken = decode.replace("#token: ", "#token: x", 1)  # the gate holds, the regex does not: drift
    message = decode.split("] ", 1)[1]
    text = "\n".join([
        args,
        decode + "\r",  # CRLF
        "\x1b[32m" + prefill + "\x1b[0m",  # ANSI
        "^[[31m" + decode + "^[[0m",  # pasted escapes
        "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.00it/s]\r" + decode,
        "Capturing batches (bs=4 avail_mem=10.00 GB): 100%|██████████| 4/4 [00:01<00:00,  3.20it/s]" + decode,
        "[pod/sglang-0/server] " + access,
        "sglang-1  | " + decode,
        "",
        "   \t",
        decode[:40] + "x" * 200_000,  # very long (under MAX_LINE_BYTES)
        "Traceback (most recent call last):",
        '  File "/srv/sglang/scheduler.py", line 12, in event_loop',
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "INFO 11-30 10:17:21 [api_server.py:1024] vLLM API server version 0.6.3",
        broken,
        decode.replace("Decode batch", "Decode batch.", 1),
        "[2026-11-30 10:17:21 DP1 TP3 EP2] " + message,
        "[2026-11-30 10-17:21 TP0] " + message,  # not a prefix
        "[2026-11-30 10:17:21.123 TP0] " + message,
        "[2026-11-30 10:17:21.-5] " + message,
        "[2026-11-30 10:17:21.99999999999999999999 TP1] " + message,  # ms past int64: NULL
        "[2026-02-30 10:17:21] " + message,  # impossible date
        "[2026-11-30 23:59:60 TP1] " + message,  # leap second
        "[2024-02-29 24:00:00] " + message,
        "[10:17:21] " + message,  # no date
        "[11-30 10:17:21 TP0] " + message,
        "[2026-11-30 10:17:21]" + message,  # no space after the prefix
        "[2026-11-30 10:17:21] Décodage: 日本語 ünïcödé \x00 \x7f",
        decode.replace("0.00", "123456789012345678.5", 1),  # a float C does not take
        "",
    ])
    return text.encode("utf-8")


@needs_native
def test_classify_native_equals_polars_on_every_fixture_log(engine, polars_engine, monkeypatch):
    data = b"".join(path.read_bytes() for path in ALL_LOGS)
    frame = build_lines(data).frame
    calls = NativeCalls(monkeypatch)
    fast = classify(engine, frame)
    assert calls.decided == 3 and len(calls.results) == 3  # prefix split + the two scopes, none undecided
    slow = classify(polars_engine, frame)
    assert len(calls.results) == 3  # polars path: no native call
    same_claims(fast, slow)
    assert fast.frames["decode_batch_common"].height > 2000
    assert sum(f.height for f in fast.frames.values()) + fast.unclaimed.height == frame.height


@needs_native
def test_classify_native_equals_polars_on_odd_lines(engine, polars_engine, monkeypatch):
    frame = build_lines(odd_log(engine)).frame
    calls = NativeCalls(monkeypatch)
    fast = classify(engine, frame)
    assert calls.decided == len(calls.results) == 3
    slow = classify(polars_engine, frame)
    same_claims(fast, slow)
    assert fast.drift.filter(pl.col("pattern") == "decode_batch_common").height >= 1  # the drift line
    assert fast.server_args_text  # the server_args dump
    decode = fast.frames["decode_batch_common"]
    assert decode.height >= 10
    assert 123456789012345678.5 in decode.get_column("token_usage").to_list()  # left to polars, read there
    assert fast.unclaimed.filter(pl.col("text").str.contains("vLLM API server")).height == 1


@needs_native
def test_classify_native_equals_polars_on_broken_variants(engine, polars_engine, pool, monkeypatch):
    frame = piece_frame(pool)
    calls = NativeCalls(monkeypatch)
    fast = classify(engine, frame)
    assert calls.decided == len(calls.results) == 3
    slow = classify(polars_engine, frame)
    same_claims(fast, slow)
    assert fast.drift.height > 1000


@needs_native
@pytest.mark.parametrize("data", [b"", b"\n\n", b"plain text only\n", b"[2026-11-30 10:17:21] hello\n", b"[pod/x] \n"],
                         ids=["empty", "blank", "no_prefixed", "only_prefixed", "empty_after_peel"])
def test_classify_native_equals_polars_on_tiny_frames(engine, polars_engine, data):
    frame = build_lines(data).frame
    fast, slow = classify(engine, frame), classify(polars_engine, frame)
    same_claims(fast, slow)
    assert fast.prefixed.len() == (1 if data.startswith(b"[2026") else 0)


# ----------------------------------------------------------------------------------------------------------------
# 4. splitting lines


LINE_INPUTS = {
    "crlf": b"[2026-11-30 10:17:21] a\r\n[2026-11-30 10:17:22] b\r\n",
    "cr_inside": b"progress 1\rprogress 2\r[2026-11-30 10:17:21] done\nx\r\r\n",
    "ansi": b"\x1b[32m[2026-11-30 10:17:21] green\x1b[0m\nplain\n",
    "pasted_escape": b"^[[31m[2026-11-30 10:17:21] red^[[0m\n^[[ only\n^[\n[2026-11-30 10:17:21] ^[[1mbold^[[0m\n[x]^[[\n",
    "bracketed_odd": b"[2026-11-30 10:17:21] a\x1b[0m b\n[2026-11-30 10:17:21] 1\r[2026-11-30 10:17:22] 2\n[x\x1b]\n",
    "pod_prefix": b"[pod/a/b] [2026-11-30 10:17:21] x\n[pod/a/b] \n[pod/\n",
    "blank_lines": b"\n\n   \n\t\n\x0b\x0c\nx\n\n",
    "no_final_newline": b"first\nlast line",
    "final_cr": b"a\nb\r",
    "only_newline": b"\n",
    "empty": b"",
    "nul_bytes": b"a\x00b\n\x00\n[\x00]\n",
    "multibyte": "é日本\U0001f600\n[2026-11-30 10:17:21] ünï日\n".encode(),
    "inline_sizes": b"123456789012\n1234567890123\n12345678901\n",
    "x01": b"a\x01b\nc\n",
    "glued_nccl": b"text node1:123:456 [0] NCCL INFO x\nmore [2026-11-30 10:17:21] y\n",
    "too_long": b"[2026-11-30 10:17:21] start\n[" + b"x" * (lines.MAX_LINE_BYTES + 10) + b"\r\n"
                + b"y" * lines.MAX_LINE_BYTES + b"\nend",
}


def _lines_without_native(data: bytes, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(native, "available", lambda: False)
        return lines.build_lines(data, first_line_no=7), lines.count_lines(data)


@needs_native
@pytest.mark.parametrize("name", sorted(LINE_INPUTS))
def test_build_lines_native_equals_python_split(name, monkeypatch):
    data = LINE_INPUTS[name]
    native_lines, native_count = lines.build_lines(data, first_line_no=7), lines.count_lines(data)
    plain, plain_count = _lines_without_native(data, monkeypatch)
    assert native_lines.total_lines == plain.total_lines == native_count == plain_count
    assert native_lines.frame.schema == plain.frame.schema
    assert native_lines.frame.equals(plain.frame)
    assert native_lines.raw.to_list() == plain.raw.to_list()
    assert native_lines.blank == plain.blank
    assert native_lines.too_long == plain.too_long
    assert native_lines.first_line_no == plain.first_line_no == 7
    # and what they agree on is right
    expected_lines = data.split(b"\n")
    if expected_lines and expected_lines[-1] == b"":
        expected_lines.pop()
    assert native_count == len(expected_lines)
    expected_raw = [line[:-1] if line.endswith(b"\r") else line for line in expected_lines]
    assert [r.encode() for r in native_lines.raw.to_list()] == expected_raw
    assert not any("\r" in t or lines.ANSI_RE.search(t) for t in native_lines.frame.get_column("text").to_list())
    if name == "too_long":
        assert native_lines.too_long == ((8, lines.MAX_LINE_BYTES + 11),)
        assert 9 not in [r for r, _ in native_lines.too_long]  # exactly MAX_LINE_BYTES is parsed
        assert 9 in native_lines.frame.get_column("line_no").to_list()
    if name == "blank_lines":
        assert native_lines.blank == (7, 8, 9, 10, 11, 13)


# ----------------------------------------------------------------------------------------------------------------
# 5. end to end: the same DuckDB rows with the native matcher on and off


COMPARED_TABLES = ("decode_batches", "prefill_batches", "http_requests", "server_events", "errors", "unparsed_lines",
                   "launches", "server_args", "nccl_events", "foreign_lines", "parse_drift", "spec_cycles",
                   "bench_summary", "line_accounting", "runs", "files")
VOLATILE = {"ingested_at", "parse_seconds", "warnings"}  # files.warnings: only the run without native says so


def _table_rows(db: Path) -> dict[str, list[tuple]]:
    connection = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for table in COMPARED_TABLES:
            columns = [row[0] for row in connection.execute(f"DESCRIBE {table}").fetchall() if row[0] not in VOLATILE]
            listed = ", ".join(f'"{c}"' for c in columns)
            out[table] = connection.execute(f"SELECT {listed} FROM {table} ORDER BY ALL").fetchall()
        return out
    finally:
        connection.close()


@needs_native
def test_ingest_same_tables_with_native_on_and_off(engine, tmp_path, monkeypatch):
    data = b""
    for path in ALL_LOGS:
        data += path.read_bytes()
        if len(data) >= 1 << 20:
            break
    data += odd_log(engine)
    log = tmp_path / "combined.log"
    log.write_bytes(data)
    calls = NativeCalls(monkeypatch)
    summary = ingest_paths([log], tmp_path / "native.duckdb")
    assert summary.files_ingested == 1
    assert calls.decided >= 3 and calls.decided == len(calls.results)
    env = cli_env()
    env["SPECLOGS_NATIVE"] = "0"
    completed = subprocess.run([sys.executable, "-m", "speclogs", "ingest", str(log), "--db", str(tmp_path / "plain.duckdb")],
                               env=env, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    with_native, without = _table_rows(tmp_path / "native.duckdb"), _table_rows(tmp_path / "plain.duckdb")
    for table in COMPARED_TABLES:
        assert with_native[table] == without[table], table
    notes = {}
    for db in ("native.duckdb", "plain.duckdb"):
        connection = duckdb.connect(str(tmp_path / db), read_only=True)
        notes[db] = connection.execute("SELECT warnings FROM files").fetchone()[0] or ""
        connection.close()
    assert "native matcher is off" not in notes["native.duckdb"]
    assert "native matcher is off (SPECLOGS_NATIVE=0)" in notes["plain.duckdb"]
    assert len(with_native["decode_batches"]) > 500
    assert len(with_native["errors"]) >= 1 and len(with_native["parse_drift"]) >= 1
    assert len(with_native["unparsed_lines"]) >= 1 and len(with_native["launches"]) >= 2


# ----------------------------------------------------------------------------------------------------------------
# 6. fallback: switched off, or the extension not built, everything runs on polars with the same results


def test_fallback_without_native_gives_the_same_claims(engine, monkeypatch):
    data = SERVER_LOGS[0].read_bytes() + odd_log(engine)
    reference = classify(engine, build_lines(data).frame) if NATIVE_ON else None

    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert native.available() is False
    assert "SPECLOGS_NATIVE=0" in native.unavailable_reason()
    switched_off_engine = compile_engine(load_grammars())
    assert all(scope.native is None for scope in switched_off_engine.scopes) and switched_off_engine.prefix_native is None
    switched_off = classify(switched_off_engine, build_lines(data).frame)
    assert switched_off.frames["decode_batch_common"].height > 10

    monkeypatch.delenv(native.ENV_SWITCH)
    monkeypatch.setattr(native, "_native", None)  # as installed without a C compiler
    assert native.available() is False
    assert "is not built" in native.unavailable_reason()
    without_extension = classify(compile_engine(load_grammars()), build_lines(data).frame)
    same_claims(without_extension, switched_off)
    if reference is not None:
        same_claims(reference, without_extension)


def test_summary_says_when_a_big_log_ran_without_the_native_matcher(monkeypatch, tmp_path):
    log = tmp_path / "big.log"
    text = b"".join(path.read_bytes() for path in ALL_LOGS)
    end = text.index(b"\n", (512 << 10) + 4096) + 1  # whole lines, just over the size that gets the note
    log.write_bytes(text[:end])
    small = tmp_path / "small.log"
    small.write_bytes(SERVER_LOGS[0].read_bytes()[:20_000].rsplit(b"\n", 1)[0] + b"\n")
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    summary = ingest_paths([log, small], tmp_path / "off.duckdb")
    notes = [w for w in summary.warnings if "native matcher is off (SPECLOGS_NATIVE=0)" in w]
    assert len(notes) == 1 and notes[0].startswith(str(log)), summary.warnings  # the big one only
    if NATIVE_ON:
        monkeypatch.delenv(native.ENV_SWITCH)
        summary = ingest_paths([log], tmp_path / "on.duckdb")
        assert not [w for w in summary.warnings if "native matcher" in w], summary.warnings


@needs_native
def test_anchor_turns_rows_down_and_near_misses_are_kept_where_they_are_read():
    """A row that does not start with a pattern's anchor literal is turned down without a gate search; its near
    miss of that pattern (gate inside, not at the start) is still reported for rows nobody wins and rows whose
    winner has near_after set, the only ones classify._near_misses reads."""
    patterns = [(native.program(r"^Alpha (?P<x>[0-9]+)$"), "Alpha", {"x": "int"}),
                (native.program(r"^Beta (?P<y>[0-9]+)"), "Beta", {"y": "int"}),
                (native.program(r"^(?P<m>x.*)$"), "", {"m": "str"})]
    assert [native._anchor(p) for p, _, _ in patterns] == [b"Alpha ", b"Beta ", b"x"]
    rows = pl.Series(["Alpha 1", "Beta 2", "Beta 3 Alpha", "xx Alpha", "Alpha x", "zz Alpha Beta"])

    def near(near_after):
        found = native.classify(rows, native.Patterns(patterns, near_after))
        assert found.winner.tolist() == [0, 1, 1, 2, -1, -1]
        return sorted(zip(found.near_rows.tolist(), found.near_patterns.tolist()))

    # 'Alpha x': anchor and gate pass, the program misses → a near miss of 0 whatever the flags; 'zz Alpha Beta':
    # nobody wins → its near misses of 0 and 1 (gates inside) and of 2 (no gate) always
    always = [(4, 0), (4, 2), (5, 0), (5, 1), (5, 2)]
    assert near(None) == sorted([(2, 0), (3, 0), *always])
    assert near([False, False, False]) == always
    assert near([False, True, False]) == sorted([(2, 0), *always])
    assert near([False, False, True]) == sorted([(3, 0), *always])


@needs_native
def test_text_flaws_counts_nuls_and_checks_utf8_as_pythons_strict_decoder_does():
    """Texts made of ASCII runs long and short, NUL bytes, valid multi-byte characters and the invalid forms (a stray
    continuation byte, a cut sequence, an overlong form, a surrogate), at every alignment of the 32- and 8-byte steps."""
    pieces = [b"a", b"\0", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xff", b"\x80", b"\xc3", b"\xe2\x82",
              b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"x" * 40, b"[2026-12-01 09:00:00] Decode batch\n"]
    rng = random.Random(14)
    for _ in range(20_000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 24)))
        try:
            data.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        assert native.text_flaws(data) == (data.count(0), valid), data
