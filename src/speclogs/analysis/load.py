"""Thin loader: resolve arm selectors to runs and read the tables `compare_runs` needs into polars frames.

No statistics here. Arms are run names or shell-style globs over run names (`'baseline_tuned_*'`).
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from typing import Any

import polars as pl

from speclogs.errors import AnalysisError

_HINT_LIST = "run `speclogs sql \"SELECT run_name FROM runs ORDER BY 1\"` to see every run name"


@dataclass(frozen=True)
class RunTables:
    """Rows of the selected runs, one frame per table (only the columns the analysis uses)."""

    runs: pl.DataFrame
    launches: pl.DataFrame
    decode: pl.DataFrame
    prefill: pl.DataFrame
    bench: pl.DataFrame
    spec_cycles: pl.DataFrame
    server_args: pl.DataFrame
    nccl_settings: pl.DataFrame  # run_id, kind ('env'|'version'), name, value from NCCL INFO lines
    events: pl.DataFrame  # run_id, kind, n: counts of server_events kinds lint cares about; 'retracted_req' = Σ over decode rows


def _select(con: Any, sql: str, run_ids: list) -> pl.DataFrame:
    params = run_ids if run_ids and isinstance(run_ids[0], list) else [run_ids]
    return pl.from_arrow(con.sql(sql, params=params).to_arrow_table())


def split_arm(option: str, known_names: set[str]) -> tuple[str, str]:
    """`LABEL=SELECTOR` → (label, selector); a plain selector is its own label. A string that is a run name is always
    a selector, and a label never holds glob characters, so `a=b*` with no run named so is label 'a', glob 'b*'."""
    label, sep, selector = option.partition("=")
    if option in known_names or not sep or not label.strip() or not selector.strip() or any(c in label for c in "*?["):
        return option, option
    return label.strip(), selector.strip()


def resolve_arms(con: Any, selectors: list[str]) -> dict[str, list[str]]:
    """Map each arm (run name or glob, optionally `LABEL=SELECTOR`) to the run_ids it names, in run_name order; the
    keys are the labels (the selector when unlabelled).

    Raises AnalysisError naming the unknown selector and listing the known run names.
    """
    if len(selectors) < 1:
        raise AnalysisError("report --compare needs at least one arm", hint="e.g. speclogs report --compare baseline eagle3")
    known = con.execute("SELECT run_id, run_name FROM runs ORDER BY run_name, run_id").fetchall()
    if not known:
        raise AnalysisError(
            "the database has no runs", hint="ingest logs first: speclogs ingest PATH --db FILE"
        )
    arms: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    known_names = {name for _, name in known} | {run_id for run_id, _ in known}
    for option in selectors:
        label, selector = split_arm(option, known_names)
        if label in arms:
            raise AnalysisError(f"arm {label!r} is given twice", hint="name each arm once (LABEL=GLOB gives it a label)")
        exact = [run_id for run_id, name in known if name == selector or run_id == selector]
        matched = exact or [run_id for run_id, name in known if fnmatch.fnmatchcase(name, selector)]
        if not matched:
            names = sorted({name for _, name in known})
            shown = ", ".join(names[:40]) + (f", … ({len(names) - 40} more)" if len(names) > 40 else "")
            raise AnalysisError(f"no run matches {selector!r}; known runs: {shown}", hint=_HINT_LIST)
        arms[label] = matched
        labels[label] = selector
    seen: dict[str, str] = {}
    for label, run_ids in arms.items():
        for run_id in run_ids:
            if run_id in seen:
                raise AnalysisError(
                    f"run {run_id} is selected by both {labels[seen[run_id]]!r} and {labels[label]!r}",
                    hint="make the globs disjoint: every run belongs to one arm",
                )
            seen[run_id] = label
    return arms


def load_run_tables(con: Any, run_ids: list[str]) -> RunTables:
    """Read the rows of `run_ids` from every table the comparison uses."""
    where = "WHERE run_id IN (SELECT unnest(?::VARCHAR[]))"
    runs = _select(
        con,
        f"""SELECT run_id, run_name, cell, CAST(factors AS VARCHAR) AS factors, launch_index, sglang_version, model_path,
                   speculative_algorithm, tp_size, hostname, gpu_name, CAST(env AS VARCHAR) AS env,
                   CAST(run_json AS VARCHAR) AS run_json, outcome
            FROM runs {where} ORDER BY run_name""",
        run_ids,
    )
    # Rows are ordered by what names them (run name, file name, launch), not by run_id, which hashes the file's
    # path: the same logs in another directory give the same report.
    named = "JOIN (SELECT run_id, run_name FROM runs) AS r USING (run_id)"
    launch_hash = (
        "concat_ws(chr(1), r.run_name, parse_filename(t.source_file), t.source_file, "
        "lpad(coalesce(t.launch_no, 0)::VARCHAR, 9, '0')) AS launch_hash"
    )
    launches = _select(
        con, f"SELECT {launch_hash}, t.* FROM launches AS t {named} {where} ORDER BY launch_hash", run_ids)
    decode = _select(
        con,
        f"""SELECT {launch_hash}, run_id, line_no, ts, tp_rank, running_req, accept_len, cuda_graph, gen_throughput_tok_s
            FROM decode_batches AS t {named} {where} ORDER BY launch_hash, line_no""",
        run_ids,
    )
    prefill = _select(con, f"""SELECT {launch_hash}, line_no FROM prefill_batches AS t {named} {where} AND running_req = 0
                               ORDER BY launch_hash, line_no""", run_ids)
    bench = _select(
        con,
        f"""SELECT run_id, source_file, line_no, request_index, warmup, latency_s, e2e_latency_s, completion_tokens,
                   output_tok_s, spec_accept_length, source_kind, CAST(extra AS VARCHAR) AS extra
            FROM bench_requests AS t {named} {where} ORDER BY r.run_name, parse_filename(t.source_file), t.source_file, line_no""",
        run_ids,
    )
    spec_cycles = _select(
        con,
        f"""SELECT {launch_hash}, run_id, line_no, launch_no, ts, tp_rank, cycle, batch_size, draft_ms, verify_ms,
                   extend_ms, other_ms, cycle_ms, accepted_tokens, proposed_tokens, gap_ms
            FROM spec_cycles AS t {named} {where} ORDER BY launch_hash, line_no""",
        run_ids,
    )
    launches, decode, prefill, spec_cycles = _with_launch_keys(launches, decode, prefill, spec_cycles)
    server_args = _select(
        con,
        f"""SELECT run_id, name, value FROM server_args {where}
            AND launch_no = (SELECT min(launch_no) FROM server_args s2 WHERE s2.run_id = server_args.run_id)""",
        run_ids,
    )
    nccl_settings = _select(
        con,
        f"SELECT DISTINCT run_id, kind, name, value FROM nccl_events {where} AND kind IN ('env', 'version')",
        run_ids,
    )
    events = _select(
        con,
        f"""SELECT run_id, kind, count(*) AS n FROM server_events {where}
            AND kind IN ('retract', 'watchdog_timeout', 'health_check_failed', 'scheduler_dead') GROUP BY 1, 2
            UNION ALL
            SELECT run_id, 'retracted_req' AS kind, sum(retracted_req) AS n FROM decode_batches {where}
            AND retracted_req > 0 GROUP BY 1""",
        [run_ids, run_ids],
    )
    return RunTables(runs, launches, decode, prefill, bench, spec_cycles, server_args, nccl_settings, events)


def _with_launch_keys(*frames: pl.DataFrame) -> tuple[pl.DataFrame, ...]:
    """Replace the per-launch name key by a dense integer `launch_key` shared by the frames. The key is monotone
    in the name key, so frames that SQL ordered by (launch_hash, line_no) stay ordered by (launch_key, line_no)."""
    import numpy as np

    hashes = np.unique(np.concatenate([f["launch_hash"].to_numpy() for f in frames]))

    def keyed(frame: pl.DataFrame) -> pl.DataFrame:
        h = frame["launch_hash"].to_numpy()
        if len(h) == 0:
            return frame.with_columns(pl.lit(0, pl.Int64).alias("launch_key")).drop("launch_hash")
        change = np.r_[True, h[1:] != h[:-1]]
        key = np.searchsorted(hashes, h[change]).astype(np.int64)[np.cumsum(change) - 1]
        return frame.with_columns(pl.Series("launch_key", key)).drop("launch_hash")

    return tuple(keyed(frame) for frame in frames)


def parse_json_text(text: str | None) -> dict:
    """JSON object text from a runs column, {} when NULL or not an object."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
