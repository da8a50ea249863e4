"""The statistics on their own: variance components, verdict wording, tests, warm-up detection, the steady-state
rule, the client warm-up rule. (The honesty of the intervals on the simulation grid: tests/test_analysis_grid.py.)"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from speclogs.analysis import stats
from speclogs.analysis.steady import client_rows, mark_steady


def _client_stat(s):
    return np.log(s[:, [0]] / s[:, [1]])


def _launches(rng, rate, launches, requests, launch_sigma, residual_sigma, prompts):
    """Launches replaying the same prompts (prompt factors `prompts`) with launch and residual noise: (n, 2) each."""
    units = []
    for _ in range(launches):
        launch_rate = rate * np.exp(rng.normal(0, launch_sigma))
        tokens = np.full(requests, 500.0)
        seconds = tokens / (launch_rate * prompts * np.exp(rng.normal(0, residual_sigma, requests)))
        units.append(np.column_stack([tokens, seconds]))
    return units


def test_replayed_prompts_are_not_counted_as_within_launch_noise():
    """Requests differ by ±30 % (their prompts) but identically in every launch: the within-launch noise of a launch
    mean is the 2 % residual / √10, not the prompt spread / √10 that a one-way estimate (or a bootstrap over requests)
    would count — the double count that made the old intervals 2–3× wider than Welch's."""
    rng = np.random.default_rng(4)
    prompts = np.exp(rng.normal(0, 0.3, 10))
    group = stats.summarize_group(_launches(rng, 100.0, 4, 10, 0.0, 0.02, prompts), _client_stat)
    assert group.aligned
    assert np.sqrt(group.within_cov[0, 0]) == pytest.approx(0.02 / np.sqrt(10), rel=0.35)
    unaligned = stats.summarize_group(_launches(rng, 100.0, 4, 10, 0.0, 0.02, prompts)[:3]
                                      + [_launches(rng, 100.0, 1, 9, 0.0, 0.02, prompts[:9])[0]], _client_stat)
    assert not unaligned.aligned and np.sqrt(unaligned.within_cov[0, 0]) > 0.05


def test_between_and_within_components_are_each_counted_once():
    """3 % launch noise + 2 % request noise over 10 requests: the variance of an arm mean is (σ²_b + σ²_w/n) / L;
    the pooled components recover both parts."""
    rng = np.random.default_rng(5)
    groups = [stats.summarize_group(_launches(rng, 100.0, 40, 10, 0.03, 0.05, np.ones(10)), _client_stat)
              for _ in range(2)]
    between, within = stats.pooled_components(groups, 0)
    assert np.sqrt(between) == pytest.approx(0.03, rel=0.2)
    assert np.sqrt(within) == pytest.approx(0.05 / np.sqrt(10), rel=0.2)
    variance, df = stats.part(groups[0], 0).variance()
    assert variance == pytest.approx(np.var(groups[0].per_launch[:, 0], ddof=1) / 40) and df == 39


def test_two_equal_launches_do_not_give_a_zero_width_interval():
    """The launch-to-launch component is truncated at 0, never the total: the interval keeps the requests' noise."""
    rng = np.random.default_rng(6)
    one = _launches(rng, 100.0, 1, 10, 0.0, 0.05, np.ones(10))[0]
    shuffled = one[rng.permutation(10)]  # the same launch value, different requests
    group = stats.summarize_group([one, shuffled], _client_stat)
    assert np.var(group.per_launch[:, 0]) == pytest.approx(0.0, abs=1e-20)
    result = stats.t_interval([stats.part(group, 0)], 0.95)
    assert result.high - result.low > 0.01


def test_p_value_and_interval_are_the_same_statement():
    rng = np.random.default_rng(7)
    for _ in range(200):
        a = stats.summarize_group(_launches(rng, 100.0, 3, 8, 0.04, 0.02, np.ones(8)), _client_stat)
        b = stats.summarize_group(_launches(rng, 104.0, 3, 8, 0.04, 0.02, np.ones(8)), _client_stat)
        result = stats.t_interval(stats.diff_parts(a, b, 0), 0.95)
        assert (result.p_value < 0.05) == (result.low > 0 or result.high < 0)


def test_a_single_unit_launch_has_no_within_noise_and_one_launch_gives_no_verdict():
    group = stats.summarize_group([np.array([[500.0, 5.0]])], _client_stat)
    assert group.point[0] == pytest.approx(np.log(100.0)) and group.within_df == 0
    result = stats.t_interval([stats.part(group, 0), stats.part(group, 0, -1.0)], 0.95)
    assert stats.verdict_for(result, enough=True) == "inconclusive"
    assert stats.verdict_for(result, enough=False) == "insufficient data"


