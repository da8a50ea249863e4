"""Thin loader: resolve arm selectors to runs and read the tables `compare_runs` needs into polars frames.

No statistics here. Arms are run names or shell-style globs over run names (`'baseline_tuned_*'`).
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
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
    name_of = dict(known)
    for label, run_ids in arms.items():
        for run_id in run_ids:
            if run_id in seen:
                raise AnalysisError(
                    f"run {name_of.get(run_id, run_id)!r} (id {run_id}) is selected by both {labels[seen[run_id]]!r} and {labels[label]!r}",
                    hint="make the globs disjoint: every run belongs to one arm",
                )
            seen[run_id] = label
    return arms


def load_run_tables(con: Any, run_ids: list[str]) -> RunTables:
    """Read the rows of `run_ids` from every table the comparison uses.

    The per-row frames (decode, prefill, spec_cycles) carry an integer `launch_key` (one per (run, file, launch),
    shared by the frames) and `run_id` as a polars Enum over the selected run ids (sorted): no per-row strings, so
    millions of rows stay a few bytes each. They are ordered by (launch_key, line_no)."""
    where = "WHERE run_id IN (SELECT unnest(?::VARCHAR[]))"
    runs = _select(
        con,
        f"""SELECT run_id, run_name, cell, CAST(factors AS VARCHAR) AS factors, launch_index, sglang_version, model_path,
                   speculative_algorithm, tp_size, hostname, gpu_name, CAST(env AS VARCHAR) AS env,
                   CAST(run_json AS VARCHAR) AS run_json, outcome
            FROM runs {where} ORDER BY run_name""",
        run_ids,
    )
    keys = _launch_keys(con, run_ids)
    run_type = pl.Enum(sorted(set(run_ids)))
    launches = _select(
        con,
        """SELECT t.*, k.launch_key FROM launches AS t
           JOIN (SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS source_file,
                        unnest(?::INTEGER[]) AS launch_no, unnest(?::INTEGER[]) AS launch_key) AS k
             ON t.run_id = k.run_id AND t.source_file = k.source_file AND coalesce(t.launch_no, 0) = k.launch_no
           ORDER BY k.launch_key""",
        [keys[c].to_list() for c in ("run_id", "source_file", "launch_no", "launch_key")],
    )
    decode = _launch_rows(con, keys, run_type, "decode_batches", "decode_rows",
                          "t.line_no, t.ts, t.tp_rank, t.running_req, t.accept_len, t.accept_rate, t.cuda_graph, "
                          "t.gen_throughput_tok_s")
    prefill = _launch_rows(con, keys, run_type, "prefill_batches", "idle_rows", "t.line_no",
                           "t.running_req = 0").drop("run_id")
    spec_cycles = _launch_rows(
        con, keys, run_type, "spec_cycles", "cycle_rows",
        "t.line_no, t.launch_no, t.ts, t.tp_rank, t.cycle, t.batch_size, t.draft_ms, t.verify_ms, t.extend_ms, "
        "t.other_ms, t.cycle_ms, t.accepted_tokens, t.proposed_tokens, t.gap_ms")
    named = "JOIN (SELECT run_id, run_name FROM runs) AS r USING (run_id)"
    bench = _select(
        con,
        f"""SELECT run_id, source_file, line_no, request_index, warmup, latency_s, e2e_latency_s, completion_tokens,
                   output_tok_s, spec_accept_length, source_kind, CAST(extra AS VARCHAR) AS extra
            FROM bench_requests AS t {named} {where} ORDER BY r.run_name, parse_filename(t.source_file), t.source_file, line_no""",
        run_ids,
    )
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


def _launch_keys(con: Any, run_ids: list[str]) -> pl.DataFrame:
    """One row per launch (run_id, source_file, launch_no — NULL read as 0) of the selected runs found in launches,
    decode_batches, the idle prefill rows or spec_cycles, with `launch_key`: its dense rank by what names it (run name,
    file name, file path, launch number), not by run_id, which hashes the file's path — the same logs in another
    directory give the same report — and its rows in each per-row table (decode_rows, idle_rows, cycle_rows)."""
    where = "WHERE run_id IN (SELECT unnest(?::VARCHAR[]))"
    found = " UNION ALL ".join(
        f"SELECT run_id, source_file, coalesce(launch_no, 0) AS launch_no, '{name}' AS kind, count(*) AS n "
        f"FROM {table} {where}{extra} GROUP BY ALL"
        for table, name, extra in (("launches", "launch", ""), ("decode_batches", "decode", ""),
                                   ("prefill_batches", "idle", " AND running_req = 0"), ("spec_cycles", "cycle", "")))
    return _select(con, f"""
        SELECT l.*, (dense_rank() OVER (ORDER BY concat_ws(chr(1), r.run_name, parse_filename(l.source_file), l.source_file,
                                                           lpad(l.launch_no::VARCHAR, 9, '0'))) - 1)::INTEGER AS launch_key
        FROM (SELECT run_id, source_file, launch_no, coalesce(sum(n) FILTER (kind = 'decode'), 0) AS decode_rows,
                     coalesce(sum(n) FILTER (kind = 'idle'), 0) AS idle_rows,
                     coalesce(sum(n) FILTER (kind = 'cycle'), 0) AS cycle_rows
              FROM ({found}) GROUP BY ALL) AS l
        JOIN runs AS r USING (run_id) ORDER BY launch_key""", [run_ids] * 4)


_ROWS_PER_QUERY = 1 << 21  # the per-row tables are read about this many rows (whole launches) per query


def _launch_rows(con: Any, keys: pl.DataFrame, run_type: pl.Enum, table: str, count: str, columns: str,
                 condition: str = "") -> pl.DataFrame:
    """The rows of `table` (`columns` of `t`, WHERE `condition`) of the launches in `keys` (`count`: the keys' column
    of their rows in it), ordered by (launch_key, line_no), with run_id (a `run_type` Enum) first and launch_key last.

    A query per group of whole launches, about _ROWS_PER_QUERY rows, joins the rows to their integer launch_key;
    polars sorts each group on one packed integer (launch_key, line_no): DuckDB returns a parallel scan's rows in no
    fixed order, an ORDER BY there costs about three times as much, and a sort of every row at once would hold them
    all twice. The frame is the groups side by side (chunks, not copied into one)."""
    sql = f"""SELECT k.launch_key, {columns} FROM {table} AS t
              JOIN (SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS source_file,
                           unnest(?::INTEGER[]) AS launch_no, unnest(?::INTEGER[]) AS launch_key) AS k
                ON t.run_id = k.run_id AND t.source_file = k.source_file AND coalesce(t.launch_no, 0) = k.launch_no
              WHERE t.run_id IN (SELECT unnest(?::VARCHAR[])){f" AND {condition}" if condition else ""}"""
    launches = keys.filter(pl.col(count) > 0).with_columns(
        ((pl.col(count).cum_sum() - pl.col(count)) // _ROWS_PER_QUERY).alias("_query"))
    # run_id per row from its launch: the Enum's codes, gathered (no per-row strings)
    run_of_key = np.zeros(int(keys["launch_key"].max()) + 1 if keys.height else 1, dtype=np.uint32)
    run_of_key[keys["launch_key"].to_numpy()] = keys["run_id"].cast(run_type).to_physical().to_numpy()
    run_names = pl.Series("run_id", run_type.categories, dtype=run_type)
    frames = []
    for part in launches.partition_by("_query", maintain_order=True) if launches.height else [launches]:
        frame = _select(con, sql, [part[c].to_list() for c in ("run_id", "source_file", "launch_no", "launch_key")]
                        + [part["run_id"].unique(maintain_order=True).to_list()])
        # (launch_key, line_no) is unique: a line is one row of a table
        frame = frame.sort(pl.col("launch_key").cast(pl.Int64) * (1 << 40) + pl.col("line_no"))
        frames.append(frame.select(run_names.gather(run_of_key[frame["launch_key"].to_numpy()]),
                                   pl.exclude("launch_key"), "launch_key"))
    return pl.concat(frames, rechunk=False)


def parse_json_text(text: str | None) -> dict:
    """JSON object text from a runs column, {} when NULL or not an object."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
