"""The report on the REAL H200 logs (fixtures/h200x2-sglang-0.5.14, ingested for real): one launch per cell, so the
report must say how little it can conclude; the synthetic pair's accept len is exactly 2.00."""

from __future__ import annotations

import math

import duckdb
import pytest

from groundtruth import dbs
from speclogs.analysis import compare_runs
from speclogs.errors import AnalysisError


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    connection = duckdb.connect(str(dbs.real_db(tmp_path_factory.getbasetemp())), read_only=True)
    yield connection
    connection.close()


def test_synthetic_pair_accept_len_is_exactly_two(con):
    c = compare_runs(con, ["eagle3_default", "eagle3_nccl", "synth-eagle3-exact", "synth-eagle3-noise06"])
    for arm in c.arms:
        assert arm.accept_len == pytest.approx(2.0, abs=1e-12), arm.name
    client = c.accept_hist.filter(c.accept_hist["source"] == "client requests")
    assert set(client["accept_len"].to_list()) == {2.0}


def test_one_launch_per_arm_is_said_plainly_and_no_winner_without_support(con):
    c = compare_runs(con, ["baseline_default", "baseline_nccl"])
    assert any(w.code == "single_launch" for w in c.warnings)
    for r in c.comparisons:
        assert r.interval_covers == "none (one launch per arm)"
        assert "one launch per arm" in r.test and "no interval" in r.test
        # one launch per arm claims no interval (the request-noise one is kept under its own name) and no winner
        assert math.isnan(r.ci_low) and math.isnan(r.ci_high) and r.p_value is None
        assert r.within_low < 1 < r.within_high
        assert r.verdict == "inconclusive"


def test_nccl_difference_between_plain_logs_is_a_confounder_unless_declared(con):
    c = compare_runs(con, ["baseline_default", "baseline_nccl"])
    env = [w for w in c.warnings if w.code == "confounder_env"]
    assert env and "NCCL_PROTO" in env[0].message and "LL" in env[0].message
    declared = compare_runs(con, ["baseline_default", "baseline_nccl"], {"nccl": "*_nccl"})
    assert not [w for w in declared.warnings if w.code == "confounder_env"]
    assert any(w.code == "factor_settings" and "NCCL_PROTO" in w.message for w in declared.warnings)


def test_factor_option_builds_the_2x2_with_single_launch_cells(con):
    c = compare_runs(con, ["baseline_default", "baseline_nccl", "eagle3_default", "eagle3_nccl"],
                     {"nccl": "*_nccl", "spec": "eagle3*"})
    assert c.factors == {"nccl": ("off", "on"), "spec": ("off", "on")}
    names = {e.name for e in c.effects}
    assert {"nccl", "spec", "nccl × spec", "spec | nccl=on"} <= names
    assert any(w.code == "effects_single_launch" for w in c.warnings)


def test_draft_that_is_never_accepted_is_flagged(con):
    c = compare_runs(con, ["random-draft-baseline", "random-draft-eagle3"])
    flagged = [w for w in c.warnings if w.code == "accept_len_one"]
    # a random draft with the right flag: the setup holds no cause, so the report says where to look instead
    assert flagged and "never accepted" in flagged[0].message and "draft was trained for this target" in flagged[0].message
    assert c.arms[1].accept_len == pytest.approx(1.0)


def test_warm_up_request_sent_before_health_is_excluded_from_the_client(con):
    # random-target-baseline: the first request was sent while /health said 503 and took 12 s (40.9 tok/s);
    # old bench.json without warm-up flags: request 0 is the warm-up and is excluded
    c = compare_runs(con, ["random-target-baseline"])
    assert c.arms[0].client.n_rows == 5
    assert c.arms[0].client.value_tok_s > 300


def test_unknown_run_lists_the_known_ones(con):
    with pytest.raises(AnalysisError) as error:
        compare_runs(con, ["baseline_default", "no_such_run"])
    assert "no_such_run" in str(error.value) and "baseline_nccl" in str(error.value)
