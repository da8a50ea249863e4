"""Factorial designs: factor levels per run (from --factor globs or the plan's runs.factors), the largest complete 2^k
design, and main effects, interactions and simple effects on log throughput with intervals."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from itertools import combinations, product

import numpy as np

from speclogs.analysis import stats
from speclogs.analysis.load import RunTables, parse_json_text
from speclogs.analysis.results import UNSET, Effect, Finding


def factor_levels(
    tables: RunTables, arm_runs: dict[str, list[str]], selectors: dict[str, str]
) -> tuple[dict[str, dict[str, str]], list[Finding]]:
    """{factor: {run_id: level}} from --factor globs (levels 'on'/'off') or runs.factors; 2-level factors only."""
    findings: list[Finding] = []
    ids = [r for rs in arm_runs.values() for r in rs]
    names = dict(zip(tables.runs["run_id"].to_list(), tables.runs["run_name"].to_list()))
    if selectors:
        levels = {name: {r: "on" if fnmatch.fnmatchcase(names[r], selector) else "off" for r in ids}
                  for name, selector in selectors.items()}
    else:
        declared = {r: parse_json_text(f) for r, f in zip(tables.runs["run_id"].to_list(), tables.runs["factors"].to_list())}
        levels = {name: {r: str(declared[r].get(name, UNSET)) for r in ids} for name in sorted({k for d in declared.values() for k in d})}
    kept: dict[str, dict[str, str]] = {}
    for name, by_run in levels.items():
        distinct = sorted(set(by_run.values()))
        if len(distinct) == 2:
            kept[name] = by_run
        elif len(distinct) > 2:
            findings.append(Finding(
                "factor_levels", f"factor {name!r} has {len(distinct)} levels ({', '.join(distinct)}) among the compared "
                "runs; factorial effects use 2-level factors only, so it is left out", "warning"))
        elif selectors:
            findings.append(Finding(
                "factor_constant", f"factor {name!r} ({selectors[name]!r}) takes one level ({distinct[0]}) on every compared "
                "run: it cannot have an effect here", "warning"))
    return kept, findings


def arm_levels(levels: dict[str, dict[str, str]], ids: Sequence[str]) -> dict[str, str]:
    return {name: values.pop() if len(values := {by_run[r] for r in ids}) == 1 else "mixed"
            for name, by_run in levels.items()}


def effects(levels, arm_runs, reference, summary_for, confidence, explicit, min_effect=0.0):
    findings: list[Finding] = []
    if not levels:
        return [], {}, findings
    ref_ids = arm_runs[reference]
    span: dict[str, tuple[str, str]] = {}
    for name, by_run in levels.items():  # low: the reference arm's level where it has one
        distinct = sorted(set(by_run.values()))
        ref_levels = {by_run[r] for r in ref_ids}
        low = ref_levels.pop() if len(ref_levels) == 1 else distinct[0]
        span[name] = (low, next(v for v in distinct if v != low))
    all_ids = [r for rs in arm_runs.values() for r in rs]
    names, all_ids, held = _complete_design(sorted(span), all_ids, levels, span)
    if held and names:
        findings.append(Finding(
            "design_held", f"factorial effects over {' × '.join(names)} use the runs with "
            + ", ".join(f"{f}={level}" for f, level in held.items())
            + " only: the other level of " + ", ".join(held) + " does not cover every cell", "info"))
    cells: dict[tuple[int, ...], list[str]] = {}
    for r in all_ids:
        cells.setdefault(tuple(int(levels[f][r] == span[f][1]) for f in names), []).append(r)
    k = len(names)
    if len(cells) < 2 ** k or not names:  # a cell without runs
        full = sorted(span)
        findings.append(Finding(
            "incomplete_design", f"the runs do not form a full 2^k design over factors {', '.join(full)} (nor over a "
            "subset with the others held at one level) — no factorial effects", "warning" if explicit else "info"))
        return [], span, findings
    span = {f: span[f] for f in names}
    effects: list[Effect] = []
    for source in ("client", "server"):
        got = {cell: summary_for(ids, source) for cell, ids in cells.items()}
        if not all(got.values()):
            continue
        cell_summaries = {cell: g[0] for cell, g in got.items()}
        n_launches = sum(d.n_launches for d in cell_summaries.values())
        if any(d.n_launches < 2 for d in cell_summaries.values()) and source == "client":
            findings.append(Finding(
                "effects_single_launch", "some factorial cells have one launch: effect intervals cover request noise "
                "only, not launch-to-launch variation", "warning"))
        for size in range(1, k + 1):
            for subset in combinations(range(k), size):
                scale = 2.0 ** (size - 1) / 2.0 ** (k - 1)
                parts = [stats.part(d, 0, scale * float(np.prod([1 if cell[i] else -1 for i in subset])))
                         for cell, d in cell_summaries.items()]
                effects.append(_effect(" × ".join(names[i] for i in subset), "main" if size == 1 else "interaction",
                                       source, parts, span[names[subset[0]]] if size == 1 else ("", ""), n_launches,
                                       confidence, min_effect))
        for i, level in (product(range(2), (0, 1)) if k == 2 else ()):  # factor i with the other held at level
            lo, hi = ((0, level), (1, level)) if i == 0 else ((level, 0), (level, 1))
            parts = stats.diff_parts(cell_summaries[lo], cell_summaries[hi], 0)
            effects.append(_effect(f"{names[i]} | {names[1 - i]}={span[names[1 - i]][level]}", "simple", source,
                                   parts, span[names[i]], n_launches, confidence, min_effect))
    return effects, span, findings


def _complete_design(names: list[str], ids: list[str], levels, span) -> tuple[list[str], list[str], dict[str, str]]:
    """The largest full 2^k design in the runs: drop factors greedily, keeping only the runs at the dropped factor's
    low level, until every cell of the remaining factors has runs. Returns (factors, runs, {held factor: level})."""
    held: dict[str, str] = {}

    def complete(fs: list[str], rs: list[str]) -> bool:
        seen = {tuple(levels[f][r] == span[f][1] for f in fs) for r in rs}
        return len(seen) == 2 ** len(fs)

    while names and not complete(names, ids):
        candidates = []
        for f in names:
            kept = [r for r in ids if levels[f][r] == span[f][0]]
            rest = [g for g in names if g != f and len({levels[g][r] for r in kept}) == 2]
            candidates.append((complete(rest, kept), len(kept), f, kept, rest))
        _, _, f, ids, rest = max(candidates, key=lambda c: (c[0], c[1]))
        held[f] = span[f][0]
        names = rest
    return names, ids, held


def _effect(name, kind, source, parts, span, n_launches, confidence, min_effect) -> Effect:
    result = stats.t_interval(parts, confidence)
    # a cell of one launch says nothing about launch-to-launch noise: no interval is claimed
    low, high = (math.exp(result.low), math.exp(result.high)) if result.launches_covered else (math.nan, math.nan)
    verdict = stats.verdict_for(result, enough=True, min_effect=min_effect)
    return Effect(name=name, kind=kind, source=source, ratio=math.exp(result.point), ci_low=low, ci_high=high,
                  low=span[0], high=span[1], verdict=EFFECT_VERDICTS.get(verdict, verdict), n_launches=n_launches)


EFFECT_VERDICTS = {"faster": "increases throughput", "slower": "decreases throughput"}  # the others read as they are
