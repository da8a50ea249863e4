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

import math

import numpy as np
import polars as pl

KEYS = ["run_id", "source_file", "launch_no"]


def mark_steady(decode: pl.DataFrame, prefill: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """decode rows + columns steady (bool), excluded_reason (str|null), segment (int: idle points so far in the launch)."""
    if decode.is_empty():
        return decode.with_columns(
            pl.lit(True).alias("steady"), pl.lit(None, pl.Utf8).alias("excluded_reason"), pl.lit(0).alias("segment")
        )
    min_rank = decode.group_by(KEYS).agg(pl.col("tp_rank").min().alias("_min_rank"))
    dec = decode.join(min_rank, on=KEYS, how="left", nulls_equal=True)
    idle = prefill.select(KEYS + ["line_no"]).with_columns(pl.lit(0, pl.Int8).alias("_kind"))
    marks = (
        pl.concat([dec.select(KEYS + ["line_no"]).with_columns(pl.lit(1, pl.Int8).alias("_kind")), idle], how="vertical_relaxed")
        .sort(KEYS + ["line_no", "_kind"])
        .with_columns((pl.col("_kind") == 0).cast(pl.Int64).cum_sum().over(KEYS).alias("segment"))
        .filter(pl.col("_kind") == 1)
        .with_columns(pl.col("segment").shift(1).over(KEYS).alias("_prev_segment"))
        .select(KEYS + ["line_no", "segment", "_prev_segment"])
    )
    dec = dec.join(marks, on=KEYS + ["line_no"], how="left", nulls_equal=True)
    ready = launches.select(
        KEYS
        + [
            pl.coalesce("ready_ts", "first_health_200_ts").alias("_ready_ts"),
            pl.coalesce("first_health_200_ts", "ready_ts").alias("_health_ts"),
            pl.col("cuda_graph_end_ts").alias("_graph_end_ts"),
        ]
    )
    dec = dec.join(ready, on=KEYS, how="left", nulls_equal=True)
    rate = pl.col("gen_throughput_tok_s")
    ts = pl.col("ts")
    reason = (
        pl.when(pl.col("tp_rank").is_not_null() & (pl.col("tp_rank") != pl.col("_min_rank")))
        .then(pl.lit("other_tp_rank"))
        .when((pl.col("_ready_ts").is_not_null() & (ts <= pl.col("_ready_ts")))
              | (pl.col("_graph_end_ts").is_not_null() & (ts < pl.col("_graph_end_ts"))))
        .then(pl.lit("startup"))
        .when(pl.col("_health_ts").is_not_null() & (ts < pl.col("_health_ts")))
        .then(pl.lit("before_health_200"))
        .when(pl.col("cuda_graph") == False)  # noqa: E712 (polars expression)
        .then(pl.lit("no_cuda_graph"))
        .when(pl.col("_prev_segment").is_null() | (pl.col("segment") != pl.col("_prev_segment")))
        .then(pl.lit("first_after_idle"))
        .when(rate.is_null() | rate.is_nan() | rate.is_infinite() | (rate <= 0))
        .then(pl.lit("non_finite"))
        .otherwise(pl.lit(None, pl.Utf8))
    )
    return dec.with_columns(reason.alias("excluded_reason")).with_columns(
        pl.col("excluded_reason").is_null().alias("steady")
    ).drop(["_min_rank", "_prev_segment", "_ready_ts", "_health_ts", "_graph_end_ts"])


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


def finite_positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0
