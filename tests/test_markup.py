"""Nothing from the user's data is read as rich markup, emoji codes or highlighting: it prints as it is.

The strings are real: torch's log prefix, an emoji code, a file name with a style tag, a closing tag that
makes rich raise MarkupError, and a grammar file:line: that rich turns into 💯.
"""

from __future__ import annotations

import io
import shutil

import pytest
from rich.console import Console

from conftest import MATRIX, run_cli

NASTY = ["[rank1]:[W1130 10:19:01]", ":warning:", "exp[red]1.log", "a [/x/y] b", "uvicorn.toml:100:"]


@pytest.fixture(scope="module")
def nasty_db(tmp_path_factory):
    """Two real logs (with their bench files) whose run names are markup-looking strings."""
    folder = tmp_path_factory.mktemp("nasty")
    for suffix in (".log", ".bench.jsonl"):
        shutil.copy(MATRIX / f"baseline_default{suffix}", folder / f"exp[red]1{suffix}")
    db = folder / "nasty.duckdb"
    result = run_cli("ingest", str(folder), "--db", str(db))
    assert result.returncode == 0, result.stderr
    # a run name with a slash cannot be a file name: --run-name gives it
    other = run_cli("ingest", str(MATRIX / "eagle3_default.log"), str(MATRIX / "eagle3_default.bench.jsonl"),
                    "--db", str(db), "--run-name", "a [/x/y] b")
    assert other.returncode == 0, other.stderr
    return db, result.stderr + other.stderr


def test_sql_table_prints_values_and_column_names_as_they_are(nasty_db):
    db, _ = nasty_db
    select = ", ".join(f"'{value}' AS c{i}" for i, value in enumerate(NASTY))
    result = run_cli("sql", f'SELECT {select}, 1 AS "[bold]x[/]"', "--db", str(db))
    assert result.returncode == 0, result.stderr
    for value in [*NASTY, "[bold]x[/]"]:
        assert value in result.stdout, (value, result.stdout)
    assert "⚠" not in result.stdout and "💯" not in result.stdout


def test_sql_closing_tag_is_no_traceback(nasty_db):
    db, _ = nasty_db
    result = run_cli("sql", "SELECT 'a [/x/y] b' AS v", "--db", str(db))
    assert result.returncode == 0 and "a [/x/y] b" in result.stdout
    assert "Traceback" not in result.stderr and "MarkupError" not in result.stderr


def test_ingest_summary_shows_run_names_as_they_are(nasty_db):
    _, summaries = nasty_db
    assert "exp[red]1" in summaries and "a [/x/y] b" in summaries


def test_report_shows_arm_and_run_names_as_they_are(nasty_db):
    db, _ = nasty_db
    result = run_cli("report", "--db", str(db), "-c", "exp[red]1", "-c", "a [/x/y] b")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("exp[red]1") >= 3 and result.stdout.count("a [/x/y] b") >= 3
    assert "MarkupError" not in result.stderr


def test_report_terminal_is_literal_on_a_markup_console(nasty_db):
    """A library user's own console (markup and emoji on) prints the same literal names."""
    import duckdb

    from speclogs.analysis import compare_runs
    from speclogs.report import render_terminal

    db, _ = nasty_db
    con = duckdb.connect(str(db), read_only=True)
    try:
        comparison = compare_runs(con, ["exp[red]1", "a [/x/y] b"])
    finally:
        con.close()
    out = io.StringIO()
    render_terminal(comparison, Console(file=out, width=200, markup=True, emoji=True))
    assert "exp[red]1" in out.getvalue() and "a [/x/y] b" in out.getvalue()


def test_unknown_arm_error_shows_the_selector_as_typed(nasty_db):
    db, _ = nasty_db
    result = run_cli("report", "--db", str(db), "-c", ":warning:", "-c", "[rank1]:[W1130 10:19:01]")
    assert result.returncode == 1
    assert "':warning:'" in result.stderr and "⚠" not in result.stderr


def test_grammars_check_prints_file_line_as_it_is(tmp_path):
    grammar = tmp_path / "uvicorn.toml"
    grammar.write_text("# comment\n" * 99 + "= broken\n")
    result = run_cli("grammars", "check", str(grammar))
    assert result.returncode == 1
    assert "uvicorn.toml:100:" in result.stderr and "💯" not in result.stderr


def test_progress_bar_shows_file_names_as_they_are(monkeypatch):
    from speclogs.report import summaries

    class Event:
        show, current, total_bytes, done_bytes = True, "logs/exp[red]1.log", 100, 50

    out = io.StringIO()
    monkeypatch.setattr(summaries, "make_console", lambda **_: Console(file=out, width=200, force_terminal=True))
    with summaries.progress_bar(True) as update:
        update(Event())
    assert "exp[red]1.log" in out.getvalue()
