"""NCCL environment sets for the probe: from `--env-set NAME:K=V,K=V` options or a launch plan (stdlib only)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from speclogs.errors import ProbeError

# The NCCL settings the seed runs were tuned with: named so a probe can compare them to NCCL's defaults.
SEEDS_TUNED_ENV: dict[str, str] = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}

# Variables the probe sets itself unless an env set names them. NVLS stays off (device rule; NVLink
# SHARP needs multicast objects the lent machines do not allow); INIT,ENV logging lets the probe record
# which settings NCCL itself reported, and costs nothing after init (TUNING would log every call).
PROBE_DEFAULT_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,ENV",
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# values may hold commas (NCCL_DEBUG_SUBSYS=INIT,ENV): split only at a comma that starts a new KEY=
_ASSIGNMENT_SPLIT = re.compile(r",(?=[A-Za-z_][A-Za-z0-9_]*=)")
_DEBUG_KEYS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")


@dataclass(frozen=True)
class EnvSet:
    """A named set of environment variables applied to every rank before NCCL initialises."""

    name: str
    env: dict[str, str] = field(default_factory=dict)

    def applied_env(self) -> dict[str, str]:
        """The variables the probe's ranks get: the probe defaults, overridden by this set."""
        return {**PROBE_DEFAULT_ENV, **self.env}


def parse_env_set(text: str) -> EnvSet:
    """Parse `NAME:K=V,K=V` (or `NAME` / `NAME:` for an empty set, i.e. NCCL defaults)."""
    name, _, assignments = text.partition(":")
    name = name.strip()
    if not _NAME.fullmatch(name):
        raise ProbeError(
            f"--env-set {text!r}: {name!r} is not a name",
            hint="write NAME:K=V,K=V, e.g. tuned:NCCL_PROTO=LL,NCCL_ALGO=Ring (or 'default' for no variables)",
        )
    env: dict[str, str] = {}
    if assignments.strip():
        for assignment in _ASSIGNMENT_SPLIT.split(assignments.strip()):
            key, equals, value = assignment.partition("=")
            key = key.strip()
            if not equals or not _KEY.fullmatch(key):
                raise ProbeError(
                    f"--env-set {text!r}: {assignment!r} is not NAME=VALUE",
                    hint="write NAME:K=V,K=V, e.g. tuned:NCCL_PROTO=LL,NCCL_ALGO=Ring",
                )
            env[key] = value
    return EnvSet(name=name, env=env)


def parse_env_sets(texts: list[str]) -> list[EnvSet]:
    """Parse several --env-set options; no option → one set 'default' (NCCL's own defaults)."""
    if not texts:
        return [EnvSet(name="default")]
    env_sets = [parse_env_set(text) for text in texts]
    names = [env_set.name for env_set in env_sets]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ProbeError(f"--env-set names repeat: {', '.join(duplicates)}", hint="give every env set its own name")
    return env_sets


def env_sets_from_plan(plan_path: Path) -> list[EnvSet]:
    """The distinct NCCL_* environments (plan env + cell env, NCCL_DEBUG* left to the probe) of a launch plan's cells,
    read by the launcher's own parser (the same plans, the same file:line errors). A set is named after its cells'
    `nccl` factor level when they agree, else after its first cell."""
    from speclogs.launcher.plan import load_plan

    plan = load_plan(plan_path)
    grouped: dict[tuple[tuple[str, str], ...], list[tuple[str, str | None]]] = {}
    for cell in plan.cells:
        cell_env = {**plan.env, **cell.env}
        nccl_env = tuple(sorted(
            (key, value) for key, value in cell_env.items()
            if key.startswith("NCCL_") and key not in _DEBUG_KEYS
        ))
        grouped.setdefault(nccl_env, []).append((cell.name, cell.factors.get("nccl")))

    env_sets = []
    used_names: set[str] = set()
    for nccl_env, members in grouped.items():
        levels = {level for _, level in members}
        name = levels.pop() if len(levels) == 1 and None not in levels else members[0][0]
        if name in used_names:
            name = members[0][0]
        used_names.add(name)
        env_sets.append(EnvSet(name=name, env=dict(nccl_env)))
    return env_sets
