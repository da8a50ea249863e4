"""Options every command shares: --version, --format json."""

from __future__ import annotations

import json

import speclogs
from conftest import MATRIX, run_cli


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"speclogs {speclogs.__version__}"


def test_ingest_format_json(tmp_path):
    result = run_cli("ingest", str(MATRIX / "eagle3_default.log"), "--db", str(tmp_path / "a.duckdb"), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["files_ingested"] == 1


def test_grammars_list_format_json():
    result = run_cli("grammars", "list", "--format", "json")
    families = [row["family"] for row in json.loads(result.stdout)] if result.returncode == 0 else []
    assert families[0] == "wrapper" and families.index("prefix") < families.index("decode_batch")  # in the order they are tried


def test_every_command_takes_format():
    for command in (["ingest"], ["sql"], ["report"], ["launch"], ["grammars", "list"]):
        assert "--format" in run_cli(*command, "--help").stdout, command


def _commands(group, prefix=()):
    for name, command in group.commands.items():
        if hasattr(command, "commands"):   # a sub-app (grammars)
            yield from _commands(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), command


def test_shared_options_read_the_same_in_every_command():
    """--db, --grammar, and --force/--limit of the query commands: one definition, so one help text and default."""
    import typer.main

    from speclogs.cli import app

    seen: dict[str, set[tuple]] = {}
    users: dict[str, list[str]] = {}
    for name, command in _commands(typer.main.get_command(app)):
        for param in command.params:
            for flag in ("--db", "--grammar", "--limit", "--force"):
                # doctor's --db has no default: given, it checks ingested runs instead of a plan or a command line
                if name == "doctor" and flag == "--db":
                    continue
                if flag in getattr(param, "opts", ()) and (flag != "--force" or name in ("sql", "tables", "runs")):
                    seen.setdefault(flag, set()).add((param.help, str(param.default) if flag == "--db" else None))
                    users.setdefault(flag, []).append(name)
    assert {flag: len(variants) for flag, variants in seen.items()} == {"--db": 1, "--grammar": 1, "--limit": 1, "--force": 1}
    assert {"ingest", "check", "sql", "report", "launch", "tables", "runs"} <= set(users["--db"])
    assert set(users["--grammar"]) == {"ingest", "check", "grammars list"}
    assert set(users["--limit"]) == {"sql", "tables", "runs"}
