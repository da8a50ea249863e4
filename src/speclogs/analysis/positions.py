"""Acceptance per draft position: of the verify steps whose draft tokens 1…k−1 were all accepted, the share that
accepted token k too (EAGLE's n-α). Counted where the position is known: speclogs' profiler at batch size 1
(`spec_cycles.accepted_tokens` of `proposed_tokens`) and SGLang's per-request accept histograms (element j = verify
steps that accepted j drafts; one record source per run, the most complete)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from speclogs.analysis.load import IN_RUNS, select
from speclogs.analysis.signals import SOURCE_PREFERENCE

SCHEMA = {"arm": pl.Utf8, "source": pl.Utf8, "position": pl.Int64, "reached": pl.Int64, "accepted": pl.Int64,
          "acceptance": pl.Float64, "at_least": pl.Float64}


def draft_positions_for(con: Any, arm_runs: Mapping[str, list[str]]) -> pl.DataFrame:
    """The selected runs' accepted-draft counts (accepted, steps, positions per source and run), then `draft_positions`."""
    ids = [run_id for run_ids in arm_runs.values() for run_id in run_ids]
    preference = list(SOURCE_PREFERENCE)
    counts = select(con, f"""
        SELECT run_id, 'profiler (batch size 1)' AS source, accepted_tokens AS accepted, count(*) AS steps,
               max(proposed_tokens) OVER (PARTITION BY run_id) AS positions
        FROM spec_cycles WHERE {IN_RUNS} AND batch_size = 1 AND accepted_tokens IS NOT NULL
        GROUP BY run_id, accepted_tokens, proposed_tokens
        UNION ALL
        SELECT run_id, 'SGLang request histograms', accepted, sum(steps), max(positions) FROM (
          SELECT r.run_id, (h.i - 1) AS accepted, h.v AS steps, len(CAST(r.spec_accept_histogram AS BIGINT[])) - 1 AS positions,
                 array_position({preference}, r.source_kind) AS rank,
                 min(array_position({preference}, r.source_kind)) OVER (PARTITION BY r.run_id) AS best
          FROM requests r, LATERAL (SELECT unnest(CAST(r.spec_accept_histogram AS BIGINT[])) AS v,
                                           generate_subscripts(CAST(r.spec_accept_histogram AS BIGINT[]), 1) AS i) AS h
          WHERE r.{IN_RUNS} AND NOT coalesce(r.health_check, false))
        WHERE rank = best GROUP BY ALL""", [ids, ids])
    return draft_positions(counts, arm_runs)


def draft_positions(counts: pl.DataFrame, arm_runs: Mapping[str, list[str]]) -> pl.DataFrame:
    """counts (run_id, source, accepted, steps, positions) → one row per arm, source and draft position k ≥ 1: the steps
    that reached k (accepted ≥ k − 1), those that accepted it, their share, and P(accepted ≥ k) over all steps."""
    arm_of = {run_id: arm for arm, run_ids in arm_runs.items() for run_id in run_ids}
    if counts.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    counts = counts.with_columns(pl.col("run_id").replace_strict(arm_of, default=None).alias("arm")).filter(
        pl.col("arm").is_not_null() & (pl.col("steps") > 0))
    rows = []
    for (arm, source), group in counts.group_by("arm", "source", maintain_order=True):
        accepted = group["accepted"].to_numpy()
        steps = group["steps"].to_numpy()
        total = int(steps.sum())
        for k in range(1, int(group["positions"].max()) + 1):
            reached = int(steps[accepted >= k - 1].sum())
            took = int(steps[accepted >= k].sum())
            rows.append({"arm": arm, "source": source, "position": k, "reached": reached, "accepted": took,
                         "acceptance": took / reached if reached else None, "at_least": took / total})
    order = {arm: i for i, arm in enumerate(arm_runs)}
    return pl.DataFrame(rows, schema=SCHEMA).sort(pl.col("arm").replace_strict(order), "source", "position")
