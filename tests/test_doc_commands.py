"""A command the docs show is a command that works. Every command line of README.md's "What you can ask" and of
the bash / console blocks of docs/ runs as written (bash, in a scratch folder whose `logs/` and `fixtures/` are
the bundled fixtures; the fleet guide's /var/log/sglang and /shared/… are scratch folders), a console block's shown
output is what the command prints, and the quick start runs after its venv + pip part (which CI runs on a fresh
clone, with the README's test command). What needs a GPU box (launch, the profiler), a running Ray cluster
(`--ray auto`) or the network (`pip install`) is held to what can be checked here: the plan it names parses with the
launcher's one plan parser, and every option it uses is one the command accepts."""

from __future__ import annotations

import gzip
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, cli_env
from speclogs.launcher.plan import load_plan

NEEDS_GPU = ("speclogs launch ", "python -m speclogs.profile ")
SCRATCH_PATHS = {"/var/log/sglang": "logs", "/shared/": "shared/", "/tmp/": ""}  # absolute paths → the scratch folder


def _statements(block: str) -> list[str]:
    """A bash block → its commands, each with its continuation lines (a trailing backslash, an open quote)."""
    statements, pending = [], ""
    for line in block.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\"):
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on on the next line
            continue
        if pending.strip():
            statements.append(pending)
        pending = ""
    assert not pending, pending
    return statements


