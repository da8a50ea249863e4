"""The definition and its compiled form agree: pyparsing and the regex compiled from it (run by polars, the
portable executor, and by DuckDB's RE2) on every grammar sample; every fixture line is claimed; server_args dumps
read as Python would."""

from __future__ import annotations

import ast
import random
import re
import warnings
from pathlib import Path

import duckdb
import polars as pl
import pytest

from speclogs.grammar import cast_value, load_grammars, parse_server_args
from speclogs.grammar.definition import BUILTIN_SHAPES, exact_tree
from speclogs.grammar.loader import compiled_values
from speclogs.grammar.lower import BUILTIN_SHAPE_REGEXES
from speclogs.ingest.classify import classify, compile_engine
from speclogs.ingest.lines import build_lines
from speclogs.ingest.sources import make_valid_text

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_LOGS = sorted((ROOT / "fixtures").glob("*/*/*.log"))
GRAMMARS = load_grammars()
PATTERNS = [GRAMMARS.prefix, *GRAMMARS.patterns]

def _sample_texts(pattern) -> list[str]:
    texts = []
    for s in pattern.samples:
        head = GRAMMARS.prefix.parse(s.line) if pattern.scope == "message" and pattern is not GRAMMARS.prefix else None
        texts.append(head["message"] if head else s.line)
    return texts


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_samples_give_identical_values_in_pyparsing_and_the_compiled_regex(pattern):
    texts = _sample_texts(pattern)
    slow = [pattern.parse(t) for t in texts]
    assert all(v is not None for v in slow)
    assert compiled_values(pattern, texts) == slow


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_regex_is_accepted_by_duckdb_re2_and_full_matches_samples(pattern):
    """The compiled form is the contract's too: a user can run it in DuckDB SQL and get the same matches."""
    texts = _sample_texts(pattern) or ["(expanded variant without its own sample: compile check only)"]
    con = duckdb.connect()
    con.execute("CREATE TABLE samples (t VARCHAR)")
    con.executemany("INSERT INTO samples VALUES (?)", [[t] for t in texts])
    got = con.execute("SELECT regexp_full_match(t, ?) FROM samples", [pattern.regex]).fetchall()
    assert got == [(values is not None,) for values in compiled_values(pattern, texts)]


def test_every_fixture_piece_is_claimed():
    data = b"".join(make_valid_text(path.read_bytes())[0] for path in FIXTURE_LOGS)
    claims = classify(compile_engine(GRAMMARS), build_lines(data).frame)
    assert claims.unclaimed.get_column("text").to_list() == []


def test_fixture_decode_lines_have_the_values_a_user_expects():
    eagle = (ROOT / "fixtures/h200x2-sglang-0.5.14/matrix/eagle3_default.log").read_text().splitlines()
    decode = GRAMMARS.by_name("decode_batch")
    rows = [decode.parse(GRAMMARS.prefix.parse(line)["message"]) for line in eagle if "] Decode batch" in line]
    assert rows and all(r["accept_len"] == 2.0 and r["cuda_graph"] is True for r in rows)


def test_prefix_rank_tags_regexes_agree_with_pyparsing():
    lines = ["[2025-05-31 18:31:21 DP0 TP0] x", "[2024-11-28 08:12:40 DP-1 TP0] x", "[2026-05-27 10:01:02 ATTN_CP1 MOE_DP2 TP3] x",
             "[2026-11-30 10:19:31] x"]
    for line in lines:
        slow = GRAMMARS.prefix.parse(line)
        tags = pl.Series([slow["rank_tags"]])
        for column, rx in GRAMMARS.rank_tag_regexes.items():
            got = tags.str.extract(rx, 1).to_list()[0]
            assert cast_value("int", got) == slow[column], (line, column)


# ---------------------------------------------------------------------------------------------------------------
# server_args


def _dumps() -> list[tuple[Path, str]]:
    out = []
    for path in FIXTURE_LOGS:
        for line in path.read_text(encoding="utf-8").splitlines():
            if "] server_args=" in line:
                out.append((path, line))
    return out


def test_parse_server_args_reads_every_real_dump():
    dumps = _dumps()
    assert len(dumps) == len(FIXTURE_LOGS)
    for path, line in dumps:
        args = parse_server_args(line)
        expected = len(ast.parse(line.split("server_args=", 1)[1], mode="eval").body.keywords)
        assert len(args) == expected == 404, path
        values = {name: value for name, _, value in args}
        assert values["tp_size"] == 2
        assert values["mem_fraction_static"] == 0.5
        assert values["speculative_algorithm"] == ("EAGLE3" if "eagle3" in path.name else None)
        reprs = {name: text for name, text, _ in args}
        assert reprs["speculative_algorithm"] in ("'EAGLE3'", "None")


