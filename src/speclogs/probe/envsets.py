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

# Set by the probe unless an env set names them. NVLS stays off (NVLink SHARP needs multicast objects the lent machines
# do not allow); INIT,ENV logging records which settings NCCL itself reported and costs nothing after init.
PROBE_DEFAULT_ENV: dict[str, str] = {"NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT_SPLIT = re.compile(r",(?=[A-Za-z_][A-Za-z0-9_]*=)")  # values may hold commas (NCCL_DEBUG_SUBSYS=INIT,ENV)
_HINT = "write NAME:K=V,K=V, e.g. tuned:NCCL_PROTO=LL,NCCL_ALGO=Ring"


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
        raise ProbeError(f"--env-set {text!r}: {name!r} is not a name", hint=f"{_HINT} (or 'default' for no variables)")
    env: dict[str, str] = {}
    for assignment in _ASSIGNMENT_SPLIT.split(assignments.strip()) if assignments.strip() else []:
        key, equals, value = assignment.partition("=")
        if not equals or not _KEY.fullmatch(key.strip()):
            raise ProbeError(f"--env-set {text!r}: {assignment!r} is not NAME=VALUE", hint=_HINT)
        env[key.strip()] = value
    return EnvSet(name=name, env=env)


def parse_env_sets(texts: list[str]) -> list[EnvSet]:
    """Parse several --env-set options; no option → one set 'default' (NCCL's own defaults)."""
    env_sets = [parse_env_set(text) for text in texts] or [EnvSet(name="default")]
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
        nccl_env = sorted((key, value) for key, value in {**plan.env, **cell.env}.items()
                          if key.startswith("NCCL_") and not key.startswith("NCCL_DEBUG"))
        grouped.setdefault(tuple(nccl_env), []).append((cell.name, cell.factors.get("nccl")))
    env_sets: list[EnvSet] = []
    for nccl_env, members in grouped.items():
        levels = {level for _, level in members}
        name = levels.pop() if len(levels) == 1 and None not in levels else members[0][0]
        if name in {env_set.name for env_set in env_sets}:
            name = members[0][0]
        env_sets.append(EnvSet(name=name, env=dict(nccl_env)))
    return env_sets