def _readme_statements() -> list[str]:
    section = (ROOT / "README.md").read_text().split("## What you can ask", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    return _statements(blocks[0])


def _doc_blocks() -> list[tuple[str, str, str]]:
    """(doc, kind, text) of every bash / console block and every indented `speclogs …` line of docs/."""
    found = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()
        found += [(doc.name, kind, body) for kind, body in re.findall(r"```(bash|console)\n(.*?)```", text, re.S)]
        outside = re.sub(r"```.*?```", "", text, flags=re.S)
        lines = outside.splitlines()
        for i, line in enumerate(lines):
            log_line = line.startswith(("    speclogs spec_cycle ", "    speclogs profiler: "))  # the profiler's output, quoted
            if re.match(r"    (speclogs|python -m speclogs)\b", line) and not log_line:
                command = [line.strip()]
                while command[-1].endswith("\\"):
                    i += 1
                    command.append(lines[i].strip())
                found.append((doc.name, "indented", "\n".join(command)))
    return found


def _scratch(tmp_path: Path) -> dict[str, str]:
    """The folder the commands run in; `speclogs` on PATH is this checkout."""
    for name in ("logs", "fixtures"):
        os.symlink(ROOT / "fixtures", tmp_path / name)
    os.symlink(ROOT / "plans", tmp_path / "plans")
    os.symlink(ROOT / "scripts", tmp_path / "scripts")
    (tmp_path / "shared").mkdir()
    os.symlink(ROOT / "fixtures", tmp_path / "shared" / "logs")
    excerpts = sorted((ROOT / "fixtures" / "excerpts").glob("*.log"))
    (tmp_path / "more.log.gz").write_bytes(gzip.compress(excerpts[0].read_bytes()))
    shutil.copy(excerpts[1], tmp_path / "piped.log")
    (tmp_path / "queries.sql").write_text("SELECT count(*) AS runs FROM runs; SELECT kind, count(*) FROM drift GROUP BY 1;\n")
    example = (ROOT / "docs" / "grammars.md").read_text().split("```toml\n", 1)[1].split("```", 1)[0]
    for name in ("my_format.toml", "my_lines.toml", "warmup.toml"):
        (tmp_path / name).write_text(example)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "speclogs").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m speclogs "$@"\n')
    (bin_dir / "speclogs").chmod(0o755)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')   # scripts/*.py
    (bin_dir / "python").chmod(0o755)
    env = cli_env()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def _check_without_running(statement: str, env: dict[str, str], cwd: Path) -> None:
    """The plan a GPU command names parses; every option it uses is in its --help."""
    words = shlex.split(statement.replace("\\\n", " "), comments=True)
    if words[:3] == ["python", "-m", "speclogs.profile"]:
        help_argv, options = [sys.executable, "-m", "speclogs.profile", "--help"], words[3:words.index("--")]
    elif words[:2] == ["pip", "install"]:
        extras = re.findall(r"\[(.*?)\]", words[2])[0].split(",")
        pyproject = (ROOT / "pyproject.toml").read_text()
        assert all(re.search(rf"^{extra} = \[", pyproject, re.M) for extra in extras), words
        return
    else:
        sub = 3 if words[1] == "grammars" else 2
        help_argv, options = [sys.executable, "-m", "speclogs", *words[1:sub], "--help"], words[sub:]
    for word in options:
        if word.endswith(".toml"):
            assert load_plan(cwd / word).cells, word
    shown = subprocess.run(help_argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    assert shown.returncode == 0, shown.stderr
    for option in (w.split("=", 1)[0] for w in options if w.startswith("--") and w != "--"):
        assert option in shown.stdout, (statement, option)


def _run(statement: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    command = re.sub("(?<![\\w/.-])(" + "|".join(map(re.escape, SCRATCH_PATHS)) + ")",
                     lambda m: f"{cwd}/{SCRATCH_PATHS[m[1]]}", statement)
    done = subprocess.run(["bash", "-c", f"set -e -o pipefail\n{command}"], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)
    assert "Traceback" not in done.stderr, (statement, done.stderr[-3000:])
    return done


def _runs_here(statement: str) -> bool:
    if statement.lstrip().startswith((*NEEDS_GPU, "pip install")) or "--ray auto" in statement:
        return False
    if "--lake" in statement and importlib.util.find_spec("deltalake") is None:  # the fleet extra is not installed
        return False
    return "--ray local" not in statement or importlib.util.find_spec("ray") is not None


def test_the_quick_start_runs_as_written_after_its_install(tmp_path):
    """The README's first command, after its venv + pip part (what CI does on a fresh clone): the ingest of the
    bundled fixtures and the 2×2 report, with `.venv/bin/speclogs` being this checkout."""
    section = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    command = re.findall(r"```bash\n(.*?)```", section, re.S)[0].strip()
    steps = [step.strip() for step in command.split("&&")]
    assert steps[0].startswith("python3 -m venv .venv") and "pip install" in steps[1]
    env = _scratch(tmp_path)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    os.symlink(tmp_path / "bin" / "speclogs", tmp_path / ".venv" / "bin" / "speclogs")
    done = _run(" && ".join(steps[2:]), env, tmp_path)
    assert done.returncode == 0, (steps[2:], done.stderr[-3000:])
    answer = done.stdout.splitlines()
    assert answer[1].startswith("Ranking") and "Answer" in answer[:12]
    assert "eagle3_nccl_[0-9] vs baseline_default_[0-9]" in "\n".join(answer[:24])


def test_every_command_of_what_you_can_ask_runs_as_written(tmp_path):
    statements = _readme_statements()
    assert len(statements) >= 12
    env = _scratch(tmp_path)
    for statement in statements:
        if not _runs_here(statement):
            _check_without_running(statement, env, tmp_path)
            continue
        done = _run(statement, env, tmp_path)
        assert done.returncode == 0, (statement, done.stdout[-2000:], done.stderr[-3000:])
    assert (tmp_path / "report.html").stat().st_size > 10_000
    assert (tmp_path / "t3").is_dir() and (tmp_path / "d3").is_dir()


def test_every_command_of_the_guides_runs_as_written(tmp_path):
    blocks = _doc_blocks()
    assert {doc for doc, _, _ in blocks} >= {"sql.md", "grammars.md", "fleet.md", "launcher.md", "nccl.md"}
    env = _scratch(tmp_path)
    ran = 0
    for doc, kind, text in blocks:
        if kind == "console":  # '$ command' lines, each followed by what it prints
            for command, shown in re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n?)*)", text, re.M):
                if "done after" in shown:  # the example of a failing sample: make the sample fail
                    sample = (tmp_path / "warmup.toml").read_text()
                    (tmp_path / "warmup.toml").write_text(sample.replace("Warmup done in 1.25 s\"", "Warmup done after 1.25 s\""))
                done = _run(command, env, tmp_path)
                assert done.returncode == (1 if shown.startswith("warmup.toml:") or "Error:" in shown else 0), (doc, command)
                printed = done.stdout + done.stderr
                for line in (line.strip() for line in shown.splitlines() if line.strip()):
                    assert line in printed, (doc, command, line, printed[-2000:])
                ran += 1
            continue
        for statement in _statements(text):
            if not _runs_here(statement):
                _check_without_running(statement, env, tmp_path)
                continue
            done = _run(statement, env, tmp_path)
            assert done.returncode == 0, (doc, statement, done.stdout[-2000:], done.stderr[-3000:])
            ran += 1
    assert ran >= 15
    assert (tmp_path / "decode.parquet").stat().st_size > 0
