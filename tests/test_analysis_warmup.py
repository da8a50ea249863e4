"""Warm-up from the data, the bench's warm-up flag on server rows and profiled cycles, eager decode by configuration,
and confounders that a declared factor does not excuse — generated SGLang logs (launcher layout) through the real
ingest."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import pytest

from groundtruth.sglang_logs import RunSpec, write_run
from speclogs.analysis import compare_runs

START = datetime(2026, 12, 1, 9, 0, 0)


def _cell(root, cell, launches, seed, **options):
    factors = options.pop("factors", {})
    for launch in range(1, launches + 1):
        write_run(RunSpec(name=f"{cell}_{launch}", cell=cell, launch=launch, factors=factors, seed=seed + launch,
                          start=START + timedelta(minutes=10 * (seed + launch)), **options), root, "launcher")


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    from speclogs.store import ingest_paths

    root = tmp_path_factory.mktemp("warmup") / "runs"
    base = dict(spec=False, nccl_tuned=False, rate_tok_s=80.0, requests=10)
    _cell(root, "base", 3, 0, **base)
    _cell(root, "slowstart", 3, 10, slow_start_requests=2, slow_start_factor=0.8, **base)
    _cell(root, "eager", 2, 20, disable_cuda_graph=True, **base)
    _cell(root, "eagerstart", 3, 80, eager_requests=1, **base)
    eagle = dict(spec=True, rate_tok_s=90.0, accept_len=2.0, requests=6)
    tuned = {"nccl_tuned": True}
    _cell(root, "e3_default", 2, 30, nccl_tuned=False, factors={"nccl": "default"}, **eagle)
    _cell(root, "e3_h100", 2, 40, **tuned, factors={"nccl": "tuned"}, gpu_name="NVIDIA H100 80GB HBM3",
          sglang_version="0.5.15", server_arg_overrides={"mem_fraction_static": "0.8", "speculative_eagle_topk": "4"},
          **eagle)
    draft = {"eagle3_layer_ids": [1, 7, 13], "config_sha256": "c" * 64}
    _cell(root, "e3_good", 2, 50, nccl_tuned=False, factors={"draft": "good"},
          draft_model={**draft, "weights_sha256": "a" * 64}, **eagle)
    _cell(root, "e3_bad", 2, 60, nccl_tuned=False, factors={"draft": "bad"},
          draft_model={**draft, "weights_sha256": "b" * 64},
          server_arg_overrides={"speculative_draft_model_path": "'/tmp/d3bad'"}, **eagle)
    _cell(root, "e3_other", 2, 70, nccl_tuned=False,
          draft_model={**draft, "weights_sha256": "b" * 64, "eagle3_layer_ids": [2, 8, 14]},
          server_arg_overrides={"speculative_draft_model_path": "'/tmp/d3bad'"}, **eagle)
    db = root.parent / "warmup.duckdb"
    ingest_paths([root], db)
    connection = duckdb.connect(str(db), read_only=True)
    yield connection
    connection.close()


def test_a_slow_start_with_cuda_graphs_on_is_found_and_cut_from_both_sources(con):
    """The first 2 measured requests of every slowstart launch run at 0.8× (graphs on): uncut they pulled both
    sources down by ~6 %; cut, the ratio holds the truth (1.00)."""
    c = compare_runs(con, ["base_*", "slowstart_*"])
    for r in c.comparisons:
        assert r.ci_low <= 1.0 <= r.ci_high, r
        assert abs(r.ratio - 1.0) < 0.02, r
    found = [w for w in c.warnings if w.code == "warmup_detected"]
    assert sorted(w.message.split(":")[0] for w in found) == [f"run slowstart_{i}" for i in (1, 2, 3)]
    assert all("2 client request(s)" in w.message for w in found)
    reasons = dict(c.timeline.group_by("excluded_reason").len().iter_rows())
    assert reasons["warmup_detected"] >= 3 * 20  # ≈ 25 rows per launch: 2 requests × 12.5 decode lines
    assert c.arms[1].client.n_rows == 3 * 7  # 10 requests − the flagged warm-up − 2 detected


def test_drift_free_launches_show_no_warmup(con):
    c = compare_runs(con, ["base_*"])
    assert not [w for w in c.warnings if w.code == "warmup_detected"]


def test_eager_decode_by_configuration_is_measured_not_excluded(con):
    """disable_cuda_graph=True: every decode batch is eager and ~6× slower. That is the configuration, not warm-up:
    server figures, accept len and attribution exist, and the ratio shows the slowdown."""
    c = compare_runs(con, ["base_*", "eager_*"])
    eager = c.arms[1]
    assert eager.server is not None and eager.server.n_rows > 50 and eager.accept_len == pytest.approx(1.0)
    server = next(r for r in c.comparisons if r.source == "server")
    assert server.ci_low <= 1 / 6 <= server.ci_high * 1.05
    assert c.attributions and not [w for w in c.warnings if w.code == "warmup_in_window"]
    assert any(w.code == "eager_by_config" and "eager_1" in w.message for w in c.warnings)


def test_profiled_cycles_of_the_warmup_request_are_cut(con):
    c = compare_runs(con, ["e3_default_*", "e3_good_*"])
    note = next(w for w in c.warnings if w.code == "steady_state")
    assert "profiled cycles (spec_cycles)" in note.message and "warmup_request" in note.message.split("profiled")[1]
    cycles = {p.arm: p.n_rows for p in c.phases if p.phase == "cycle"}
    assert 0 < cycles["e3_default_*"] < 2 * 6 * 500 // 2 // 16  # fewer than all cycles of the 6 requests


def test_a_declared_factor_does_not_excuse_gpu_version_or_unrelated_args(con):
    """nccl differs between the arms, and so do the GPU, the SGLang version, mem_fraction_static and the EAGLE top-k:
    NCCL_* is the factor's; everything else is a confounder, the top-k included (both arms run EAGLE-3)."""
    c = compare_runs(con, ["e3_default_*", "e3_h100_*"])
    codes = {w.code: w.message for w in c.warnings}
    assert "H100" in codes["confounder_hardware"]
    assert "sglang" in codes["confounder_version"]
    args = codes["confounder_server_args"]
    assert "mem_fraction_static (0.5 → 0.8)" in args and "speculative_eagle_topk (1 → 4)" in args
    explained = [w.message for w in c.warnings if w.code == "factor_settings"]
    assert explained and "factor nccl accounts for" in explained[0] and "NCCL_PROTO" in explained[0]
    assert "mem_fraction" not in " ".join(explained) and "speculative" not in " ".join(explained)


