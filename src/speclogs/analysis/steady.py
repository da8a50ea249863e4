"""Which measurements count: the steady-state rule for decode rows and the warm-up rule for client requests.

Steady-state rule for `decode_batches` (server source). A decode row counts when ALL of:
  1. it is from the lowest TP rank that logged decode rows in its launch (SGLang logs decode stats on TP0);
  2. its ts is at or after the launch's 'The server is fired up and ready to roll!' line and the end of CUDA-graph
     capture (else 'startup': the server's own warm-up), and at or after the first `/health` 200 (else
     'before_health_200': a client that did not wait for health measured warm-up);
  3. `cuda_graph` is not False (False after start-up = eager batches: warm-up or batches larger than the captured graphs);
  4. it is not the first decode row after idle: SGLang's `gen throughput` is tokens since the previous decode log
     divided by the wall time since then, so the first row after the server sat idle (the first row of the launch,
     and the first row after a prefill that found 0 running requests) includes idle time and prefill;
  5. its `gen_throughput_tok_s` is finite and > 0.
Each excluded row keeps its reason (`excluded_reason`). Rows between two idle points form one segment
(≈ one request in single-stream benchmarks): the resampling unit inside a launch.

Warm-up rule for `bench_requests` (client source): rows with warmup = true are excluded; when a run's rows carry
no warm-up flag at all (older `*.bench.json`), its first request (lowest request_index) is the warm-up.
"""

from __future__ import annotations

import numpy as np
import polars as pl

REASONS = ("other_tp_rank", "startup", "before_health_200", "no_cuda_graph", "first_after_idle", "non_finite")
_NO_TIME = np.iinfo(np.int64).min


def _launch_times(launches: pl.DataFrame, n_keys: int, column: pl.Expr) -> np.ndarray:
    """Per launch_key, a timestamp expression over the launches frame as epoch µs (no constraint where NULL)."""
    out = np.full(n_keys, _NO_TIME, dtype=np.int64)
    if launches.is_empty():
        return out
    rows = launches.select("launch_key", column.dt.epoch("us").alias("_t")).filter(pl.col("_t").is_not_null())
    out[rows["launch_key"].to_numpy()] = rows["_t"].to_numpy()
    return out


