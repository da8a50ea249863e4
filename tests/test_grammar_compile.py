"""The two parse paths agree: pyparsing (the definition) and the regex compiled from it, run by Python re,
polars (Rust regex) and DuckDB (RE2) — on every grammar sample and on every line of the real fixture logs."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import duckdb
import polars as pl
import pytest

from speclogs.grammar import cast_value, load_grammars, parse_server_args

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_LOGS = sorted((ROOT / "fixtures").glob("*/*/*.log"))
GRAMMARS = load_grammars()
PATTERNS = [GRAMMARS.prefix, *GRAMMARS.patterns]

# The same piece splitting the ingest does for odd lines: ANSI codes out, tqdm '\r' states apart,
# a record glued after a progress bar cut into its own piece.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
GLUED = re.compile(
    r"(?=\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}[]. ])"
    r"|(?<=.)(?<![A-Za-z0-9._-])(?=[A-Za-z0-9][A-Za-z0-9._-]*:[0-9]+:[0-9]+ \[[0-9]+\] NCCL )"
)


def pieces(line: str):
    for state in ANSI.sub("", line).split("\r"):
        for piece in GLUED.split(state):
            if piece.strip():
                yield piece


def fixture_pieces() -> list[tuple[str, str]]:
    """(scope, text) for every piece of every fixture line; message-scope text is the prefix's message."""
    out = []
    for path in FIXTURE_LOGS:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            for piece in pieces(line):
                head = GRAMMARS.split_line(piece)
                out.append(("message", head["message"]) if head else ("line", piece))
    return out


PIECES = fixture_pieces()


@functools.cache
def slow_path(scope: str, text: str) -> tuple[str, dict] | None:
    found = GRAMMARS.classify(text, scope)
    return found and (found[0].name, found[1])


def polars_values(pattern, texts: list[str]) -> list[dict | None]:
    """Run the pattern's regex in polars (extract_groups) and cast like the SQL consumer: typed dicts or None."""
    hit = "^(?P<_hit>)" + pattern.regex[1:]
    frame = pl.Series("t", texts, dtype=pl.Utf8).str.extract_groups(hit).struct.unnest()
    rows = []
    for row in frame.iter_rows(named=True):
        if row["_hit"] is None:
            rows.append(None)
            continue
        rows.append(pattern.cast_groups({f.name: row.get(f.name) for f in pattern.fields}))
    return rows


def _sample_texts(pattern) -> list[str]:
    texts = []
    for s in pattern.samples:
        head = GRAMMARS.split_line(s.line) if pattern.scope == "message" and pattern is not GRAMMARS.prefix else None
        texts.append(head["message"] if head else s.line)
    return texts


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_samples_give_identical_values_on_all_paths(pattern):
    texts = _sample_texts(pattern)
    slow = [pattern.parse(t) for t in texts]
    fast_re = [pattern.match(t) for t in texts]
    fast_polars = polars_values(pattern, texts)
    assert all(v is not None for v in slow)
    assert fast_re == slow
    assert fast_polars == slow


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_regex_is_accepted_by_duckdb_re2_and_full_matches_samples(pattern):
    texts = _sample_texts(pattern) or ["(expanded variant without its own sample: compile check only)"]
    con = duckdb.connect()
    con.execute("CREATE TABLE samples (t VARCHAR)")
    con.executemany("INSERT INTO samples VALUES (?)", [[t] for t in texts])
    got = con.execute("SELECT regexp_full_match(t, ?) FROM samples", [pattern.regex]).fetchall()
    assert got == [(pattern.compiled.match(t) is not None,) for t in texts]


def test_fixture_pieces_pyparsing_equals_python_re():
    mismatches = []
    for scope, text in PIECES:
        slow = slow_path(scope, text)
        fast = GRAMMARS.match(text, scope)
        if slow != (fast and (fast[0].name, fast[1])):
            mismatches.append((text, slow and slow[0], fast and fast[0].name))
    assert mismatches == []


def test_fixture_pieces_first_polars_match_equals_pyparsing():
    """The fast path's rule (first pattern in priority order whose regex matches) gives pyparsing's rows."""
    for scope in ("message", "line"):
        texts = [t for s, t in PIECES if s == scope]
        winner: list[tuple[str, dict] | None] = [None] * len(texts)
        for pattern in GRAMMARS.for_scope(scope):
            todo = [i for i, w in enumerate(winner) if w is None and (not pattern.gate or pattern.gate in texts[i])]
            if not todo:
                continue
            for i, values in zip(todo, polars_values(pattern, [texts[i] for i in todo])):
                if values is not None:
                    winner[i] = (pattern.name, values)
        for text, got in zip(texts, winner):
            assert got == slow_path(scope, text), text


def test_every_fixture_piece_is_claimed():
    unclaimed = [text for scope, text in PIECES if GRAMMARS.match(text, scope) is None]
    assert unclaimed == []


def test_fixture_decode_lines_have_the_values_a_user_expects():
    eagle = (ROOT / "fixtures/h200x2-sglang-0.5.14/matrix/eagle3_default.log").read_text().splitlines()
    decode = GRAMMARS.by_name("decode_batch")
    rows = [decode.match(GRAMMARS.split_line(line)["message"]) for line in eagle if "] Decode batch" in line]
    assert rows and all(r["accept_len"] == 2.0 and r["cuda_graph"] is True for r in rows)


def test_prefix_rank_tags_regexes_agree_with_pyparsing():
    lines = ["[2025-05-31 18:31:21 DP0 TP0] x", "[2024-11-28 08:12:40 DP-1 TP0] x", "[2026-05-27 10:01:02 ATTN_CP1 MOE_DP2 TP3] x", "[2026-11-30 10:19:31] x"]
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


HOT_PATTERNS = ("decode_batch_common", "decode_batch_legacy", "prefill_batch_common", "prefill_batch_059_common", "uvicorn_access")


@pytest.mark.parametrize("name", HOT_PATTERNS)
def test_hot_patterns_stay_one_pass_sized(name):
    """≤ 14 named groups (+ the ingest's _hit = 15 < 16): Rust regex's fast one-pass capture engine still applies."""
    regex = GRAMMARS.by_name(name).regex
    assert regex.count("(?P<") <= 14
    assert "(?:cuda graph|" not in regex  # literal alternations are prefix-factored


def test_disk_cache_restores_the_same_patterns(tmp_path, monkeypatch):
    import speclogs.grammar as grammar

    monkeypatch.setenv("SPECLOGS_CACHE_DIR", str(tmp_path))
    built = grammar.load_grammars(use_cache=False)
    grammar._cache.clear()
    grammar.load_grammars()  # writes the cache
    assert list(tmp_path.glob("grammars-*.json"))
    grammar._cache.clear()
    cached = grammar.load_grammars()
    assert cached is not built
    assert [(p.name, p.regex, p.constants, p.fields, p.gate, p.scope, p.table) for p in cached.patterns] == [
        (p.name, p.regex, p.constants, p.fields, p.gate, p.scope, p.table) for p in built.patterns
    ]
    line = "Decode batch, #running-req: 1, #token: 96, token usage: 0.00, cuda graph: True, gen throughput (token/s): 3.84, #queue-req: 0"
    assert cached.classify(line, "message")[1] == built.classify(line, "message")[1]  # lazy pyparsing element works
