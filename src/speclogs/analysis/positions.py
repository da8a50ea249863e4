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

# per run: accepted (drafts), steps (verify steps), positions, from the requests of its most complete record source
REQUEST_HISTOGRAMS = f"""SELECT run_id, accepted, sum(steps) AS steps, max(positions) AS positions FROM (
    SELECT r.run_id, (h.i - 1) AS accepted, h.v AS steps, len(CAST(r.spec_accept_histogram AS BIGINT[])) - 1 AS positions,
           array_position({list(SOURCE_PREFERENCE)}, r.source_kind) AS rank,
           min(array_position({list(SOURCE_PREFERENCE)}, r.source_kind)) OVER (PARTITION BY r.run_id) AS best
    FROM requests r, LATERAL (SELECT unnest(CAST(r.spec_accept_histogram AS BIGINT[])) AS v,
                                     generate_subscripts(CAST(r.spec_accept_histogram AS BIGINT[]), 1) AS i) AS h
    WHERE r.{IN_RUNS} AND NOT coalesce(r.health_check, false))
  WHERE rank = best GROUP BY ALL"""


def draft_positions_for(con: Any, arm_runs: Mapping[str, list[str]]) -> pl.DataFrame:
    """arm, source, position k ≥ 1, reached (steps that accepted ≥ k − 1), accepted (≥ k), acceptance = accepted /
    reached (null when none reached k), at_least = P(accepted ≥ k) over all steps."""
    ids = [run_id for run_ids in arm_runs.values() for run_id in run_ids]
    arms = [(arm, order) for order, (arm, run_ids) in enumerate(arm_runs.items()) for _ in run_ids]
    return select(con, f"""
        WITH counts AS (
          SELECT run_id, 'profiler (batch size 1)' AS source, accepted_tokens AS accepted, count(*) AS steps,
                 max(proposed_tokens) OVER (PARTITION BY run_id) AS positions
          FROM spec_cycles WHERE {IN_RUNS} AND batch_size = 1 AND accepted_tokens IS NOT NULL
          GROUP BY run_id, accepted_tokens, proposed_tokens
          UNION ALL
          SELECT run_id, 'SGLang request histograms', accepted, steps, positions FROM ({REQUEST_HISTOGRAMS})),
        steps AS (
          SELECT a.arm, a.arm_order, c.source, c.accepted, c.steps,
                 max(c.positions) OVER (PARTITION BY a.arm, c.source) AS positions
          FROM counts c JOIN (SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS arm,
                                     unnest(?::INTEGER[]) AS arm_order) a USING (run_id)
          WHERE c.steps > 0)
        SELECT arm, source, position, reached, took AS accepted, took / nullif(reached, 0) AS acceptance, took / total AS at_least
        FROM (SELECT arm, arm_order, source, k::BIGINT AS position, sum(steps)::DOUBLE AS total,
                     coalesce(sum(steps) FILTER (WHERE accepted >= k - 1), 0)::BIGINT AS reached,
                     coalesce(sum(steps) FILTER (WHERE accepted >= k), 0)::BIGINT AS took
              FROM steps, range(1, positions + 1) AS r(k) GROUP BY arm, arm_order, source, k)
        ORDER BY arm_order, source, position""",
                  [ids, ids, ids, [a for a, _ in arms], [o for _, o in arms]])
