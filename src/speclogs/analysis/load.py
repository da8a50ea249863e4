"""Thin loader: resolve arm selectors to runs and read the tables `compare_runs` needs into polars frames.

No statistics here. Arms are run names or shell-style globs over run names (`'baseline_tuned_*'`), optionally with
the run's folder before the name, or `cell:` / `plan:` / `folder:` terms (resolve_arms).
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
    runtime: pl.DataFrame  # run_id, message, source_file, line_no: the profiler's runtime line (speclogs.doctor reads it)


def _select(con: Any, sql: str, run_ids: list) -> pl.DataFrame:
    params = run_ids if run_ids and isinstance(run_ids[0], list) else [run_ids]
    return pl.DataFrame(con.sql(sql, params=params))


def split_arm(option: str, known_names: set[str]) -> tuple[str, str]:
    """`LABEL=SELECTOR` → (label, selector); a plain selector is its own label. A string that is a run name is always
    a selector, and a label never holds glob characters, so `a=b*` with no run named so is label 'a', glob 'b*'."""
    label, sep, selector = option.partition("=")
    if option in known_names or not sep or not label.strip() or not selector.strip() or any(c in label for c in "*?["):
        return option, option
    return label.strip(), selector.strip()


SELECTOR_KEYS = ("cell", "plan", "folder")


@dataclass(frozen=True)
class _Known:
    run_id: str
    name: str
    cell: str | None
    plan: str | None
    folder: str  # the experiment's folder (a launcher run's output directory, else the log's directory)

    @property
    def qualified(self) -> str:
        return f"{self.folder.rstrip('/').rsplit('/', 1)[-1]}/{self.name}"

    def matches(self, term: str) -> bool:
        key, sep, pattern = term.partition(":")
        if sep and key in SELECTOR_KEYS:
            if key == "folder":
                folder = self.folder.rstrip("/")
                return fnmatch.fnmatchcase(folder, pattern) or fnmatch.fnmatchcase(folder, "*/" + pattern.strip("/"))
            value = self.cell if key == "cell" else self.plan
            return value is not None and fnmatch.fnmatchcase(value, pattern)
        return term in (self.name, self.run_id, self.qualified) or fnmatch.fnmatchcase(self.name, term) or (
            "/" in term and fnmatch.fnmatchcase(self.qualified, term))


def _known_runs(con: Any) -> list[_Known]:
    rows = con.execute("""SELECT run_id, run_name, cell, json_extract_string(run_json, '$.plan_name'), source_dir,
                                 cell IS NOT NULL AND launch_index IS NOT NULL
                          FROM runs ORDER BY run_name, run_id""").fetchall()
    known = []
    for run_id, name, cell, plan, source_dir, launcher in rows:
        folder = source_dir or ""
        if launcher and folder:  # a launch directory is <output>/<cell>/<launch>
            folder = folder.rstrip("/").rsplit("/", 2)[0]
        known.append(_Known(run_id, name, cell, plan, folder))
    return known


def resolve_arms(con: Any, selectors: list[str], *, allow_mixed: bool = False) -> dict[str, list[str]]:
    """Map each arm (optionally `LABEL=SELECTOR`) to the run_ids it names, in run_name order; the keys are the labels
    (the selector when unlabelled).

    A selector is one or more space-separated terms, all of which a run must match: a run name or a glob over run
    names ('eagle3_nccl_*'), the same prefixed by the run's folder ('h200x2-overhead/eagle3_prof_*'), `cell:GLOB`,
    `plan:GLOB` (the launch plan's name) or `folder:GLOB` (the experiment's folder: a launcher run's output directory,
    else the log's directory; its last components match). Raises AnalysisError naming an unknown selector, and — unless
    `allow_mixed` — an arm whose launches come from different plans or folders, naming them.
    """
    if len(selectors) < 1:
        raise AnalysisError("report --compare needs at least one arm", hint="e.g. speclogs report --compare baseline eagle3")
    known = _known_runs(con)
    if not known:
        raise AnalysisError(
            "the database has no runs", hint="ingest logs first: speclogs ingest PATH --db FILE"
        )
    arms: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    known_names = {k.name for k in known} | {k.run_id for k in known} | {k.qualified for k in known}
    for option in selectors:
        label, selector = split_arm(option, known_names)
        if label in arms:
            raise AnalysisError(f"arm {label!r} is given twice", hint="name each arm once (LABEL=GLOB gives it a label)")
        terms = [selector] if selector in known_names else selector.split()
        exact = [k for k in known if selector in (k.name, k.run_id, k.qualified)]
        matched = exact or [k for k in known if terms and all(k.matches(term) for term in terms)]
        if not matched:
            names = sorted({k.name for k in known})
            shown = ", ".join(names[:40]) + (f", … ({len(names) - 40} more)" if len(names) > 40 else "")
            raise AnalysisError(f"no run matches {selector!r}; known runs: {shown}", hint=_HINT_LIST)
        if not allow_mixed:
            _single_experiment(label, matched)
        arms[label] = [k.run_id for k in matched]
        labels[label] = selector
    seen: dict[str, str] = {}
    name_of = {k.run_id: k.name for k in known}
    for label, run_ids in arms.items():
        for run_id in run_ids:
            if run_id in seen:
                raise AnalysisError(
                    f"run {name_of.get(run_id, run_id)!r} (id {run_id}) is selected by both {labels[seen[run_id]]!r} and {labels[label]!r}",
                    hint="make the globs disjoint: every run belongs to one arm",
                )
            seen[run_id] = label
    return arms


def _single_experiment(label: str, matched: list[_Known]) -> None:
    """An arm's launches come from one plan and one folder: launches of another experiment are another condition."""
    for what, values in (("plans", {k.plan for k in matched if k.plan}), ("folders", {k.folder for k in matched})):
        if len(values) > 1:
            counts = ", ".join(f"{value} ({sum(1 for k in matched if (k.plan if what == 'plans' else k.folder) == value)} "
                               f"launches: {', '.join(k.name for k in matched if (k.plan if what == 'plans' else k.folder) == value)})"
                               for value in sorted(values))
            example = sorted(matched, key=lambda k: k.qualified)[0]
            raise AnalysisError(
                f"arm {label!r} mixes launches from {len(values)} {what}: {counts}",
                hint=f"select one experiment, e.g. '{example.qualified.rsplit('/', 1)[0]}/{label.split('/')[-1]}' or "
                     f"'folder:{example.qualified.rsplit('/', 1)[0]} {label}', or pass --mixed-arms to pool them")


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
    server_args = load_server_args(con, run_ids)
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
    return RunTables(runs, launches, decode, prefill, bench, spec_cycles, server_args, nccl_settings, events,
                     load_runtime(con, run_ids))


def load_setup(con: Any, run_ids: list[str]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """What the doctor reads of each run: runs (run_id, run_name, run_json), its logged server args, its runtime line."""
    runs = _select(con, """SELECT run_id, run_name, CAST(run_json AS VARCHAR) AS run_json FROM runs
                           WHERE run_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY run_name""", run_ids)
    return runs, load_server_args(con, run_ids), load_runtime(con, run_ids)


def load_runtime(con: Any, run_ids: list[str]) -> pl.DataFrame:
    """The profiler's `speclogs profiler: runtime: …` lines (server_events kind spec_runtime), first one per run."""
    return _select(con, """SELECT run_id, arg_min(message, line_no) AS message, arg_min(source_file, line_no) AS source_file,
                                  min(line_no) AS line_no FROM server_events
                           WHERE run_id IN (SELECT unnest(?::VARCHAR[])) AND kind = 'spec_runtime' GROUP BY run_id""",
                   run_ids)


def load_server_args(con: Any, run_ids: list[str]) -> pl.DataFrame:
    """The logged ServerArgs fields of each run's first server start: run_id, name, value (repr), source_file, line_no."""
    return _select(
        con,
        """SELECT run_id, name, value, source_file, line_no FROM server_args WHERE run_id IN (SELECT unnest(?::VARCHAR[]))
           AND launch_no = (SELECT min(launch_no) FROM server_args s2 WHERE s2.run_id = server_args.run_id)""",
        run_ids,
    )


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
