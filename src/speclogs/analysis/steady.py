"""Which measurements count: the steady-state rule for decode rows, profiled cycles and client requests, one reason
per exclusion (REASONS, in this order; docs/report.md, "Steady-state rule")."""

from __future__ import annotations

import numpy as np
import polars as pl

from speclogs.analysis import stats

REASONS = ("other_tp_rank", "startup", "before_health_200", "warmup_request", "no_cuda_graph", "first_after_idle",
           "non_finite", "warmup_detected")
# excluded_reason's type: the reasons in alphabetical order, so a sort by it is a sort by the text
REASON_TYPE = pl.Enum(sorted(REASONS))
SINGLE_STREAM_SOURCES = ("bench_jsonl", "bench_json")  # one request after the other: request k = segment k
_NO_TIME = np.iinfo(np.int64).min
_SHIFT = np.int64(40)


def graph_settings(server_args: pl.DataFrame) -> dict[str, tuple[bool, int | None]]:
    """Per run: (CUDA graphs disabled by configuration, largest captured decode batch size or None when unknown)."""
    import ast

    out: dict[str, tuple[bool, int | None]] = {}
    for (run_id,), rows in server_args.partition_by("run_id", as_dict=True).items():
        args = dict(zip(rows["name"], rows["value"]))
        sizes: list[int] = []
        for name in ("cuda_graph_max_bs_decode", "cuda_graph_max_bs", "cuda_graph_bs_decode", "cuda_graph_bs"):
            try:
                value = ast.literal_eval(str(args.get(name, "None")))
            except (ValueError, SyntaxError):
                continue
            sizes = [v for v in (value if isinstance(value, (list, tuple)) else [value])
                     if isinstance(v, int) and not isinstance(v, bool)]
            if sizes:
                break
        out[run_id] = (str(args.get("disable_cuda_graph", "False")).strip() == "True", max(sizes) if sizes else None)
    return out


def _launch_windows(launches: pl.DataFrame, max_key: int) -> tuple[np.ndarray, np.ndarray]:
    """Per launch_key, epoch µs (_NO_TIME where unknown): ready (or the end of CUDA-graph capture, whichever is later)
    and the first /health 200."""
    n_keys = int(max(max_key, launches["launch_key"].max() if not launches.is_empty() else 0)) + 1

    def times(column: pl.Expr) -> np.ndarray:
        out = np.full(n_keys, _NO_TIME, dtype=np.int64)
        rows = launches.select("launch_key", column.dt.epoch("us").alias("_t")).filter(pl.col("_t").is_not_null())
        out[rows["launch_key"].to_numpy()] = rows["_t"].to_numpy()
        return out

    ready = np.maximum(times(pl.coalesce("ready_ts", "first_health_200_ts")), times(pl.col("cuda_graph_end_ts")))
    return ready, times(pl.coalesce("first_health_200_ts", "ready_ts"))


def _idle_points(prefill: pl.DataFrame) -> np.ndarray:
    """The idle points (prefill rows that found 0 running requests) as sorted (launch_key << _SHIFT) | line_no."""
    return np.sort((prefill["launch_key"].to_numpy().astype(np.int64) << _SHIFT)
                   | prefill["line_no"].to_numpy().astype(np.int64))


