"""The three ways of classifying lines give IDENTICAL rows: polars (fast path, compiled regexes), Python re
(small inputs), pyparsing (the grammar definitions, line by line) — on every fixture log and on a 20k-line
sample of the generated benchmark log."""

from __future__ import annotations

import subprocess
import sys

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from conftest import FIXTURE_LOGS, ROOT
from speclogs.grammar import load_grammars
from speclogs.ingest.classify import classify_fast, classify_slow, compile_engine
from speclogs.ingest.lines import build_lines
from speclogs.ingest.logfile import parse_log_chunks
from speclogs.ingest.sources import make_valid_text

GENERATOR = next(
    (p for p in (ROOT.parent / "shared" / "tools" / "gen_sglang_log.py", ROOT / "shared" / "tools" / "gen_sglang_log.py") if p.exists()),
    None,
)


@pytest.fixture(scope="module")
def engine():
    return compile_engine(load_grammars())


def parse(engine, data: bytes, method: str, chunk_bytes: int = 64 << 20) -> dict:
    tables: dict[str, list[pl.DataFrame]] = {}
    counts = [0, 0, 0, 0]
    drift: dict[str, int] = {}
    for chunk in parse_log_chunks(data, engine, method=method, chunk_bytes=chunk_bytes):
        for table, frame in chunk.tables.items():
            tables.setdefault(table, []).append(frame)
        counts = [a + b for a, b in zip(counts, (chunk.total_lines, chunk.parsed_lines, chunk.continuation_lines, chunk.unparsed_lines))]
        for name, n in chunk.near_miss_counts.items():
            drift[name] = drift.get(name, 0) + n
    merged = {}
    for table, frames in tables.items():
        frame = pl.concat(frames, how="diagonal_relaxed")
        merged[table] = frame.select(sorted(frame.columns)).sort(sorted(frame.columns), nulls_last=True)
    return {"tables": merged, "counts": counts, "drift": drift}


def assert_same(left: dict, right: dict) -> None:
    assert left["counts"] == right["counts"]
    assert left["drift"] == right["drift"]
    assert sorted(left["tables"]) == sorted(right["tables"])
    for table in left["tables"]:
        assert_frame_equal(left["tables"][table], right["tables"][table], check_dtypes=True, check_exact=True)


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: p.name)
def test_polars_regex_and_pyparsing_give_identical_rows(engine, log):
    data, _, _ = make_valid_text(log.read_bytes())
    fast = parse(engine, data, "polars")
    assert fast["counts"][0] > 100 and "decode_batches" in fast["tables"]
    assert_same(fast, parse(engine, data, "pyparsing"))
    assert_same(fast, parse(engine, data, "regex"))


def test_chunked_parse_gives_the_same_rows_as_one_chunk(engine):
    log = FIXTURE_LOGS[0]
    data, _, _ = make_valid_text(log.read_bytes())
    whole = parse(engine, data, "polars")
    chunked = parse(engine, data, "polars", chunk_bytes=20_000)
    assert_same(whole, chunked)


@pytest.fixture(scope="module")
def generated_sample(tmp_path_factory) -> bytes:
    if GENERATOR is None:
        pytest.skip("shared/tools/gen_sglang_log.py is not next to this checkout")
    out = tmp_path_factory.mktemp("generated") / "sample.log"
    subprocess.run([sys.executable, str(GENERATOR), str(out), "-n", "20000", "--seed", "7"], check=True, capture_output=True)
    return out.read_bytes()


def test_generated_20k_sample_identical_rows_polars_and_regex(engine, generated_sample):
    fast = parse(engine, generated_sample, "polars")
    assert fast["counts"][0] == 20000
    assert fast["tables"]["decode_batches"].height > 10000
    assert_same(fast, parse(engine, generated_sample, "regex"))


def test_generated_20k_sample_pyparsing_classifies_like_the_fast_path(engine, generated_sample):
    """pyparsing costs ~1-2 ms a line (minutes for 20k lines on 2 cores), and each piece is classified on its
    own: so every 8th piece of the 20k is classified by pyparsing and compared with what the polars path
    made of the same pieces (values, types, pattern)."""
    lines = build_lines(generated_sample)
    fast = classify_fast(engine, lines.frame)
    pieces = [row for index, row in enumerate(lines.frame.iter_rows()) if index % 8 == 0]
    slow = classify_slow(engine, pieces, method="pyparsing")
    keys = pl.DataFrame([(line_no, piece) for line_no, piece, _ in pieces], schema={"line_no": pl.Int64, "piece": pl.Int32}, orient="row")
    compared = 0
    for name in sorted(set(fast.frames) | set(slow.frames)):
        expected = fast.frames.get(name)
        expected = expected.join(keys, on=["line_no", "piece"], how="semi") if expected is not None else None
        got = slow.frames.get(name)
        if expected is None or expected.height == 0:
            assert got is None or got.height == 0, name
            continue
        assert_frame_equal(expected.sort("line_no", "piece"), got.sort("line_no", "piece"), check_exact=True)
        compared += got.height
    assert compared + slow.unclaimed.height == len(pieces) == 2500
