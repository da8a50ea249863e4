"""Benchmark: `speclogs report` over 10 runs × 100,000 decode rows each (terminal + JSON), target < 2 s on 2 cores.

Builds the database with SQL (the report is measured, not the ingest): 10 runs in a 2×... (5 arms × 2 launches,
factors spec × nccl on 4 of them), 100k decode rows per run with a prefill line (an idle point) every 12 decode rows,
100 client requests per run, 10k spec_cycles rows for the speculative runs. Prints the figures.

    PYTHONPATH=src python benchmarks/bench_report.py [--rows 100000] [--runs 10] [--keep DB]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def build(db: Path, runs: int, rows: int) -> None:
    from speclogs.store import connect

    con = connect(db)
    arms = ["baseline_default", "baseline_nccl", "eagle3_default", "eagle3_nccl", "eagle3_extra"]
    for i in range(runs):
        arm = arms[i % len(arms)]
        run_id = f"run{i:02d}"
        spec = arm.startswith("eagle3")
        factors = json.dumps({"spec": "eagle3" if spec else "baseline", "nccl": "tuned" if "nccl" in arm else "default"})
        rate = {"baseline_default": 62.9, "baseline_nccl": 88.8, "eagle3_default": 73.0, "eagle3_nccl": 94.0,
                "eagle3_extra": 90.0}[arm]
        accept = 2.1 if spec else None
        con.execute(
            "INSERT INTO runs (run_id, run_name, cell, factors, launch_index, sglang_version, speculative_algorithm, env) "
            "VALUES (?, ?, ?, ?, ?, '0.5.14', ?, ?)",
            [run_id, f"{arm}_{i // len(arms) + 1}", arm, factors, i // len(arms) + 1, "EAGLE3" if spec else None,
             json.dumps({"NCCL_PROTO": "LL"} if "nccl" in arm else {})])
        con.execute("INSERT INTO launches VALUES (?, 'f.log', 1, 1, ?, TIMESTAMP '2026-11-30 09:00:00', "
                    "TIMESTAMP '2026-11-30 09:01:00', TIMESTAMP '2026-11-30 09:01:02', TIMESTAMP '2026-11-30 09:00:50', NULL)",
                    [run_id, rows * 2 + 10])
        con.execute(f"""
            INSERT INTO decode_batches (run_id, source_file, line_no, launch_no, ts, tp_rank, running_req, accept_len,
                                        cuda_graph, gen_throughput_tok_s, retracted_req)
            SELECT ?, 'f.log', 100 + 2 * g, 1, TIMESTAMP '2026-11-30 09:01:03' + to_milliseconds(g * 400), 0, 1, ?,
                   true, ? * exp(0.03 * (random() - 0.5)), 0
            FROM generate_series(0, {rows - 1}) t(g)""", [run_id, accept, rate])
        con.execute(f"""
            INSERT INTO prefill_batches (run_id, source_file, line_no, launch_no, tp_rank, running_req)
            SELECT ?, 'f.log', 99 + 2 * g, 1, 0, 0 FROM generate_series(0, {rows - 1}, 12) t(g)""", [run_id])
        con.execute("""
            INSERT INTO bench_requests (run_id, source_file, line_no, request_index, warmup, latency_s, completion_tokens,
                                        output_tok_s, source_kind)
            SELECT ?, 'b.jsonl', g + 1, g, g = 0, 500 / (? * exp(0.03 * (random() - 0.5))), 500, NULL, 'bench_jsonl'
            FROM generate_series(0, 99) t(g)""", [run_id, rate])
        if spec:
            con.execute("""
                INSERT INTO spec_cycles (run_id, source_file, line_no, launch_no, tp_rank, cycle, batch_size, draft_ms,
                                         verify_ms, extend_ms, other_ms, cycle_ms, accepted_tokens, proposed_tokens)
                SELECT ?, 'f.log', 10 + g, 1, 0, 16 * g, 1, 0.9, 21.0, 0.2, 0.05, 22.15, 1, 5
                FROM generate_series(0, 9999) t(g)""", [run_id])
    con.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None, help="write the database here and keep it")
    parser.add_argument("--repeat", type=int, default=3, help="report the best of N runs (default 3)")
    args = parser.parse_args()

    import duckdb
    from rich.console import Console

    from speclogs.analysis import compare_runs
    from speclogs.report import render_json, render_terminal

    with tempfile.TemporaryDirectory() as tmp:
        db = args.keep or Path(tmp) / "bench.duckdb"
        started = time.perf_counter()
        build(db, args.runs, args.rows)
        build_s = time.perf_counter() - started
        arms = ["baseline_default_*", "baseline_nccl_*", "eagle3_default_*", "eagle3_nccl_*", "eagle3_extra_*"]
        # imports (scipy, polars, rich) are paid once per process; measure them apart from the report itself
        started = time.perf_counter()
        import scipy.stats  # noqa: F401

        import_s = time.perf_counter() - started
        # best of --repeat runs: the machine is shared, and the minimum is the least disturbed measurement
        best = None
        for _ in range(args.repeat):
            started = time.perf_counter()
            cpu_started = time.process_time()
            con = duckdb.connect(str(db), read_only=True)
            comparison = compare_runs(con, arms)
            con.close()
            analysis_s = time.perf_counter() - started
            started = time.perf_counter()
            render_terminal(comparison, Console(file=io.StringIO(), width=160))
            text = render_json(comparison)
            render_s = time.perf_counter() - started
            cpu_s = time.process_time() - cpu_started
            if best is None or analysis_s + render_s < best[0] + best[1]:
                best = (analysis_s, render_s, cpu_s)
        analysis_s, render_s, cpu_s = best
    total = analysis_s + render_s
    rows_total = args.runs * args.rows
    sys.stdout.write(
        f"report (best of {args.repeat}) over {args.runs} runs × {args.rows:,} decode rows ({rows_total:,} rows): "
        f"analysis {analysis_s:.2f} s "
        f"+ terminal & JSON render {render_s:.2f} s = {total:.2f} s (target < 2 s; {rows_total / total:,.0f} rows/s)\n"
        f"  CPU time {cpu_s:.2f} s (threads summed; compare with wall time when the machine is busy: "
        f"load average {os.getloadavg()[0]:.1f})\n"
        f"  (database built in {build_s:.1f} s; scipy import {import_s:.2f} s; JSON {len(text):,} bytes; "
        f"{len(comparison.comparisons)} comparisons, {len(comparison.effects)} effects, {len(comparison.warnings)} findings)\n"
    )
    return 0 if total < 2.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
