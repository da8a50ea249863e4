"""The terminal report never splits a number or an id: at 80, 100 and 200 columns (and piped with COLUMNS) every line
fits, every headline number of the JSON report is found whole in the text, and every number-like word printed is
one the unbounded report prints too (no `476.3–5` / `14.5` halves)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import duckdb
import pytest

from conftest import ROOT, cli_env
from speclogs.analysis import compare_runs
from speclogs.console import make_console
from speclogs.report import render, render_terminal
from speclogs.store import ingest_paths

ARMS = ["baseline_default_[0-9]", "baseline_nccl_[0-9]", "eagle3_default_[0-9]", "eagle3_nccl_[0-9]"]
NUMBER_WORD = re.compile(r"[-+×]?\d[\d.,–%e+-]*")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    db = tmp_path_factory.mktemp("width") / "speclogs.duckdb"
    ingest_paths([ROOT / "fixtures" / "h200x2"], db)
    with duckdb.connect(str(db), read_only=True) as con:
        comparison = compare_runs(con, ARMS)
    return db, comparison, json.loads(render(comparison, "json"))


def _text(comparison, width: int) -> str:
    out = io.StringIO()
    render_terminal(comparison, make_console(file=out, width=width))
    return out.getvalue()


def _headline_numbers(report: dict) -> list[str]:
    """The JSON report's numbers as the text prints them: tok/s to 0.1, ratios and p to 0.001, accept len and ms to 0.01."""
    numbers = []
    for arm in report["arms"]:
        for source in ("client", "server"):
            numbers += [f"{arm[source][key]:.1f}" for key in ("value_tok_s", "ci_low_tok_s", "ci_high_tok_s")]
        numbers += [f"{arm['accept_len']:.2f}", f"{arm['step_ms']:.2f}"]
    # the answer's comparison per pair: the client source where there is one
    answered = {(c["arm_a"], c["arm_b"]): c for c in sorted(report["comparisons"], key=lambda c: c["source"] == "client")}
    for comparison in answered.values():
        numbers += [f"{comparison[key]:.3f}" for key in ("ratio", "ci_low", "ci_high", "p_value")]
    return numbers


def _words(text: str) -> set[str]:
    text = re.sub(r"not shown at \d+ columns", "", text)   # the caption of a table that dropped columns
    return {word.rstrip(",.;:") for word in NUMBER_WORD.findall(text)}


def _check(text: str, width: int, report: dict, unbounded: str) -> None:
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, (width, too_long[:3])
    for number in _headline_numbers(report):
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?!\d)", text), (width, number)
    halves = _words(text) - _words(unbounded)
    assert not halves, (width, sorted(halves)[:20])
    for run in report["arms"][0]["run_names"]:   # ids and names are never cut either (where they are printed)
        assert run in unbounded and (run in text or "runs" in text.split("not shown at", 1)[-1]), (width, run)


@pytest.mark.parametrize("width", [80, 100, 200])
def test_the_report_fits_without_splitting_a_number(matrix, width):
    _, comparison, report = matrix
    _check(_text(comparison, width), width, report, _text(comparison, 10_000))


def test_piped_output_honours_columns(matrix):
    db, comparison, report = matrix
    env = {**cli_env(), "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-m", "speclogs", "report", "--db", str(db), "--compare", *ARMS],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    _check(done.stdout, 100, report, _text(comparison, 10_000))
