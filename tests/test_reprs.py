"""The reader of Python reprs (speclogs.ingest.reprs): server_args dumps and --log-requests values read as Python
reads them."""

from __future__ import annotations

import ast
import random
import warnings
from pathlib import Path

from speclogs.ingest.reprs import _literal, parse_server_args

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_LOGS = sorted((ROOT / "fixtures").glob("*/*/*.log"))


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
    """On 40,000 random dict / list reprs, damaged or not, every value is what ast.literal_eval reads (the JSON
    fast path, json.loads after swapping quotes and constants, included where their shape allows)."""
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
        expected = _reference_literal(text)
        got = _literal(text)
        assert type(got) is type(expected) and repr(got) == repr(expected), text