def _result(low, high):
    return stats.TInterval(point=(low + high) / 2, se=1.0, df=4.0, low=low, high=high, p_value=0.5, launches_covered=True)


@pytest.mark.parametrize(("low", "high", "min_effect", "verdict"), [
    (-0.02, 0.03, 0.0, "equivalent"), (-0.02, 0.06, 0.0, "inconclusive"), (0.01, 0.2, 0.0, "faster"),
    (-0.3, -0.01, 0.0, "slower"), (float("nan"), 0.1, 0.0, "insufficient data"), (0.01, 0.2, 0.02, "inconclusive"),
    (0.03, 0.2, 0.02, "faster"), (-0.015, 0.012, 0.02, "equivalent"), (-0.03, 0.012, 0.02, "inconclusive"),
])
def test_verdict_names_a_winner_only_beyond_the_threshold(low, high, min_effect, verdict):
    assert stats.verdict_for(_result(low, high), enough=True, min_effect=min_effect) == verdict


def test_holm_controls_the_family():
    adjusted = stats.holm([0.01, 0.04, 0.03, 0.5])
    assert adjusted.tolist() == pytest.approx([0.04, 0.09, 0.09, 0.5])


def test_warmup_length_finds_a_slow_start_and_nothing_in_a_flat_series():
    rng = np.random.default_rng(8)
    flat_hits = sum(stats.warmup_length(100 * np.exp(rng.normal(0, 0.03, 60))) > 0 for _ in range(300))
    assert flat_hits <= 3  # ≤ 1 % false warm-ups on drift-free launches
    slow = 100 * np.exp(rng.normal(0, 0.03, 60))
    slow[:12] *= 0.8
    assert 10 <= stats.warmup_length(slow) <= 15
    fast_start = 100 * np.exp(rng.normal(0, 0.03, 60))
    fast_start[:12] *= 1.2  # faster first: not a warm-up (that is drift or throttling)
    assert stats.warmup_length(fast_start) == 0


def test_trend_test_sees_a_drift_and_not_noise():
    rng = np.random.default_rng(3)
    drifting = 100 * (1 + np.linspace(0, 0.2, 60)) * np.exp(rng.normal(0, 0.02, 60))
    flat = 100 * np.exp(rng.normal(0, 0.02, 60))
    assert stats.trend_test(drifting).p_value < 0.001
    assert stats.trend_test(flat).p_value > 0.01
    assert stats.trend_test(flat[:5]) is None


def test_block_sums_respect_segments_and_cap_the_unit_count():
    values = np.ones((1000, 2))
    assert stats.block_sums(values, np.repeat(np.arange(4), 250)).tolist() == [[250.0, 250.0]] * 4
    capped = stats.block_sums(values, None, max_units=200)
    assert len(capped) == 200 and capped.sum() == 2000


def _decode_frame():
    t0 = datetime(2026, 11, 30, 10, 0, 0)
    rows = [  # line_no, seconds, cuda_graph, gen_throughput
        (10, 1, False, 20.0),   # before ready → startup
        (20, 6, True, 90.0),    # after ready, before health 200
        (30, 9, True, 3.0),     # first decode row after the first request's prefill (idle gap)
        (31, 10, True, 88.0),
        (32, 11, False, 40.0),  # eager batch inside the window
        (33, 12, True, float("nan")),
        (34, 12, True, 85.0, 1),  # TP1 also logged a decode row: only the lowest rank counts
        (41, 14, True, 61.0),   # first after the second request's prefill
        (42, 15, True, 89.0),
    ]
    decode = pl.DataFrame({
        "launch_key": [0] * len(rows), "run_id": ["r"] * len(rows), "line_no": [r[0] for r in rows],
        "ts": [t0 + timedelta(seconds=r[1]) for r in rows],
        "tp_rank": [r[4] if len(r) > 4 else 0 for r in rows],
        "running_req": [1] * len(rows), "accept_len": [None] * len(rows), "cuda_graph": [r[2] for r in rows],
        "gen_throughput_tok_s": [r[3] for r in rows],
    })
    prefill = pl.DataFrame({"launch_key": [0, 0], "line_no": [29, 40]})  # prefill rows that found 0 running requests
    launches = pl.DataFrame({"launch_key": [0], "run_id": ["r"], "start_ts": [t0],
                             "ready_ts": [t0 + timedelta(seconds=5)], "first_health_200_ts": [t0 + timedelta(seconds=8)],
                             "cuda_graph_end_ts": [t0 + timedelta(seconds=2)]})
    return decode, prefill, launches


