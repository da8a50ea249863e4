"""The analysis' reader of the database: arm selectors → runs (`resolve_arms`), their rows → polars frames (`select`)."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from typing import Any, NamedTuple

import polars as pl

from speclogs.errors import AnalysisError

_HINT_LIST = "run `speclogs sql \"SELECT run_name FROM runs ORDER BY 1\"` to see every run name"
IN_RUNS = "run_id IN (SELECT unnest(?::VARCHAR[]))"


def select(con: Any, sql: str, params: list) -> pl.DataFrame:
    return pl.DataFrame(con.sql(sql, params=params))


@dataclass(frozen=True)
class RunTables:
    """The selected runs' rows, a frame per table (the columns the analysis uses)."""

    runs: pl.DataFrame
    launches: pl.DataFrame
    decode: pl.DataFrame
    prefill: pl.DataFrame
    bench: pl.DataFrame
    spec_cycles: pl.DataFrame
    server_args: pl.DataFrame
    nccl_settings: pl.DataFrame  # run_id, kind ('env'|'version'), name, value
    events: pl.DataFrame  # run_id, kind, n: server_events kinds lint counts; 'retracted_req' = Σ over decode rows
    runtime: pl.DataFrame  # run_id, message, source_file, line_no: the profiler's runtime line


def split_arm(option: str, known_names: set[str]) -> tuple[str, str]:
    """`LABEL=SELECTOR` → (label, selector); a plain selector is its own label. A string that is a run name is always
    a selector, and a label never holds glob characters, so `a=b*` with no run named so is label 'a', glob 'b*'."""
    label, sep, selector = option.partition("=")
    if option in known_names or not sep or not label.strip() or not selector.strip() or any(c in label for c in "*?["):
        return option, option
    return label.strip(), selector.strip()


class _Known(NamedTuple):
    run_id: str
    name: str
    cell: str | None
    plan: str | None
    folder: str  # the experiment's: a launcher run's output directory, else the log's directory
    qualified: str  # <folder's last component>/<name>


def _matches(k: _Known, term: str) -> bool:
    key, sep, pattern = term.partition(":")
    if sep and key == "folder":
        folder = k.folder.rstrip("/")
        return fnmatch.fnmatchcase(folder, pattern) or fnmatch.fnmatchcase(folder, "*/" + pattern.strip("/"))
    if sep and key in ("cell", "plan"):
        value = k.cell if key == "cell" else k.plan
        return value is not None and fnmatch.fnmatchcase(value, pattern)
    return term in (k.name, k.run_id, k.qualified) or fnmatch.fnmatchcase(k.name, term) or (
        "/" in term and fnmatch.fnmatchcase(k.qualified, term))


def _known_runs(con: Any) -> list[_Known]:
    rows = con.execute("""SELECT run_id, run_name, cell, json_extract_string(run_json, '$.plan_name'), coalesce(source_dir, ''),
                                 cell IS NOT NULL AND launch_index IS NOT NULL
                          FROM runs ORDER BY run_name, run_id""").fetchall()
    known = []
    for run_id, name, cell, plan, folder, launcher in rows:
        # a launch directory is <output>/<cell>/<launch>: the experiment's folder is <output>
        folder = folder.rstrip("/").rsplit("/", 2)[0] if launcher and folder else folder
        known.append(_Known(run_id, name, cell, plan, folder, f"{folder.rstrip('/').rsplit('/', 1)[-1]}/{name}"))
    return known


