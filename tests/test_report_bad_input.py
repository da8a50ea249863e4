"""Bad input to `speclogs report`: unknown runs, runs with no decode rows, a single sample, NaN/inf throughput,
mixed SGLang versions, malformed options — clear messages, exit 1 where nothing can be computed (real CLI process)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from groundtruth.sglang_logs import FIXTURES, RunSpec, write_run
from speclogs.analysis import compare_runs

SRC = Path(__file__).resolve().parents[1] / "src"


def _startup_only(path: Path) -> None:
    lines = (FIXTURES / "baseline_default.log").read_text(encoding="utf-8").splitlines()
    cut = next(i for i, line in enumerate(lines) if "Prefill batch" in line)
    path.write_text("\n".join(lines[:cut]) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def bad_db(tmp_path_factory):
    from speclogs.store import ingest_paths

    root = tmp_path_factory.mktemp("bad-input")
    logs = root / "logs"
    logs.mkdir()
    _startup_only(logs / "nodecode.log")
    _startup_only(logs / "nodecode_bench.log")
    (logs / "nodecode_bench.bench.jsonl").write_text("".join(json.dumps(
        {"run": "nodecode_bench", "i": i, "warmup": i == 0, "latency_s": 5.0, "completion_tokens": 500,
         "tok_per_s": 100.0, "meta_info": {}}) + "\n" for i in range(6)))
    write_run(RunSpec(name="single", spec=False, nccl_tuned=False, rate_tok_s=60.0, requests=2, seed=1), logs, "plain")
    write_run(RunSpec(name="steady", spec=False, nccl_tuned=False, rate_tok_s=60.0, requests=6, seed=2), logs, "plain")
    write_run(RunSpec(name="nanbench", spec=False, nccl_tuned=False, rate_tok_s=60.0, requests=6, seed=3), logs, "plain")
    bench = logs / "nanbench.bench.jsonl"
    rows = [json.loads(line) for line in bench.read_text().splitlines()]
    rows[2]["latency_s"] = math.nan
    rows[2]["tok_per_s"] = math.inf
    rows[2]["meta_info"]["e2e_latency"] = math.nan
    rows[3]["latency_s"] = 0.0
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json writes NaN, as Python clients do
    launcher = root / "launcher"
    for version, cell in (("0.5.14", "old"), ("0.5.23", "new")):
        write_run(RunSpec(name=f"{cell}_1", spec=False, nccl_tuned=False, rate_tok_s=60.0, cell=cell, launch=1,
                          requests=4, sglang_version=version, seed=4), launcher, "launcher")
    db = root / "bad.duckdb"
    ingest_paths([logs, launcher], db)
    return db


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "speclogs", "report", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_unknown_run_exits_1_and_lists_known_runs(bad_db):
    result = _cli("--compare", "steady", "nosuchrun", "--db", str(bad_db))
    assert result.returncode == 1
    assert "Error: no run matches 'nosuchrun'" in result.stderr and "steady" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_without_decode_rows_or_requests_exits_1_with_the_reason(bad_db):
    result = _cli("--compare", "steady", "nodecode", "--db", str(bad_db))
    assert result.returncode == 1
    assert "nodecode" in result.stderr and "no decode rows" in result.stderr


def test_run_without_decode_rows_but_with_requests_uses_the_client_and_says_so(bad_db):
    with duckdb.connect(str(bad_db), read_only=True) as con:
        c = compare_runs(con, ["steady", "nodecode_bench"])
    assert [r.source for r in c.comparisons] == ["client"]
    assert any(w.code == "no_decode_rows" and "nodecode_bench" in w.message for w in c.warnings)


def test_single_sample_gives_no_verdict(bad_db):
    with duckdb.connect(str(bad_db), read_only=True) as con:
        c = compare_runs(con, ["steady", "single"])
    client = next(r for r in c.comparisons if r.source == "client")
    assert client.n_units_b == 1 and client.verdict == "insufficient data"
    assert any(w.code == "too_few_samples" and "single" in w.message for w in c.warnings)


def test_nan_and_zero_latency_requests_are_excluded_and_reported(bad_db):
    with duckdb.connect(str(bad_db), read_only=True) as con:
        c = compare_runs(con, ["nanbench"])
    assert c.arms[0].client.n_rows == 3  # 6 requests − warm-up − NaN − zero latency
    assert math.isfinite(c.arms[0].client.value_tok_s)
    assert any(w.code == "non_finite_values" and "nanbench" in w.message for w in c.warnings)


def test_mixed_sglang_versions_are_flagged(bad_db):
    with duckdb.connect(str(bad_db), read_only=True) as con:
        c = compare_runs(con, ["old_*", "new_*"])
    assert any(w.code == "mixed_versions" and "0.5.23" in w.message for w in c.warnings)
    assert any(w.code == "confounder_version" for w in c.warnings)


def test_json_output_parses_and_carries_the_warnings(bad_db):
    result = _cli("-c", "steady", "single", "--db", str(bad_db), "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["comparisons"] and any(w["code"] == "too_few_samples" for w in doc["warnings"])


@pytest.mark.parametrize("args, message", [
    (["--factor", "nccl"], "is not name=selector"),
])
def test_bad_options_exit_1(bad_db, args, message):
    result = _cli("-c", "steady", "single", "--db", str(bad_db), *args)
    assert result.returncode == 1 and message in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--min-effect", "150%"], "--min-effect"), (["--min-effect", "-5%"], "--min-effect"), (["--min-effect", "lots"], "--min-effect"),
    (["--confidence", "1.5"], "--confidence"), (["--confidence", "95"], "--confidence"), (["--confidence", "0.2"], "--confidence"),
    (["--hidden-size", "0"], "--hidden-size"), (["-o", "report.pdf"], "suffix"),
])
def test_out_of_range_options_are_usage_errors(bad_db, args, message):
    """No fake verdict from a threshold of 150 %, no traceback from -5 %: a clear message and exit 2 before any work."""
    result = _cli("-c", "steady", "single", "--db", str(bad_db), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr and result.stdout == ""


def test_library_refuses_a_min_effect_out_of_range(bad_db):
    import duckdb

    from speclogs.analysis import compare_runs
    from speclogs.errors import AnalysisError

    with duckdb.connect(str(bad_db), read_only=True) as con, pytest.raises(AnalysisError, match="outside"):
        compare_runs(con, ["steady", "single"], min_effect=1.5)


def test_missing_database_exits_1(tmp_path):
    result = _cli("-c", "a", "b", "--db", str(tmp_path / "none.duckdb"))
    assert result.returncode == 1 and "no database" in result.stderr


def test_min_effect_option_is_a_percentage(bad_db):
    result = _cli("-c", "steady", "--db", str(bad_db), "--min-effect", "two")
    assert result.returncode == 2 and "--min-effect 'two' is not a percentage" in result.stderr
    result = _cli("-c", "old_*", "new_*", "--db", str(bad_db), "--format", "json", "--min-effect", "2%")
    assert result.returncode == 0 and json.loads(result.stdout)["min_effect"] == 0.02