def test_steady_state_rule_gives_each_excluded_row_its_reason():
    marked = mark_steady(*_decode_frame())
    reasons = dict(zip(marked["line_no"].to_list(), marked["excluded_reason"].to_list()))
    assert reasons == {10: "startup", 20: "before_health_200", 30: "first_after_idle", 31: None, 32: "no_cuda_graph",
                       33: "non_finite", 34: "other_tp_rank", 41: "first_after_idle", 42: None}
    steady = marked.filter(pl.col("steady"))
    assert steady["segment"].to_list() == [1, 2]  # one resampling unit per request


def test_client_warmup_flag_or_first_request_is_excluded():
    flagged = pl.DataFrame({"run_id": ["a"] * 3, "request_index": [0, 1, 2], "warmup": [True, False, False],
                            "latency_s": [1.0, 1.0, float("inf")], "e2e_latency_s": [None] * 3,
                            "completion_tokens": [100, 100, 100], "output_tok_s": [100.0] * 3})
    rows = client_rows(flagged)
    assert rows["excluded_reason"].to_list() == ["warmup", None, "non_finite"]
    unflagged = flagged.with_columns(pl.lit(None, pl.Boolean).alias("warmup"), pl.lit(1.0).alias("latency_s"))
    assert client_rows(unflagged)["excluded_reason"].to_list() == ["warmup", None, None]


def test_eager_batches_above_the_captured_sizes_count_and_the_bench_warmup_request_does_not():
    decode, prefill, launches = _decode_frame()
    decode = decode.with_columns(pl.when(pl.col("line_no") == 32).then(8).otherwise(pl.col("running_req")).alias("running_req"))
    marked = mark_steady(decode, prefill, launches, graphs={"r": (False, 4)})
    row = marked.filter(pl.col("line_no") == 32)
    assert row["excluded_reason"].to_list() == [None] and row["eager_by_config"].to_list() == [True]
    small = mark_steady(*_decode_frame(), graphs={"r": (False, 4)})
    assert small.filter(pl.col("line_no") == 32)["excluded_reason"].to_list() == ["no_cuda_graph"]
    disabled = mark_steady(*_decode_frame(), graphs={"r": (True, None)})
    assert disabled.filter(pl.col("line_no") == 32)["excluded_reason"].to_list() == [None]
    # one warm-up request: the first request after ready (segment 1) is the bench's, not the server's steady state
    warm = mark_steady(*_decode_frame(), warmup_requests={"r": 1})
    reasons = dict(zip(warm["line_no"].to_list(), warm["excluded_reason"].to_list()))
    assert reasons[30] == reasons[31] == reasons[32] == "warmup_request" and reasons[42] is None


def test_timeline_rows_thins_each_run_to_its_points():
    """timeline_rows = per run (rows in order, wherever they lie): every row up to `points`; else its excluded rows
    evenly spaced (at most half), then its steady rows evenly spaced from the first — the plain definition below."""
    import numpy as np

    from speclogs.analysis.compare import timeline_rows

    def plain(run, steady, points):
        keep = np.zeros(len(run), dtype=bool)
        for code in np.unique(run):
            index = np.flatnonzero(run == code)
            if len(index) <= points:
                keep[index] = True
                continue
            excluded, kept = index[~steady[index]], index[steady[index]]
            excluded = excluded[::-(-len(excluded) // (points // 2))] if len(excluded) > points // 2 else excluded
            room = points - len(excluded)
            keep[excluded] = True
            keep[kept[::-(-len(kept) // room)] if len(kept) > room else kept] = True
        return keep

    rng = np.random.default_rng(7)
    for trial in range(400):
        n, runs = int(rng.integers(0, 3000)), int(rng.integers(1, 5))
        run = (np.repeat(rng.integers(0, runs, 12), n // 12 + 1)[:n] if trial % 2 else rng.integers(0, runs, n))
        steady = rng.random(n) < [0.0, 1.0, rng.random()][trial % 3]
        points = int(rng.integers(2, 200))
        assert np.array_equal(timeline_rows(run, steady, points), plain(run, steady, points)), trial
