"""Where start-up time goes, per launch and arm, from the `startup_phases` view: `startup_breakdown(frame, arms)` is
pure; `startup_for(con, arm_runs)` reads the view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from speclogs.analysis.results import Finding


@dataclass(frozen=True)
class StartupBreakdown:
    phases: pl.DataFrame        # arm, run_name, launch_no, phase, phase_order, seconds, within_ready (one row a phase)
    arm_means: pl.DataFrame     # arm, phase, phase_order, mean_s (over the arm's launches; a missing phase counts 0 s)
    ready_s: dict[str, float]   # arm → mean seconds to ready (Σ of its phases within ready)
    differs_most: str | None    # the phase whose arm means are furthest apart
    findings: tuple[Finding, ...]


def startup_for(con: Any, arm_runs: Mapping[str, list[str]]) -> StartupBreakdown | None:
    """The selected runs' startup_phases rows (None where the database has no such view, or no rows)."""
    ids = [run_id for run_ids in arm_runs.values() for run_id in run_ids]
    if not con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'startup_phases'").fetchall()[0][0]:
        return None
    frame = pl.DataFrame(con.sql(
        "SELECT p.*, r.run_name FROM startup_phases p JOIN runs r USING (run_id) WHERE run_id IN (SELECT unnest(?::VARCHAR[]))",
        params=[ids]))
    return startup_breakdown(frame, arm_runs) if frame.height else None


def startup_breakdown(frame: pl.DataFrame, arm_runs: Mapping[str, list[str]]) -> StartupBreakdown:
    arm_of = {run_id: arm for arm, run_ids in arm_runs.items() for run_id in run_ids}
    phases = frame.with_columns(pl.col("run_id").replace_strict(arm_of, default=None).alias("arm")).filter(
        pl.col("arm").is_not_null()).select("arm", "run_name", "launch_no", "phase", "phase_order", "seconds",
                                           "within_ready").sort("arm", "run_name", "launch_no", "phase_order", "phase")
    inside = phases.filter(pl.col("within_ready"))
    launches = inside.group_by("arm").agg(pl.struct("run_name", "launch_no").n_unique().alias("n"))
    arm_means = (inside.group_by("arm", "phase", "phase_order", maintain_order=True).agg(pl.col("seconds").sum().alias("total_s"))
                 .join(launches, on="arm").with_columns((pl.col("total_s") / pl.col("n")).alias("mean_s"))
                 .select("arm", "phase", "phase_order", "mean_s").sort("arm", "phase_order", "phase"))
    ready = dict(arm_means.group_by("arm").agg(pl.col("mean_s").sum()).iter_rows())
    differs_most, findings = None, ()
    if len(ready) > 1:
        wide = arm_means.pivot(on="arm", index="phase", values="mean_s").fill_null(0.0)
        spread = wide.select("phase", pl.max_horizontal(pl.exclude("phase")) - pl.min_horizontal(pl.exclude("phase")))
        phase, seconds = max(spread.iter_rows(), key=lambda row: row[1])
        differs_most = phase
        slow, fast = max(ready, key=ready.get), min(ready, key=ready.get)
        findings = (Finding("startup_differs", f"start-up: {slow} took {ready[slow]:.1f} s to ready, {fast} "
                            f"{ready[fast]:.1f} s; the phase that differs most between arms is {phase} "
                            f"({seconds:.1f} s apart in the arm means)", "info", tuple(ready)),)
    return StartupBreakdown(phases, arm_means, ready, differs_most, findings)