def resolve_arms(con: Any, selectors: list[str], *, allow_mixed: bool = False) -> dict[str, list[str]]:
    """{label: run_ids in run_name order} for arms `LABEL=SELECTOR` or `SELECTOR`: space-separated terms a run must all
    match (a run name or glob, 'folder/glob', `cell:GLOB`, `plan:GLOB`, `folder:GLOB`); one experiment per arm unless
    allow_mixed."""
    if not selectors:
        raise AnalysisError("report --compare needs at least one arm", hint="e.g. speclogs report --compare baseline eagle3")
    known = _known_runs(con)
    if not known:
        raise AnalysisError("the database has no runs", hint="ingest logs first: speclogs ingest PATH --db FILE")
    arms: dict[str, list[str]] = {}
    seen: dict[str, str] = {}  # run_id → the selector that took it
    known_names = {k.name for k in known} | {k.run_id for k in known} | {k.qualified for k in known}
    for option in selectors:
        label, selector = split_arm(option, known_names)
        if label in arms:
            raise AnalysisError(f"arm {label!r} is given twice", hint="name each arm once (LABEL=GLOB gives it a label)")
        terms = [selector] if selector in known_names else selector.split()
        exact = [k for k in known if selector in (k.name, k.run_id, k.qualified)]
        matched = exact or [k for k in known if terms and all(_matches(k, term) for term in terms)]
        if not matched:
            names = sorted({k.name for k in known})
            shown = ", ".join(names[:40]) + (f", … ({len(names) - 40} more)" if len(names) > 40 else "")
            raise AnalysisError(f"no run matches {selector!r}; known runs: {shown}", hint=_HINT_LIST)
        if not allow_mixed:
            _single_experiment(label, matched)
        for k in matched:
            if k.run_id in seen:
                raise AnalysisError(f"run {k.name!r} (id {k.run_id}) is selected by both {seen[k.run_id]!r} and {selector!r}",
                                    hint="make the globs disjoint: every run belongs to one arm")
            seen[k.run_id] = selector
        arms[label] = [k.run_id for k in matched]
    return arms


def _single_experiment(label: str, matched: list[_Known]) -> None:
    """An arm's launches come from one plan and one folder: launches of another experiment are another condition."""
    for what, value_of in (("plans", lambda k: k.plan), ("folders", lambda k: k.folder)):
        groups: dict[str, list[str]] = {}
        for k in matched:
            if value_of(k) or what == "folders":
                groups.setdefault(value_of(k), []).append(k.name)
        if len(groups) > 1:
            counts = ", ".join(f"{value} ({len(names)} launches: {', '.join(names)})" for value, names in sorted(groups.items()))
            folder = sorted(matched, key=lambda k: k.qualified)[0].qualified.rsplit("/", 1)[0]
            raise AnalysisError(
                f"arm {label!r} mixes launches from {len(groups)} {what}: {counts}",
                hint=f"select one experiment, e.g. '{folder}/{label.split('/')[-1]}' or "
                     f"'folder:{folder} {label}', or pass --mixed-arms to pool them")


def load_run_tables(con: Any, run_ids: list[str]) -> RunTables:
    """The per-row frames (decode, prefill, spec_cycles) carry `launch_key` (_launch_keys) and are sorted by (launch_key,
    line_no); their run_id is a polars Enum over the selected run ids."""
    keys = _launch_keys(con, run_ids)
    runs = select(con, f"""SELECT run_id, run_name, cell, CAST(factors AS VARCHAR) AS factors, launch_index, sglang_version,
                                  model_path, speculative_algorithm, tp_size, hostname, gpu_name, CAST(env AS VARCHAR) AS env,
                                  CAST(run_json AS VARCHAR) AS run_json, outcome
                           FROM runs WHERE {IN_RUNS} ORDER BY run_name""", [run_ids])
    run_enum = pl.col("run_id").cast(pl.Enum(sorted(set(run_ids))))
    launches = _launch_rows(con, keys, "launches", "t.*", order="")
    decode = _launch_rows(con, keys, "decode_batches", "t.run_id, t.line_no, t.ts, t.tp_rank, t.running_req, t.accept_len, "
                          "t.accept_rate, t.cuda_graph, t.gen_throughput_tok_s").with_columns(run_enum)
    prefill = _launch_rows(con, keys, "prefill_batches", "t.line_no", "t.running_req = 0")
    spec_cycles = _launch_rows(
        con, keys, "spec_cycles",
        "t.run_id, t.line_no, t.launch_no, t.ts, t.tp_rank, t.cycle, t.batch_size, t.draft_ms, t.verify_ms, t.extend_ms, "
        "t.other_ms, t.cycle_ms, t.accepted_tokens, t.proposed_tokens, t.gap_ms").with_columns(run_enum)
    bench = select(con, f"""SELECT run_id, source_file, line_no, request_index, warmup, latency_s, e2e_latency_s,
                                   completion_tokens, output_tok_s, spec_accept_length, source_kind,
                                   CAST(extra AS VARCHAR) AS extra
                            FROM bench_requests AS t JOIN (SELECT run_id, run_name FROM runs) AS r USING (run_id)
                            WHERE {IN_RUNS} ORDER BY r.run_name, parse_filename(t.source_file), t.source_file, line_no""",
                   [run_ids])
    nccl_settings = select(con, f"SELECT DISTINCT run_id, kind, name, value FROM nccl_events WHERE {IN_RUNS} "
                                "AND kind IN ('env', 'version')", [run_ids])
    events = select(con, f"""SELECT run_id, kind, count(*) AS n FROM server_events WHERE {IN_RUNS}
                             AND kind IN ('retract', 'watchdog_timeout', 'health_check_failed', 'scheduler_dead') GROUP BY 1, 2
                             UNION ALL
                             SELECT run_id, 'retracted_req' AS kind, sum(retracted_req) AS n FROM decode_batches
                             WHERE {IN_RUNS} AND retracted_req > 0 GROUP BY 1""", [run_ids, run_ids])
    _, server_args, runtime = load_setup(con, run_ids)
    return RunTables(runs, launches, decode, prefill, bench, spec_cycles, server_args, nccl_settings, events, runtime)