def mark_steady(decode: pl.DataFrame, prefill: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """decode rows (sorted by launch_key, line_no) + columns steady (bool), excluded_reason (str|null) and segment
    (int: idle points so far in the launch). `launch_key` is an integer id of (run, file, launch) shared by the three
    frames; prefill holds only the prefill rows that found 0 running requests (the idle points)."""
    if decode.is_empty():
        return decode.with_columns(
            pl.lit(True).alias("steady"), pl.lit(None, pl.Utf8).alias("excluded_reason"), pl.lit(0, pl.Int64).alias("segment")
        )
    key = decode["launch_key"].to_numpy().astype(np.int64)
    line = decode["line_no"].to_numpy().astype(np.int64)
    n_keys = int(max(key.max(), launches["launch_key"].max() if not launches.is_empty() else 0)) + 1
    shift = np.int64(40)
    idle = np.sort((prefill["launch_key"].to_numpy().astype(np.int64) << shift) | prefill["line_no"].to_numpy().astype(np.int64))
    segment = np.searchsorted(idle, (key << shift) | line) - np.searchsorted(idle, key << shift)

    rank = decode["tp_rank"].fill_null(-1).to_numpy().astype(np.int64)
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    min_rank = np.repeat(np.minimum.reduceat(rank, starts), np.diff(np.r_[starts, len(key)]))
    kept = rank == min_rank

    ts = decode["ts"].dt.epoch("us").fill_null(_NO_TIME).to_numpy()
    ready = np.maximum(_launch_times(launches, n_keys, pl.coalesce("ready_ts", "first_health_200_ts"))[key],
                       _launch_times(launches, n_keys, pl.col("cuda_graph_end_ts"))[key])
    health = _launch_times(launches, n_keys, pl.coalesce("first_health_200_ts", "ready_ts"))[key]
    eager = decode["cuda_graph"].eq(False).fill_null(False).to_numpy()
    rate = decode["gen_throughput_tok_s"].cast(pl.Float64).fill_null(float("nan")).to_numpy()

    # first decode row after idle, among the kept rank's rows
    kept_index = np.flatnonzero(kept)
    kept_key, kept_segment = key[kept_index], segment[kept_index]
    first = np.r_[True, (kept_key[1:] != kept_key[:-1]) | (kept_segment[1:] != kept_segment[:-1])]
    after_idle = np.zeros(len(key), dtype=bool)
    after_idle[kept_index] = first

    conditions = [
        ~kept,
        (ready != _NO_TIME) & (ts <= ready),
        (health != _NO_TIME) & (ts < health),
        eager,
        after_idle,
        ~np.isfinite(rate) | (rate <= 0),
    ]
    code = np.select(conditions, list(range(len(REASONS))), default=len(REASONS))
    labels = np.array(list(REASONS) + [None], dtype=object)
    reason = pl.Series("excluded_reason", labels[code], dtype=pl.Utf8)
    return decode.with_columns(
        reason, pl.Series("steady", code == len(REASONS)), pl.Series("segment", segment.astype(np.int64))
    )


def launch_slices(rows: pl.DataFrame) -> list[tuple[str, int, int]]:
    """(run_id, start, stop) of each launch's contiguous rows in a frame sorted by launch_key."""
    if rows.is_empty():
        return []
    key = rows["launch_key"].to_numpy()
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    stops = np.r_[starts[1:], len(key)]
    run_ids = rows["run_id"].gather(starts).to_list()
    return list(zip(run_ids, starts.tolist(), stops.tolist()))


def server_columns(steady_rows: pl.DataFrame) -> np.ndarray:
    """Per steady decode row: [tokens per step w = batch × accept_len, seconds per step t = w / rate, batch, 1].

    Summed over rows: throughput = Σw/Σt, accept_len = Σw/Σbatch, batch = Σbatch/Σ1, step time = Σt/Σ1.
    (SGLang logs one decode row per fixed number of decode steps, so rows are equally weighted in steps.)
    """
    batch = steady_rows["running_req"].fill_null(1).cast(pl.Float64).clip(lower_bound=1.0).to_numpy()
    accept = steady_rows["accept_len"].fill_null(1.0).cast(pl.Float64).to_numpy()
    rate = steady_rows["gen_throughput_tok_s"].cast(pl.Float64).to_numpy()
    tokens = batch * accept
    return np.column_stack([tokens, tokens / rate, batch, np.ones_like(rate)])


def client_rows(bench: pl.DataFrame) -> pl.DataFrame:
    """Non-warm-up client requests with tokens and seconds; adds `excluded_reason` for the ones that cannot count."""
    if bench.is_empty():
        return bench.with_columns(
            pl.lit(None, pl.Float64).alias("tokens"), pl.lit(None, pl.Float64).alias("seconds"),
            pl.lit(None, pl.Utf8).alias("excluded_reason"),
        )
    flagged = bench.group_by("run_id").agg(pl.col("warmup").is_not_null().any().alias("_has_flag"),
                                          pl.col("request_index").min().alias("_first_index"))
    rows = bench.join(flagged, on="run_id", how="left")
    tokens = pl.col("completion_tokens").cast(pl.Float64)
    seconds = pl.coalesce(
        pl.col("latency_s"), pl.col("e2e_latency_s"), tokens / pl.col("output_tok_s")
    ).cast(pl.Float64)
    rows = rows.with_columns(tokens.alias("tokens"), seconds.alias("seconds"))
    is_warmup = pl.when(pl.col("_has_flag")).then(pl.col("warmup").fill_null(False)).otherwise(
        pl.col("request_index") == pl.col("_first_index")
    )
    bad = (
        pl.col("tokens").is_null() | pl.col("seconds").is_null() | ~pl.col("tokens").is_finite()
        | ~pl.col("seconds").is_finite() | (pl.col("tokens") <= 0) | (pl.col("seconds") <= 0)
    )
    reason = pl.when(is_warmup).then(pl.lit("warmup")).when(bad).then(pl.lit("non_finite")).otherwise(pl.lit(None, pl.Utf8))
    return rows.with_columns(reason.alias("excluded_reason")).drop(["_has_flag", "_first_index"])
