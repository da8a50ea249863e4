"""EAGLE-worker phase profiling for SGLang, without editing SGLang (`python -m speclogs.profile`).

Light to import: stdlib only; torch is imported only in the profiled server processes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from speclogs.profile.hook import DEFAULT_EVERY, ENV_ENABLE, ENV_EVERY

HOOK_DIR = Path(__file__).resolve().parent / "_hook"
SPECLOGS_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the speclogs package


def profiled_environment(base: Mapping[str, str], *, every: int = DEFAULT_EVERY) -> dict[str, str]:
    """`base` plus SPECLOGS_PROFILE=1, SPECLOGS_PROFILE_EVERY and the hook folder first on PYTHONPATH (its
    sitecustomize must win); speclogs' root next for a source checkout, or last for a site-packages folder, so that it
    never changes which SGLang the program imports."""
    existing = [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
    root = str(SPECLOGS_ROOT)
    if SPECLOGS_ROOT.name in ("site-packages", "dist-packages"):
        paths = [str(HOOK_DIR), *existing, root]
    else:
        paths = [str(HOOK_DIR), root, *existing]
    return {**base, ENV_ENABLE: "1", ENV_EVERY: str(every), "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
