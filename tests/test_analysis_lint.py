"""Lint on generated logs through the real ingest: drift, retractions, client/server disagreement, env confounders
(CUDA_* and others), inconsistent replicates — and no false alarms on clean runs."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pytest

from groundtruth import dbs
from groundtruth.sglang_logs import RunSpec, write_run
from speclogs.analysis import compare_runs


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    from speclogs.store import ingest_paths

    root = tmp_path_factory.mktemp("lint")
    logs = root / "logs"
    base = dict(spec=False, nccl_tuned=False, rate_tok_s=80.0, requests=10)
    specs = [
        RunSpec(name="flat", seed=1, **base),
        RunSpec(name="drift", seed=2, drift=0.25, **base),
        RunSpec(name="retract", seed=3, retract_at_request=4, **base),
        # the same server timeline as flat, an hour later (the same log content twice would be ingested once)
        RunSpec(name="slowclient", seed=1, client_overhead_s=2.0, start=datetime(2026, 11, 30, 10, 0, 0), **base),
    ]
    for spec in specs:
        write_run(spec, logs, "plain")
    launcher = root / "launcher"
    for launch, env in ((1, {}), (2, {"CUDA_VISIBLE_DEVICES": "1,0"})):
        write_run(RunSpec(name=f"mixed_{launch}", cell="mixed", launch=launch, seed=10 + launch, extra_env=env, **base),
                  launcher, "launcher")
    for launch in (1, 2):
        write_run(RunSpec(name=f"cuda_{launch}", cell="cuda", launch=launch, seed=20 + launch,
                          extra_env={"CUDA_DEVICE_MAX_CONNECTIONS": "1", "OMP_NUM_THREADS": "8"}, **base), launcher, "launcher")
        write_run(RunSpec(name=f"plain_{launch}", cell="plain", launch=launch, seed=30 + launch, **base), launcher, "launcher")
    db = root / "lint.duckdb"
    ingest_paths([logs, launcher], db)
    connection = duckdb.connect(str(db), read_only=True)
    yield connection
    connection.close()


def _codes(c):
    return {w.code for w in c.warnings if w.severity == "warning"}


def test_clean_runs_raise_no_false_alarms(con):
    c = compare_runs(con, ["flat"])
    assert _codes(c) == {"single_launch"}


def test_seeds_story_has_no_drift_or_disagreement_alarms(tmp_path_factory):
    db, _ = dbs.seeds_db(tmp_path_factory.getbasetemp())
    with duckdb.connect(str(db), read_only=True) as seeds:
        c = compare_runs(seeds, ["baseline_default_*", "baseline_nccl_*", "eagle3_default_*", "eagle3_nccl_*"])
    assert not {"non_stationary", "source_disagreement", "arm_inconsistent", "too_few_samples"} & _codes(c)


def test_throughput_drift_inside_a_launch_is_flagged(con):
    c = compare_runs(con, ["flat", "drift"])
    drift = [w for w in c.warnings if w.code == "non_stationary"]
    assert drift and all("drift" in w.message for w in drift)
    assert not any("run flat" in w.message for w in drift)


def test_retractions_are_flagged(con):
    c = compare_runs(con, ["flat", "retract"])
    flagged = [w for w in c.warnings if w.code == "retractions"]
    assert flagged and "retract" in flagged[0].message and "1 request retraction" in flagged[0].message


def test_client_overhead_makes_the_sources_disagree(con):
    c = compare_runs(con, ["flat", "slowclient"])
    ratios = {r.source: r for r in c.comparisons}
    # one launch each: no verdict, but the request-noise intervals already disagree
    assert ratios["client"].verdict == "inconclusive" and ratios["client"].within_high < 1
    assert ratios["server"].within_low < 1 < ratios["server"].within_high
    assert "source_disagreement" in _codes(c)
    assert any(w.code == "source_levels" and "slowclient" in w.message for w in c.warnings)


def test_cuda_and_other_env_differences_are_confounders(con):
    c = compare_runs(con, ["plain_*", "cuda_*"])
    env = [w for w in c.warnings if w.code == "confounder_env"]
    assert env and "CUDA_DEVICE_MAX_CONNECTIONS (unset → 1)" in env[0].message
    assert "OMP_NUM_THREADS" in env[0].message


def test_replicates_that_differ_are_not_replicates(con):
    c = compare_runs(con, ["mixed_*"])
    flagged = [w for w in c.warnings if w.code == "arm_inconsistent"]
    assert flagged and "CUDA_VISIBLE_DEVICES" in flagged[0].message


def test_ignore_env_leaves_a_variable_out_of_the_confounder_check_and_says_so(con):
    c = compare_runs(con, ["plain_*", "cuda_*"], ignore_env=["CUDA_DEVICE_MAX_CONNECTIONS", "OMP_*"])
    assert not [w for w in c.warnings if w.code == "confounder_env"]
    ignored = [w for w in c.warnings if w.code == "env_ignored"]
    assert ignored and "CUDA_DEVICE_MAX_CONNECTIONS" in ignored[0].message and "OMP_NUM_THREADS" in ignored[0].message


def test_factors_name_settings_by_whole_words_never_by_substrings():
    from speclogs.analysis.lint import factor_names

    assert factor_names("nccl", "env NCCL_PROTO") and factor_names("mem_fraction", "server_arg mem_fraction_static")
    assert factor_names("draft", "server_arg speculative_draft_model_path") and factor_names("gpu", "hardware gpu_name")
    # a one-letter factor hides nothing; `mode` is not `model_path`; NCCL tuning never excuses another NCCL library
    assert not any(factor_names("a", key) for key in ("env NCCL_ALGO", "env CUDA_VISIBLE_DEVICES", "server_arg tp_size",
                                                       "server_arg attention_backend"))
    assert not factor_names("mode", "server_arg model_path") and not factor_names("nccl", "version nccl")
