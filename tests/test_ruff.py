"""`ruff check src tests benchmarks scripts` is clean (rules: pyproject.toml [tool.ruff]). ruff comes with the test extra;
where it is missing the test skips, except in CI (CI=true), where it fails."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def _ruff() -> list[str]:
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    if found:
        return [found]
    if os.environ.get("CI"):
        pytest.fail("ruff is not installed: `pip install -e '.[test]'` brings it")
    pytest.skip("ruff is not installed (pip install -e '.[test]')")


def test_ruff_check_is_clean():
    done = subprocess.run([*_ruff(), "check", "--no-cache", "src", "tests", "benchmarks", "scripts"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
