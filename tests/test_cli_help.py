"""Every command's --help shows its text as written (no rich markup read from it) and ends with real examples: each
example names a real command whose options parse."""

from __future__ import annotations

import shlex

import pytest
import typer

from conftest import run_cli
from speclogs.cli import app

ROOT_COMMAND = typer.main.get_command(app)  # groups have `.commands` (typer vendors its own click)


def _commands(group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


COMMANDS = list(_commands(ROOT_COMMAND))


def _examples(help_text: str) -> list[str]:
    assert "Examples:" in help_text, help_text[-500:]
    tail = help_text.rsplit("Examples:", 1)[1]
    return [line.strip() for line in tail.splitlines() if line.strip()]


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS] + [()], ids=lambda p: " ".join(p) or "speclogs")
def test_help_ends_with_examples_that_parse(path):
    result = run_cli(*path, "--help")
    assert result.returncode == 0, result.stderr
    examples = _examples(result.stdout)
    assert 1 <= len(examples) <= 2
    for example in examples:
        words = shlex.split(example.rsplit("| ", 1)[-1])
        assert words[0] == "speclogs", example
        command, args = ROOT_COMMAND, words[1:]
        while hasattr(command, "commands"):
            command, args = command.commands[args[0]], args[1:]
        if not path:
            continue
        assert tuple(words[1:1 + len(path)]) == path, example
        command.make_context(" ".join(path), list(args))  # raises on an unknown option or a bad value


def test_launch_help_shows_the_plan_tables_literally():
    result = run_cli("launch", "--help")
    assert result.returncode == 0, result.stderr
    flat = " ".join(result.stdout.split())
    for literal in ("[[cells]]", "[bench]", "[adaptive]"):
        assert literal in flat, flat