def test_parse_server_args_tolerates_non_literals_dicts_and_truncation():
    assert parse_server_args("ServerArgs(a='x, y', b={'k': (1, 2)}, c=<X object at 0x7f1>, d=None, e='cut") == [
        ("a", "'x, y'", "x, y"), ("b", "{'k': (1, 2)}", {"k": (1, 2)}), ("c", "<X object at 0x7f1>", None), ("d", "None", None),
    ]
    assert parse_server_args("server_args={'model_path': 'Qwen/Qwen3-8B', 'tp_size': 2, 'x': inf}") == [
        ("model_path", "'Qwen/Qwen3-8B'", "Qwen/Qwen3-8B"), ("tp_size", "2", 2), ("x", "inf", None),
    ]
    assert parse_server_args("") == [] and parse_server_args("garbage (((") == []
    assert parse_server_args("ServerArgs(s='it\\'s, ok', t=\"a)b\")") == [("s", "'it\\'s, ok'", "it's, ok"), ("t", '"a)b"', "a)b")]


def test_server_args_values_are_what_python_reads_from_them():
    # the common shapes are read without ast.literal_eval; each must come out as Python reads it (None where it cannot)
    texts = ["007", "-0", "1_000", "0x10", "1e5", "1.", ".5", "+1", "-0.0", "00.5", "0.88", "9" * 25, "12.50", "''", '""',
             r"'a\'b'", "'a\"b'", "'\t'", "'é'", "'\u200b'", "'''x'''", "None", "none", "True", "'auto'", "inf"]
    body = ", ".join(f"v{index}={text}" for index, text in enumerate(texts))
    args = parse_server_args(f"ServerArgs({body})")
    assert [text for _, text, _ in args] == texts
    for _, text, value in args:
        try:
            python = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            python = None
        python = None if python == float("inf") else python
        assert type(value) is type(python) and repr(value) == repr(python), text


def _reference_literal(text: str) -> object:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return None if isinstance(value, float) and value in (float("inf"), float("-inf")) or value != value else value


def test_dict_and_list_values_are_what_python_reads_from_them():
    """Dict / list reprs take a JSON fast path (json.loads after swapping quotes and constants) where their shape
    allows; on 40,000 random reprs, damaged or not, every value is what ast.literal_eval reads."""
    from speclogs.grammar.server_args import _literal

    rng = random.Random(7)
    keys = ["a", "it's", 'q"x', "k:v", "x, y", "None", "e", "", "ü"]
    leaves = [None, True, False, 0, -1, 10**30, 0.7, 1e-5, -0.0, 1e300, 0.1 + 0.2, "", "a b", "x\ny", "tab\t", "back\\slash",
              "{", "]", "'", '"', "True", "\x00", (1, 2)]

    def value(depth: int = 0) -> object:
        roll = rng.random()
        if depth < 3 and roll < 0.25:
            return {rng.choice(keys) if rng.random() < 0.8 else rng.choice([1, 1.5, None, True]): value(depth + 1)
                    for _ in range(rng.randint(0, 4))}
        if depth < 3 and roll < 0.4:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return rng.choice(leaves)

    damage = [",", " ", "]", "}", "'", ": ", ",,", "x", "\\", "+", "NaN", "Infinity", "true", "null", "1e400", "\t", "'a' ",
              ".5", "1.", "_", "0x1"]
    for _ in range(40_000):
        text = repr(value())
        for _ in range(rng.choice([0, 0, 1, 2])):
            at = rng.randrange(len(text) + 1)
            text = text[:at] + rng.choice(damage) + text[at:]
        if not text.startswith(("{", "[")):
            continue
        expected, got = _reference_literal(text), _literal(text)
        assert type(got) is type(expected) and repr(got) == repr(expected), text


HOT_PATTERNS = ("decode_batch_common", "decode_batch_legacy", "prefill_batch_common", "prefill_batch_059_common", "uvicorn_access")


@pytest.mark.parametrize("name", HOT_PATTERNS)
def test_hot_patterns_stay_one_pass_sized(name):
    """≤ 14 named groups (+ the ingest's _hit = 15 < 16): Rust regex's fast one-pass capture engine still applies."""
    regex = GRAMMARS.by_name(name).regex
    assert regex.count("(?P<") <= 14
    assert "(?:cuda graph|" not in regex  # literal alternations are prefix-factored


SHAPE_PROBES = ["", "0", "-0", "12", "-3.25", "3.", ".5", "1.2.3", "True", "False", "true", "abc", "a_b9", "a b", "a,b", "x y,z",
                "2026-11-30 10:18:53", "11-30 10:18:53", "10:18:53", "2026-11-30 10:18", " TP0", " DP0 TP1", " DP-1 TP0",
                " ATTN_CP1 MOE_DP2 TP3", "TP0", " XP0", "é", "日本", "\t"]


@pytest.mark.parametrize("shape", sorted(BUILTIN_SHAPES))
def test_builtin_shape_regex_accepts_what_its_definition_accepts(shape):
    """lower.BUILTIN_SHAPE_REGEXES (the compiled form of each built-in shape) and the shape's pyparsing element
    (definition.BUILTIN_SHAPES) take the same strings."""
    import pyparsing as pp

    element = exact_tree(pp.And([BUILTIN_SHAPES[shape](), pp.StringEnd()])).parse_with_tabs()
    regex = re.compile(f"^(?:{BUILTIN_SHAPE_REGEXES[shape]})$")
    for probe in SHAPE_PROBES:
        try:
            element.parse_string(probe, parse_all=True)
            accepted = True
        except pp.ParseBaseException:
            accepted = False
        assert accepted == (regex.match(probe) is not None), (shape, probe)