def test_the_draft_model_recorded_in_run_json_is_compared(con):
    """Two draft qualities: a factor named `draft` accounts for the draft's path and weights; the same difference
    under a factor named `quality` is a confounder (and so are different EAGLE-3 layer ids)."""
    declared = compare_runs(con, ["e3_good_*", "e3_bad_*"])
    assert not [w for w in declared.warnings if w.code.startswith("confounder")]
    explained = " ".join(w.message for w in declared.warnings if w.code == "factor_settings")
    assert "factor draft accounts for" in explained and "weights" in explained and "speculative_draft_model_path" in explained
    undeclared = compare_runs(con, ["e3_good_*", "e3_other_*"], {"quality": "e3_other_*"})
    model = next(w.message for w in undeclared.warnings if w.code == "confounder_model")
    assert "eagle3_layer_ids (1,7,13 → 2,8,14)" in model and "weights" in model
    args = next(w.message for w in undeclared.warnings if w.code == "confounder_server_args")
    assert "speculative_draft_model_path" in args


def test_requests_that_ran_eager_with_graphs_on_leave_the_client_headline_too(con):
    """The first measured request of every eagerstart launch decodes eager (6× slower, CUDA graphs on): the server
    source dropped its rows already; the client source now drops the request, so both sources read the truth (1.00)."""
    c = compare_runs(con, ["base_*", "eagerstart_*"])
    client = next(r for r in c.comparisons if r.source == "client")
    server = next(r for r in c.comparisons if r.source == "server")
    assert 0.97 < client.ratio < 1.03 and 0.97 < server.ratio < 1.03, (client.ratio, server.ratio)
    arm = next(a for a in c.arms if a.name == "eagerstart_*")
    assert arm.client.n_rows == 3 * (10 - 2)  # 10 requests: the bench's warm-up one and the eager one left out
