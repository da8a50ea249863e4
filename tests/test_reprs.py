"""The reader of Python reprs (speclogs.ingest.reprs): server_args dumps and --log-requests values read as Python
reads them, by the C reader (_reprs.c) and by the Python one alike."""

from __future__ import annotations

import ast
import math
import random
import warnings
from pathlib import Path

import pytest

from speclogs.ingest import reprs
from speclogs.ingest.reprs import _literal, _split_raw, literal_python, parse_server_args, split_raw_python

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_LOGS = sorted((ROOT / "fixtures").glob("*/*/*.log"))
native = pytest.mark.skipif(reprs._reprs is None, reason="the C reader (speclogs.ingest._reprs) is not built")


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
    """On 40,000 random dict / list reprs, damaged or not, every value is what ast.literal_eval reads: by the C reader
    where it reads them, by the JSON fast path of the Python reader (json.loads after swapping quotes and constants)
    where their shape allows, and by both readers on their own."""
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
        for got in (_literal(text), literal_python(text)):
            assert type(got) is type(expected) and repr(got) == repr(expected), text


# Atoms Python reads and atoms it refuses (or reads with a warning), as repr text
_ATOMS = ["None", "True", "False", "0", "00", "1", "-1", "12345678901234567890123", "-0", "0.5", "-0.0", "1e5", "1E-3", ".5",
          "5.", "1.e5", "1e999", "-1e999", "1j", "1_0", "0x1f", "007", "inf", "nan", "-.5", "- 1", "+1", "-True", "'a'", '"b"',
          "''", '""', "'it''s'", r"'\n'", r"'\x41'", r"'\x4'", r"'\u00e9'", r"'\U0001F600'", r"'\U00110000'", r"'\101'",
          r"'\777'", r"'\d'", r"'\N{BULLET}'", r"'\ud800'", "'tab\there'", "'é'", "'\"'", '"\'"', r"'\''", r"'\\'",
          "'''x'''", "b'x'", "r'x'", "'a\\\nb'", "'\x00'", "'x", "name", "<obj at 0x7f>", "1.2.3", "[1] [2]"]


