"""The definition and its compiled form agree: pyparsing and the regex compiled from it (run by polars) on every
grammar sample; every fixture line is claimed."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclogs.grammar import load_grammars
from speclogs.grammar.loader import compiled_values
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


def test_every_fixture_piece_is_claimed():
    data = b"".join(make_valid_text(path.read_bytes())[0] for path in FIXTURE_LOGS)
    engine = compile_engine(GRAMMARS)
    claims = classify(engine, build_lines(data, engine.wrappers).frame)
    assert claims.unclaimed.get_column("text").to_list() == []


def test_fixture_decode_lines_have_the_values_a_user_expects():
    eagle = (ROOT / "fixtures/h200x2-sglang-0.5.14/matrix/eagle3_default.log").read_text().splitlines()
    decode = GRAMMARS.by_name("decode_batch")
    rows = [decode.parse(GRAMMARS.prefix.parse(line)["message"]) for line in eagle if "] Decode batch" in line]
    assert rows and all(r["accept_len"] == 2.0 and r["cuda_graph"] is True for r in rows)


# ---------------------------------------------------------------------------------------------------------------
# server_args


HOT_PATTERNS = ("decode_batch_common", "decode_batch_legacy", "prefill_batch_common", "prefill_batch_059_common", "uvicorn_access")


@pytest.mark.parametrize("name", HOT_PATTERNS)
def test_hot_patterns_stay_one_pass_sized(name):
    """≤ 14 named groups (+ the ingest's _hit = 15 < 16): Rust regex's fast one-pass capture engine still applies."""
    regex = GRAMMARS.by_name(name).regex
    assert regex.count("(?P<") <= 14
    assert "(?:cuda graph|" not in regex  # literal alternations are prefix-factored