def _launch_rule(frame: pl.DataFrame, idle: np.ndarray, windows: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """The rule every row kind shares, on rows of whole launches sorted by (launch_key, line_no): (launch key, first
    row of each launch, segment = idle points so far in the launch, on the launch's lowest TP rank, before ready,
    before the first /health 200)."""
    key = frame["launch_key"].to_numpy().astype(np.int64, copy=False)
    starts = _launch_starts(key)
    lengths = np.diff(np.r_[starts, len(key)])
    before = np.repeat(np.searchsorted(idle, key[starts] << _SHIFT), lengths)  # one search per launch, not per row
    segment = np.searchsorted(idle, (key << _SHIFT) | frame["line_no"].to_numpy()) - before
    rank = frame["tp_rank"].fill_null(-1).to_numpy()
    kept = rank == np.repeat(np.minimum.reduceat(rank, starts), lengths)
    ts = frame["ts"].dt.epoch("us").fill_null(_NO_TIME).to_numpy()
    ready, health = windows[0][key], windows[1][key]
    return key, starts, segment, kept, (ready != _NO_TIME) & (ts <= ready), (health != _NO_TIME) & (ts < health)


def _dense_rank(key: np.ndarray, segment: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row: the rank of its segment among the segments of `rows` (a mask) in its launch; −1 outside `rows`."""
    out = np.full(len(key), -1, dtype=np.int64)
    index = np.flatnonzero(rows)
    if len(index):
        k, seg = key[index], segment[index]
        counter = np.cumsum(np.r_[True, (k[1:] != k[:-1]) | (seg[1:] != seg[:-1])])
        starts = _launch_starts(k)
        out[index] = counter - np.repeat(counter[starts], np.diff(np.r_[starts, len(k)]))
    return out


_CHUNK_ROWS = 1 << 20  # frames of millions of rows are worked through whole launches about this many rows at a time


def _launch_starts(key: np.ndarray) -> np.ndarray:
    """The first row of each launch in rows sorted by launch_key."""
    return np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, dtype=np.int64)


def _launch_chunks(starts: np.ndarray, n_rows: int, rows: int = _CHUNK_ROWS) -> list[tuple[int, int]]:
    """(first, last): launches [first, last) of about `rows` rows together (at least one): bounded memory over millions
    of rows, few passes over many small launches."""
    chunks, first = [], 0
    stops = np.r_[starts[1:], n_rows]
    while first < len(starts):
        last = max(int(np.searchsorted(stops, starts[first] + rows, side="right")), first + 1)
        chunks.append((first, last))
        first = last
    return chunks


def steady_launches(decode: pl.DataFrame, columns: list[str]) -> list[tuple[str, pl.DataFrame]]:
    """(run_id, `columns` of its steady rows) per launch with steady rows, in order, a chunk of launches at a time."""
    out = []
    starts = _launch_starts(decode["launch_key"].to_numpy())
    for first, last in _launch_chunks(starts, decode.height):
        lo, hi = int(starts[first]), int(starts[last]) if last < len(starts) else decode.height
        rows = (decode.slice(lo, hi - lo).lazy().filter(pl.col("steady"))
                .select(list(dict.fromkeys(["run_id", "launch_key", *columns]))).collect())
        out += [(part["run_id"][0], part.select(columns)) for part in rows.partition_by("launch_key", maintain_order=True)]
    return out


def mark_steady(decode: pl.DataFrame, prefill: pl.DataFrame, launches: pl.DataFrame, *,
                graphs: dict[str, tuple[bool, int | None]] | None = None,
                warmup_requests: dict[str, int] | None = None) -> pl.DataFrame:
    """decode rows (sorted by launch_key, line_no) + steady, excluded_reason (REASON_TYPE), segment, request (segment
    number after ready, −1 before) and eager_by_config. prefill: the idle points (prefill rows with 0 running requests);
    graphs: graph_settings(server_args); warmup_requests: per run, how many first requests were the bench's warm-up."""
    if decode.is_empty():
        return decode.with_columns(
            pl.lit(True).alias("steady"), pl.lit(None, REASON_TYPE).alias("excluded_reason"),
            pl.lit(0, pl.Int64).alias("segment"), pl.lit(-1, pl.Int64).alias("request"),
            pl.lit(False).alias("eager_by_config"),
        )
    starts = _launch_starts(decode["launch_key"].to_numpy())
    settings = graphs or {}  # looked up once per launch (a launch's rows are contiguous and belong to one run)
    launch_runs = decode["run_id"].gather(starts).to_list()
    per_launch = (
        np.array([(warmup_requests or {}).get(r, 0) for r in launch_runs], dtype=np.int64),
        np.array([settings[r][0] if r in settings else False for r in launch_runs], dtype=bool),
        np.array([settings[r][1] if r in settings and settings[r][1] is not None else np.iinfo(np.int64).max
                  for r in launch_runs], dtype=np.int64),
    )
    idle, windows = _idle_points(prefill), _launch_windows(launches, decode["launch_key"].max())
    code = np.empty(decode.height, dtype=np.int8)
    segment = np.empty(decode.height, dtype=np.int64)
    request = np.empty(decode.height, dtype=np.int64)
    by_config = np.empty(decode.height, dtype=bool)
    for first, last in _launch_chunks(starts, decode.height):  # the rule is per launch
        lo, hi = int(starts[first]), int(starts[last]) if last < len(starts) else decode.height
        code[lo:hi], segment[lo:hi], request[lo:hi], by_config[lo:hi] = _mark_launches(
            decode.slice(lo, hi - lo), [p[first:last] for p in per_launch], idle, windows)
    steady = code == len(REASONS)
    return decode.with_columns(
        reason_labels(code).alias("excluded_reason"), pl.Series("steady", steady),
        pl.Series("segment", segment), pl.Series("request", request),
        pl.Series("eager_by_config", by_config & steady),
    )


def _mark_launches(decode: pl.DataFrame, per_launch: list[np.ndarray], idle: np.ndarray,
                   windows: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """The rule on rows of whole launches: (reason code, len(REASONS) where the row counts; segment; request; eager by
    configuration). per_launch: warm-up requests, CUDA graphs disabled, largest captured batch size."""
    key, starts, segment, kept, startup, before_health = _launch_rule(decode, idle, windows)
    lengths = np.diff(np.r_[starts, len(key)])
    request = _dense_rank(key, segment, kept & ~startup & ~before_health)
    warm, disabled, max_bs = (np.repeat(values, lengths) for values in per_launch)
    in_warmup_request = (request >= 0) & (request < warm)

    graph_off = decode["cuda_graph"].eq(False).fill_null(False).to_numpy()
    by_config = graph_off & (disabled | (decode["running_req"].fill_null(1).to_numpy() > max_bs))
    rate = decode["gen_throughput_tok_s"].cast(pl.Float64).fill_null(float("nan")).to_numpy()

    # first decode row after idle, among the kept rank's rows (every launch keeps at least one)
    kept_index = np.flatnonzero(kept)
    kept_key, kept_segment = key[kept_index], segment[kept_index]
    after_idle = np.zeros(len(key), dtype=bool)
    after_idle[kept_index] = np.r_[True, (kept_key[1:] != kept_key[:-1]) | (kept_segment[1:] != kept_segment[:-1])]

    conditions = [~kept, startup, before_health, in_warmup_request, graph_off & ~by_config, after_idle,
                  ~np.isfinite(rate) | (rate <= 0)]
    code = np.select(conditions, np.arange(len(conditions), dtype=np.int8), default=np.int8(len(REASONS)))
    detected = REASONS.index("warmup_detected")
    steady_index = np.flatnonzero(code == len(REASONS))
    if len(steady_index):
        steady_key = key[steady_index]
        bounds = np.flatnonzero(np.r_[True, steady_key[1:] != steady_key[:-1], True])
        for start, stop in zip(bounds[:-1], bounds[1:]):
            cut = stats.warmup_length(rate[steady_index[start:stop]])
            code[steady_index[start:start + cut]] = detected
    return code, segment, request, by_config


def reason_labels(code: np.ndarray) -> pl.Series:
    """REASONS[code] as a REASON_TYPE series, null where code is len(REASONS) (the row counts)."""
    return pl.Series("excluded_reason", [*REASONS, None], dtype=REASON_TYPE).gather(code.astype(np.uint32))


def warmup_requests(clients: pl.DataFrame) -> dict[str, int]:
    """Per run of a single-stream benchmark: how many requests were warm-up (client_rows' 'warmup' rows)."""
    rows = clients.filter(pl.col("source_kind").is_in(SINGLE_STREAM_SOURCES))
    counts = rows.group_by("run_id").agg((pl.col("excluded_reason") == "warmup").sum().alias("n"))
    return {run_id: int(n) for run_id, n in counts.iter_rows()}


def detected_warmup_requests(decode: pl.DataFrame) -> dict[str, tuple[int, set[int]]]:
    """Per run with one launch of requests: (requests after ready, the request numbers with a detected warm-up or eager
    batches with CUDA graphs on, not by configuration — the client's requests that ran in the server's warm-up)."""
    launches = decode.lazy().filter(pl.col("request") >= 0).group_by("run_id", "launch_key").agg(
        (pl.col("request").max() + 1).alias("n"),
        pl.col("request").filter(pl.col("excluded_reason").is_in(["warmup_detected", "no_cuda_graph"])).unique()).collect()
    return {run_id: (int(n), set(requests)) for run_id, _, n, requests
            in launches.filter(pl.len().over("run_id") == 1).iter_rows()}


def mark_cycles(cycles: pl.DataFrame, prefill: pl.DataFrame, launches: pl.DataFrame, decode: pl.DataFrame
                ) -> pl.DataFrame:
    """spec_cycles rows (sorted by launch_key, line_no) + steady / excluded_reason by the decode rows' rule: start-up,
    health, another TP rank, or a segment whose decode rows are the bench's warm-up request or a detected warm-up."""
    if cycles.is_empty():
        return cycles.with_columns(pl.lit(True).alias("steady"), pl.lit(None, REASON_TYPE).alias("excluded_reason"))
    key, _, segment, kept, startup, before_health = _launch_rule(
        cycles, _idle_points(prefill), _launch_windows(launches, cycles["launch_key"].max()))
    # the reason of the decode rows' warm-up segments; the last row's where they differ
    warm_of = (decode.filter(pl.col("excluded_reason").is_in(["warmup_request", "warmup_detected"]))
               .group_by(pl.col("launch_key").cast(pl.Int64), "segment", maintain_order=True)
               .agg(pl.col("excluded_reason").last().cast(pl.Utf8).alias("warm")))
    warm = (pl.DataFrame({"launch_key": key, "segment": segment})
            .join(warm_of, on=["launch_key", "segment"], how="left", maintain_order="left")["warm"].fill_null("").to_numpy())
    conditions = [~kept, startup, before_health, warm == "warmup_request", warm == "warmup_detected"]
    code = np.select(conditions, [REASONS.index(r) for r in ("other_tp_rank", "startup", "before_health_200",
                                                              "warmup_request", "warmup_detected")], len(REASONS))
    return cycles.with_columns(reason_labels(code), pl.Series("steady", code == len(REASONS)))


def server_columns(steady_rows: pl.DataFrame) -> np.ndarray:
    """Per steady decode row: [tokens per step w = batch × accept_len, seconds per step t = w / rate, batch, 1]; summed:
    throughput Σw/Σt, accept_len Σw/Σbatch, batch Σbatch/Σ1, step time Σt/Σ1 (a row per fixed number of steps)."""
    batch = steady_rows["running_req"].fill_null(1).cast(pl.Float64).clip(lower_bound=1.0).to_numpy()
    accept = steady_rows["accept_len"].fill_null(1.0).cast(pl.Float64).to_numpy()
    rate = steady_rows["gen_throughput_tok_s"].cast(pl.Float64).to_numpy()
    tokens = batch * accept
    return np.column_stack([tokens, tokens / rate, batch, np.ones_like(rate)])


def client_rows(bench: pl.DataFrame, detected: dict[str, tuple[int, set[int]]] | None = None) -> pl.DataFrame:
    """Client requests + tokens, seconds and `excluded_reason`. detected: detected_warmup_requests(decode); a
    single-stream run's k-th request is its k-th segment after ready when it has as many requests as segments."""
    tokens = pl.col("completion_tokens").cast(pl.Float64)
    rows = bench.with_columns(tokens.alias("tokens"), pl.coalesce(
        pl.col("latency_s"), pl.col("e2e_latency_s"), tokens / pl.col("output_tok_s")).cast(pl.Float64).alias("seconds"))
    # rows without any warm-up flag (older *.bench.json): the run's first request was the warm-up
    is_warmup = (pl.when(pl.col("warmup").is_not_null().any().over("run_id")).then(pl.col("warmup").fill_null(False))
                 .otherwise(pl.col("request_index") == pl.col("request_index").min().over("run_id")))
    good = (pl.col("tokens").is_finite() & pl.col("seconds").is_finite() & (pl.col("tokens") > 0)
            & (pl.col("seconds") > 0)).fill_null(False)
    order = (pl.col("request_index").rank("ordinal").over("run_id") - 1).cast(pl.Int64)
    in_detected = pl.lit(False)
    for run_id, (n_requests, requests) in (detected or {}).items():
        if requests:
            in_detected = in_detected | ((pl.col("run_id") == run_id) & (pl.len().over("run_id") == n_requests)
                                         & pl.col("source_kind").is_in(SINGLE_STREAM_SOURCES) & order.is_in(sorted(requests)))
    reason = (pl.when(is_warmup).then(pl.lit("warmup")).when(~good).then(pl.lit("non_finite"))
              .when(in_detected).then(pl.lit("warmup_detected")).otherwise(pl.lit(None, pl.Utf8)))
    return rows.with_columns(reason.alias("excluded_reason"))
