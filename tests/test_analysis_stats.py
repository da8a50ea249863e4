"""The statistics on their own: cluster bootstrap honesty, verdict wording, the steady-state rule, warm-up rule."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from speclogs.analysis import stats
from speclogs.analysis.steady import client_rows, mark_steady


def _client_stat(s):
    return np.log(s[:, [0]] / s[:, [1]])


def _arm(rng, rate, launches, requests, launch_sigma, request_sigma=0.02):
    units = []
    for _ in range(launches):
        launch_rate = rate * np.exp(rng.normal(0, launch_sigma))
        tokens = np.full(requests, 500.0)
        seconds = tokens / (launch_rate * np.exp(rng.normal(0, request_sigma, requests)))
        units.append(np.column_stack([tokens, seconds]))
    return units


def test_interval_covers_the_true_ratio_with_three_launches_where_percentiles_do_not():
    """Launch-to-launch noise 3 %, request noise 2 %, 3 launches per arm, nominal 95 %: the report's interval
    (cluster-bootstrap SE, Welch t over launches) covers the truth ≥ 90 % of the time; a percentile interval of
    the same cluster bootstrap covers less, and treating requests as independent far less."""
    rng = np.random.default_rng(1)
    true_log = np.log(1.05)
    covered = {"report": 0, "percentile": 0, "requests as independent": 0}
    trials = 80
    for _ in range(trials):
        a = _arm(rng, 100.0, 3, 10, 0.03)
        b = _arm(rng, 100.0 * 1.05, 3, 10, 0.03)
        ga = stats.resample_group(a, _client_stat, 500, rng)
        gb = stats.resample_group(b, _client_stat, 500, rng)
        point = gb.point[0] - ga.point[0]
        low, high = stats.interval(point, [(gb.draws[:, 0], 3), (-ga.draws[:, 0], 3)], 0.95)
        covered["report"] += low <= true_log <= high
        low, high = stats.percentile_interval(gb.draws[:, 0] - ga.draws[:, 0], 0.95)
        covered["percentile"] += low <= true_log <= high
        na = stats.resample_group([np.concatenate(a)], _client_stat, 500, rng)
        nb = stats.resample_group([np.concatenate(b)], _client_stat, 500, rng)
        low, high = stats.percentile_interval(nb.draws[:, 0] - na.draws[:, 0], 0.95)
        covered["requests as independent"] += low <= true_log <= high
    rates = {k: v / trials for k, v in covered.items()}
    assert rates["report"] >= 0.9, rates
    assert rates["requests as independent"] < rates["percentile"] < rates["report"], rates


def test_single_unit_gives_a_zero_width_interval_and_the_verdict_refuses():
    rng = np.random.default_rng(0)
    group = stats.resample_group([np.array([[500.0, 5.0]])], _client_stat, 200, rng)
    low, high = stats.percentile_interval(group.draws[:, 0], 0.95)
    assert low == high == pytest.approx(np.log(100.0))
    assert stats.verdict_for(1.2, 1.2, enough=False) == "insufficient data"


@pytest.mark.parametrize(("low", "high", "verdict"), [
    (0.98, 1.03, "no detectable difference"), (1.01, 1.2, "faster"), (0.7, 0.99, "slower"),
    (float("nan"), 1.1, "insufficient data"),
])
def test_verdict_names_a_winner_only_when_the_interval_excludes_one(low, high, verdict):
    assert stats.verdict_for(low, high, enough=True) == verdict


def test_rank_test_needs_two_values_a_side():
    assert stats.rank_test([1.0], [2.0, 3.0]) is None
    assert stats.rank_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(0.1)


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
        "launch_key": [0] * len(rows), "run_id": ["r"] * len(rows), "line_no": [r[0] for r in rows], "ts": [t0 + timedelta(seconds=r[1]) for r in rows],
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