def _random_repr(rng: random.Random, depth: int = 0) -> str:
    if depth > 3 or rng.random() < 0.5:
        return rng.choice(_ATOMS)
    sep = rng.choice([", ", ",", " , ", ",  "])
    items = [_random_repr(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    roll = rng.random()
    if roll < 0.3:
        text = "[" + sep.join(items) + rng.choice(["", ",", ", "]) + "]"
    elif roll < 0.6:
        text = "(" + sep.join(items) + rng.choice(["", ",", ", "]) + ")"
    elif roll < 0.9:
        pairs = (f"{_random_repr(rng, depth + 1)}{rng.choice([': ', ':', ' : '])}{item}" for item in items)
        text = "{" + sep.join(pairs) + rng.choice(["", ","]) + "}"
    else:
        text = "{" + sep.join(items) + "}"  # a set: left to ast.literal_eval
    if rng.random() < 0.05:
        text = text[: rng.randint(0, len(text))]
    return rng.choice(["", "", "", " "]) + text + rng.choice(["", "", "", " ", "\t"])


def _same(a: object, b: object) -> bool:
    """Equal values of the same types all the way down (-0.0 is not 0.0, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (a == b and math.copysign(1, a) == math.copysign(1, b)) or (a != a and b != b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(_same(x, y) and _same(a[x], b[y]) for x, y in zip(a, b))
    return a == b


@native
def test_the_c_reader_reads_what_python_reads_and_leaves_the_rest():
    """200,000 random reprs (nested, cut, with stray spaces): every value the C reader returns is what ast.literal_eval
    returns, whatever Python refuses it leaves to Python, and it reads most of what Python reads."""
    rng = random.Random(11)
    unread = object()
    read = readable = 0
    for _ in range(200_000):
        text = _random_repr(rng)
        got = reprs._reprs.literal(text, unread)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = ast.literal_eval(text)
        except Exception:  # noqa: BLE001 — whatever Python refuses, the C reader must leave to it
            assert got is unread, text
            continue
        readable += 1
        if got is not unread:
            read += 1
            assert _same(got, expected), text
    assert read > 0.5 * readable, (read, readable)  # it leaves texts with spaces around them to Python


@native
def test_the_c_split_is_the_python_split():
    rng = random.Random(12)
    tails = ["", ")", ", x=1)", "'", '"""a', "}, y=(1, 2))", "]"]
    for _ in range(100_000):
        body = _random_repr(rng)[1:] + rng.choice(tails)
        assert reprs._reprs.split(body) == split_raw_python(body), body
    assert _split_raw("a=1, b=(2, 3)), rest") == (["a=1", " b=(2, 3)"], 13)


@native
def test_the_c_reader_reads_every_value_of_the_real_dumps_that_python_reads():
    """On the fixtures' server_args dumps and --log-requests lines the C reader is the one that reads: no value that
    Python reads is left to it."""
    unread = object()
    values = 0
    for path in FIXTURE_LOGS:
        for line in path.read_text(encoding="utf-8").splitlines():
            for marker in ("] server_args=ServerArgs(", "] Receive: obj=GenerateReqInput(", "] Finish: obj=GenerateReqInput("):
                if marker in line:
                    items, _end = _split_raw(line.split(marker, 1)[1])
                    for item in items:
                        text = item.partition("=")[2].strip()
                        try:
                            expected = ast.literal_eval(text)
                        except (ValueError, SyntaxError):
                            continue
                        if isinstance(expected, float) and not math.isfinite(expected):
                            continue
                        values += 1
                        assert _same(reprs._reprs.literal(text, unread), expected), text
    assert values > 4_000, values


def _request_lines() -> list[str]:
    """The fixtures' --log-requests text lines, after their `Receive: obj=` / `Finish: obj=`."""
    out = []
    for path in sorted((ROOT / "fixtures").rglob("*.log")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            for head in ("Receive: obj=", "Finish: obj="):
                if head in line:
                    out.append(line.split(head, 1)[1])
    return out


def _random_request(rng: random.Random) -> str:
    """A call repr like the --log-requests lines print ("GenerateReqInput(rid='…', …), out={…}"), with random values,
    names, spacing and damage."""
    names = ["rid", "text", "input_ids", "sampling_params", "stream", "x", "9bad", "", "__class__", "rid"]
    fields = ", ".join(f"{rng.choice(names)}{rng.choice(['=', ' = ', '=', ''])}{_random_repr(rng)}" for _ in range(rng.randint(0, 4)))
    tail = rng.choice(["", ", out={'meta_info': {'id': 'a', 'prompt_tokens': 3}}", f", out={_random_repr(rng)}",
                       f", headers={_random_repr(rng)}, out={{'text': {_random_repr(rng)}}}", ",, out=1 ", " ; junk", ", = 2"])
    text = rng.choice(["GenerateReqInput", "EmbeddingReqInput", " Gen", "9x", "", "a.b"]) + "(" + fields + rng.choice([")", ")", ""]) + tail
    if rng.random() < 0.2:
        text = text[: rng.randint(0, len(text))]
    return rng.choice(["", "", " ", "\u2003"]) + text + rng.choice(["", "", " ", "\u00a0"])


@native
def test_the_c_request_reader_reads_lines_as_python_does():
    """A --log-requests line's call repr and tail, by the C reader: for every real line of the fixtures and 100,000
    random ones (cut, odd names and spacing, values only Python reads), what it returns is the Python twin's, and
    what it leaves is read by the twin; the real lines it reads itself."""
    unread = object()
    real = _request_lines()
    assert len(real) > 60
    for body in real:
        got = reprs._reprs.request(body, unread)
        assert got is not unread, body
        assert _same(got, reprs.parse_request_repr_python(body)), body
    rng = random.Random(13)
    read = 0
    for _ in range(100_000):
        body = _random_request(rng)
        got = reprs._reprs.request(body, unread)
        if got is not unread:
            read += 1
            assert _same(got, reprs.parse_request_repr_python(body)), body
    assert read > 20_000, read


_META_VALUES = ["1", "1.0", "2.5", "-3", "True", "None", "'7'", "1e999", "12345678901234567890123456789", "[1, 2]", "[0.5]",
                "{'type': 'stop'}", "{'type': 3}", "{}", "'stop'", "(1, 2)", "-0.0", "1" + "0" * 350]
_META_NAMES = ["prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency", "spec_accept_length", "spec_verify_ct",
               "spec_accept_token_num", "spec_num_correct_drafts", "spec_accepted_drafts", "spec_draft_token_num",
               "spec_proposed_drafts", "spec_accept_histogram", "finish_reason", "id", "request_received_ts", "weird"]


_KEYS = ["a", "it's", 'q"x', "k:v", "x, y", "None", "", "ü", "max_new_tokens", "a"]
_LEAVES = [None, True, False, 0, -1, 7, 10**30, 0.7, 1e-5, -0.0, 1e300, 1e16, 0.1 + 0.2, 5.0, float("inf"), "", "a b", "x\ny",
           "tab\t", "back\\slash", "{", "]", "'", '"', "é", "\U0001F600", "\x7f", "\x00", (1, 2)]


def _random_value(rng: random.Random, depth: int = 0) -> object:
    """A value as a request field holds one (printed with repr): dicts (keys of all kinds), lists, and leaves."""
    roll = rng.random()
    if depth < 3 and roll < 0.3:
        return {rng.choice(_KEYS) if rng.random() < 0.9 else rng.choice([1, None]): _random_value(rng, depth + 1)
                for _ in range(rng.randint(0, 4))}
    if depth < 3 and roll < 0.45:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return rng.choice(_LEAVES)


def _random_request_line(rng: random.Random) -> str:
    """A --log-requests text line as the grammars keep it in server_events.message: a head, a call repr of random
    values, and an out whose meta_info has random typed (and mistyped, aliased, repeated) fields."""
    meta = ", ".join(f"'{rng.choice(_META_NAMES)}': {rng.choice(_META_VALUES + ['1', '0.25', repr('HEALTH_CHECK_x')])}"
                     for _ in range(rng.randint(0, 6)))
    rid = rng.choice(["rid='abc', ", "rid='HEALTH_CHECK_1', ", "rid=['a', 'b'], ", "rid=7, ", "", "rid=None, ", "rid='a\\'b', "])
    fields = ", ".join(f"{rng.choice(['text', 'n', 'sampling_params', 'rid', 'x'])}="
                       f"{_random_repr(rng) if rng.random() < 0.3 else repr(_random_value(rng))}" for _ in range(rng.randint(0, 3)))
    body = (rng.choice(["GenerateReqInput(", "EmbeddingReqInput(", "x(", " G("]) + rid + fields
            + ")" + rng.choice(["", f", out={{'meta_info': {{{meta}}}}}", f", out={{'meta_info': {{{meta}}}, 'text': 'a'}}",
                                ", out={'meta_info': 3}", ", out=None", f", headers={{'h': 1}}, out={{'meta_info': {{{meta}}}}}"]))
    if rng.random() < 0.1:
        body = body[: rng.randint(0, len(body))]
    head = rng.choice(["Receive: obj=", "Finish: obj=", "Finish: obj=", "Finish:obj=", "", '{"event": "request.finished"}'])
    return rng.choice(["", " "]) + head + body + rng.choice(["", " ", "\u00a0"])


def _row_or_error(read, message: str, finished: bool):
    try:
        return "row", read(message, finished)
    except Exception as error:  # noqa: BLE001 — the two readers must fail alike, whatever they raise
        return "raises", type(error)


@native
def test_the_c_request_row_is_the_python_rows_for_every_line():
    """A --log-requests line all the way to its requests row and pair key, by the C reader: for every real line of the
    fixtures and of the benchmark's generated log (as a Receive and as a Finish line) and 100,000 random ones (random
    values, mistyped and aliased meta_info fields, odd rids, cut lines, other heads), what it returns is the Python
    twin's (types included) and it fails where the twin fails; what it leaves, the twin reads. It reads most real lines
    itself."""
    from speclogs.ingest import requests

    unread = object()

    def c_row(message: str, finished: bool):
        return reprs._reprs.request_row(message, finished, requests._ROW_SPEC, unread)

    generated = [f"Receive: obj=GenerateReqInput(rid='{index:032x}', text=None, sampling_params={{'max_new_tokens': {index}, "
                 f"'temperature': 0.7}}, stream=True)" for index in range(50)]
    generated += [f"Finish: obj=GenerateReqInput(rid='{index:032x}'), out={{'meta_info': {{'prompt_tokens': {index}, "
                  f"'completion_tokens': 7, 'finish_reason': {{'type': 'stop'}}}}}}" for index in range(50)]
    real = [head + body for body in _request_lines() for head in ("Receive: obj=", "Finish: obj=")]
    assert len(real) > 120
    in_c = 0
    for message in real + generated:
        for finished in (False, True):
            got = c_row(message, finished)
            if got is unread:
                assert message in real, message  # the benchmark's lines are all read in C
                got = requests.read_request_line(message, finished)
            else:
                in_c += 1
            assert _same(got, requests.read_request_line_python(message, finished)), message
    assert in_c >= 0.8 * 2 * len(real + generated), in_c
    rng = random.Random(17)
    outcomes = {"row": 0, "raises": 0, "left": 0}
    for _ in range(100_000):
        message, finished = _random_request_line(rng), rng.random() < 0.6
        got = _row_or_error(c_row, message, finished)
        if got[0] == "row" and got[1] is unread:
            outcomes["left"] += 1
            got = _row_or_error(requests.read_request_line, message, finished)
        else:
            outcomes[got[0]] += 1
        expected = _row_or_error(requests.read_request_line_python, message, finished)
        assert got[0] == expected[0] and (_same(got[1], expected[1]) if got[0] == "row" else got[1] is expected[1]), message
    assert outcomes["row"] > 40_000 and outcomes["raises"] > 50, outcomes
