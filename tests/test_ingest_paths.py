"""The compiled form classifies like the definition: every piece the ingest's executor (polars) gives to a
pattern, pyparsing — the grammar itself — gives to the same pattern with the same values; and a
log parsed in small chunks gives the same rows as in one. On the fixture logs and a generated 20k-line log."""

from __future__ import annotations

import subprocess
import sys

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from conftest import FIXTURE_LOGS, ROOT, nan_safe
from speclogs.grammar import load_grammars
from speclogs.ingest.classify import classify, compile_engine, distinctive_gate
from speclogs.ingest.lines import build_lines
from speclogs.ingest.pipeline import parse_log_chunks
from speclogs.ingest.sources import make_valid_text

GENERATOR = ROOT / "benchmarks" / "gen_sglang_log.py"


@pytest.fixture(scope="module")
def engine():
    return compile_engine(load_grammars())


def parse(engine, data: bytes, chunk_bytes: int = 64 << 20) -> dict:
    tables: dict[str, list[pl.DataFrame]] = {}
    counts = [0, 0, 0, 0]
    drift: dict[str, int] = {}
    for chunk in parse_log_chunks(data, engine, chunk_bytes=chunk_bytes):
        for table, frame in chunk.tables.items():
            tables.setdefault(table, []).append(frame)
        tally = chunk.files[0]
        counts = [a + b for a, b in zip(counts, (tally.total_lines, tally.parsed_lines, tally.continuation_lines, tally.unparsed_lines))]
        for name, n in tally.drift.items():
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


def assert_classified_like_the_definition(engine, data: bytes, every: int) -> int:
    """Every `every`-th piece: the pattern and field values pyparsing gives it equal the executor's row. Returns how
    many pieces were compared."""
    grammars = engine.grammars
    lines = build_lines(data, engine.wrappers)
    claims = classify(engine, lines.frame)
    executor: dict[tuple[int, int], tuple[str, dict]] = {}
    for name, frame in claims.frames.items():
        columns = engine.pattern(name).pattern.columns
        for row in frame.iter_rows(named=True):
            executor[(row["line_no"], row["piece"])] = (name, {c: row[c] for c in columns})
    compared = 0
    for index, (line_no, piece, text) in enumerate(lines.frame.iter_rows()):
        if index % every:
            continue
        head = grammars.prefix.parse(text)
        message = head["message"] if head is not None else _message_after_a_prefix(grammars, text)
        found = grammars.classify(message, "message") if message is not None else grammars.classify(text, "line")
        got = executor.get((line_no, piece))
        if found is None:
            assert got is None, (text, got)
        else:
            pattern, values = found
            assert got is not None, (text, pattern.name)
            assert got[0] == pattern.name, text
            assert nan_safe(got[1]) == nan_safe({c: values[c] for c in pattern.columns}), text
        compared += 1
    return compared


def _message_after_a_prefix(grammars, text: str) -> str | None:
    """The definition of finding a message on a line without SGLang's prefix: the first message pattern (with a
    distinctive gate) that parses the text from some point after a blank, from its first such point."""
    for pattern in grammars.for_scope("message"):
        if not distinctive_gate(pattern.gate) or pattern.gate not in text:
            continue
        for start, char in enumerate(text[:-1]):
            if char in " \t" and pattern.parse(text[start + 1:]) is not None:
                return text[start + 1:]
    return None


def test_every_8th_fixture_piece_is_classified_like_the_definition(engine):
    data = b"".join(make_valid_text(log.read_bytes())[0] for log in sorted((ROOT / "fixtures").rglob("*.log")))
    assert assert_classified_like_the_definition(engine, data, every=8) > 2500


def test_chunked_parse_gives_the_same_rows_as_one_chunk(engine):
    log = FIXTURE_LOGS[0]
    data, _, _ = make_valid_text(log.read_bytes())
    whole = parse(engine, data)
    assert whole["counts"][0] > 100 and "decode_batches" in whole["tables"]
    chunked = parse(engine, data, chunk_bytes=20_000)
    assert_same(whole, chunked)


@pytest.fixture(scope="module")
def generated_sample(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("generated") / "sample.log"
    subprocess.run([sys.executable, str(GENERATOR), str(out), "-n", "20000", "--seed", "7"], check=True, capture_output=True)
    return out.read_bytes()


def test_generated_20k_sample_is_classified_like_the_definition(engine, generated_sample):
    """pyparsing costs ~1-2 ms a line: every 8th of the 20k pieces is held against it."""
    assert assert_classified_like_the_definition(engine, generated_sample, every=8) == 2500


def test_generated_20k_sample_in_chunks_gives_the_same_rows(engine, generated_sample):
    whole = parse(engine, generated_sample)
    assert whole["counts"][0] == 20000
    assert whole["tables"]["decode_batches"].height > 10000
    assert_same(whole, parse(engine, generated_sample, chunk_bytes=400_000))