def load_setup(con: Any, run_ids: list[str]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """What the doctor reads: runs, the ServerArgs of each run's first server start, its profiler runtime line."""
    runs = select(con, f"SELECT run_id, run_name, CAST(run_json AS VARCHAR) AS run_json FROM runs WHERE {IN_RUNS} "
                       "ORDER BY run_name", [run_ids])
    server_args = select(con, f"""SELECT run_id, name, value, source_file, line_no FROM server_args WHERE {IN_RUNS}
        AND launch_no = (SELECT min(launch_no) FROM server_args s2 WHERE s2.run_id = server_args.run_id)""", [run_ids])
    runtime = select(con, f"""SELECT run_id, arg_min(message, line_no) AS message, arg_min(source_file, line_no) AS source_file,
                                     min(line_no) AS line_no FROM server_events
                              WHERE {IN_RUNS} AND kind = 'spec_runtime' GROUP BY run_id""", [run_ids])
    return runs, server_args, runtime


def _launch_keys(con: Any, run_ids: list[str]) -> pl.DataFrame:
    """One row per launch (run_id, source_file, launch_no or 0) with rows, and `launch_key`: its dense rank by run name,
    file name, path and launch number, not by run_id (a hash of the path), so the same logs elsewhere report the same."""
    found = " UNION ".join(f"SELECT DISTINCT run_id, source_file, coalesce(launch_no, 0) AS launch_no FROM {table} "
                           f"WHERE {IN_RUNS}{extra}" for table, extra in (
                               ("launches", ""), ("decode_batches", ""), ("prefill_batches", " AND running_req = 0"),
                               ("spec_cycles", "")))
    return select(con, f"""
        SELECT l.*, (dense_rank() OVER (ORDER BY concat_ws(chr(1), r.run_name, parse_filename(l.source_file), l.source_file,
                                                           lpad(l.launch_no::VARCHAR, 9, '0'))) - 1)::INTEGER AS launch_key
        FROM ({found}) AS l JOIN runs AS r USING (run_id) ORDER BY launch_key""", [run_ids] * 4)


def _launch_rows(con: Any, keys: pl.DataFrame, table: str, columns: str, condition: str = "TRUE",
                 order: str = ", t.line_no") -> pl.DataFrame:
    return select(con, f"""SELECT {columns}, k.launch_key FROM {table} AS t
        JOIN (SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS source_file,
                     unnest(?::INTEGER[]) AS launch_no, unnest(?::INTEGER[]) AS launch_key) AS k
          ON t.run_id = k.run_id AND t.source_file = k.source_file AND coalesce(t.launch_no, 0) = k.launch_no
        WHERE {condition} ORDER BY k.launch_key{order}""",
                  [keys[c].to_list() for c in ("run_id", "source_file", "launch_no", "launch_key")])


def parse_json_text(text: str | None) -> dict:
    """A runs column's JSON object, {} when NULL or not an object."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
