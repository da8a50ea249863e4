"""Build the environment and command line that run a program with the profiler hook active."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

from speclogs.profile.hook import DEFAULT_EVERY, ENV_ENABLE, ENV_EVERY

HOOK_DIR = Path(__file__).resolve().parent / "_hook"
SPECLOGS_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the speclogs package


def profiled_environment(base: Mapping[str, str], *, every: int = DEFAULT_EVERY) -> dict[str, str]:
    """`base` plus SPECLOGS_PROFILE=1, SPECLOGS_PROFILE_EVERY and the hook folder on PYTHONPATH.

    The hook folder goes first (its sitecustomize must win); speclogs' own root goes next when it
    is a source checkout, or last when it is a site-packages folder, so that it never changes
    which SGLang the program imports.
    """
    env = dict(base)
    env[ENV_ENABLE] = "1"
    env[ENV_EVERY] = str(every)
    existing = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    root = str(SPECLOGS_ROOT)
    if SPECLOGS_ROOT.name in ("site-packages", "dist-packages"):
        paths = [str(HOOK_DIR), *existing, root]
    else:
        paths = [str(HOOK_DIR), root, *existing]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def profiled_command(command: Sequence[str], *, python: str, every: int = DEFAULT_EVERY) -> list[str]:
    """The launcher's form: `[python, -m, speclogs.profile, --every, N, --, *command]`."""
    return [python, "-m", "speclogs.profile", "--every", str(every), "--", *command]
