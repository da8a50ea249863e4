"""`speclogs report` as a user runs it: arm labels, one computation written to several formats, a first screen that
answers which is faster, by how much, how sure and why — before any warning about a driver script's variable."""

from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT, run_cli


@pytest.fixture(scope="module")
def fixtures_db(tmp_path_factory):
    """Every bundled fixture, ingested as the README's quick start does."""
    db = tmp_path_factory.mktemp("fixtures") / "speclogs.duckdb"
    result = run_cli("ingest", str(ROOT / "fixtures"), "--db", str(db))
    assert result.returncode == 0, result.stderr
    return db


def test_arm_labels(fixtures_db):
    result = run_cli("report", "--db", str(fixtures_db), "-c", "base=baseline_default_[0-9]", "-c",
                     "eagle=eagle3_default_[0-9]", "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["reference"] == "base" and [a["name"] for a in doc["arms"]] == ["base", "eagle"]
    assert doc["arms"][0]["run_names"] == ["baseline_default_1", "baseline_default_2"]
    assert doc["comparisons"][0]["arm_b"] == "eagle"


def test_a_run_name_with_an_equals_sign_is_still_a_run_name():
    from speclogs.analysis.load import split_arm

    assert split_arm("tp=2", {"tp=2"}) == ("tp=2", "tp=2")
    assert split_arm("base=baseline_*", {"baseline_1"}) == ("base", "baseline_*")
    assert split_arm("a*=b", set()) == ("a*=b", "a*=b")


def test_one_computation_rendered_to_every_format(fixtures_db, tmp_path, monkeypatch):
    import speclogs.analysis
    from speclogs.cli import main

    calls = []
    real = speclogs.analysis.compare_runs
    monkeypatch.setattr(speclogs.analysis, "compare_runs", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = [tmp_path / "r.json", tmp_path / "r.md", tmp_path / "r.html", tmp_path / "r.txt"]
    code = main(["report", "--db", str(fixtures_db), "-c", "baseline_default", "-c", "eagle3_default",
                 "--format", "json", *(arg for path in out for arg in ("-o", str(path)))])
    assert code == 0 and len(calls) == 1
    doc = json.loads(out[0].read_text())
    assert doc["schema"] == "speclogs.report/1" and doc["comparisons"]
    assert out[1].read_text().startswith("# speclogs report") and "vegaEmbed" in out[2].read_text()
    assert out[3].read_text().startswith("speclogs report") and "Answer" in out[3].read_text()


def test_first_screen_ranks_then_answers_before_warning(fixtures_db):
    """The README's quick start: the ranking, then the verdict, ratio, interval, p-value, why and per-launch range."""
    result = run_cli("report", "--db", str(fixtures_db), "--compare", "baseline_default_[0-9]", "baseline_nccl_[0-9]",
                     "eagle3_default_[0-9]", "eagle3_nccl_[0-9]")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    first = re.sub(r"\s+", " ", "\n".join(lines[:24]))  # the console wraps long lines
    assert lines[1].startswith("Ranking (client tok/s, fastest first")
    assert lines[3].split()[:3] == ["1", "baseline_nccl_[0-9]", "525.4"] and "fastest" in lines[3]
    assert "×0.942 [0.752, 1.180]  inconclusive — ±5% needs 16 launches/arm" in lines[4]
    assert lines[8] == "Answer"
    assert ("eagle3_default_[0-9] vs baseline_default_[0-9]: inconclusive — ×0.873, 95% CI [0.644, 1.185], p = 0.184, "
            "2 vs 2 launches (client); these launches detect only") in first
    assert "±5% needs 29 launches per arm" in first
    assert "why (server): accept len 2.00 vs 1.00 (×2.00 [2.00, 2.00]), step time 4.47 vs 1.99 ms (×2.25 [1.72, 2.94])" in first
    assert "not significant: the server difference" in first
    assert "per launch (client tok/s): baseline_default_[0-9] 476.3–514.5 (2 launches)" in first
    assert "MINUTES" not in "\n".join(lines[:60]) and "AWS_CA_BUNDLE" not in result.stdout
    out = result.stdout
    assert out.index("can change the answer") < out.index("[confounded_factors]") < out.index("change how sure it is") \
        < out.index("[nccl_settings_differ]") < out.index("Throughput per arm")


def test_unset_is_written_one_way(fixtures_db):
    result = run_cli("report", "--db", str(fixtures_db), "-c", "baseline_default_[0-9]", "-c", "baseline_nccl_[0-9]",
                     "--format", "md")
    assert result.returncode == 0
    assert "unset → Ring" in result.stdout or "=unset" in result.stdout
    assert "<unset>" not in result.stdout and "\\<unset\\>" not in result.stdout
    assert ": None" not in result.stdout and "=—" not in result.stdout




def test_brief_is_the_ranking_and_the_warnings_in_15_lines(fixtures_db):
    result = run_cli("report", "--db", str(fixtures_db), "--compare", "baseline_default_[0-9]", "baseline_nccl_[0-9]",
                     "eagle3_default_[0-9]", "eagle3_nccl_[0-9]", "--brief")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) <= 15 and "Answer" not in lines
    assert [line.split()[1] for line in lines[3:7]] == ["baseline_nccl_[0-9]", "baseline_default_[0-9]",
                                                         "eagle3_nccl_[0-9]", "eagle3_default_[0-9]"]
    assert "warning(s): confounded_factors, nccl_settings_differ" in result.stdout


def test_one_launch_per_arm_claims_no_interval(fixtures_db):
    result = run_cli("report", "--db", str(fixtures_db), "-c", "baseline_default_1", "eagle3_default_1", "--format", "json")
    doc = json.loads(result.stdout)
    for r in doc["comparisons"]:
        assert r["verdict"] == "inconclusive" and r["ci_low"] is None and r["ci_high"] is None and r["p_value"] is None
        assert r["within_low"] < r["within_high"]
    text = run_cli("report", "--db", str(fixtures_db), "-c", "baseline_default_1", "eagle3_default_1").stdout
    assert "one launch per arm: ×0.886, no interval (launch-to-launch noise unknown; within-launch spread" in text
    assert "CI [" not in text.split("Throughput per arm")[0]


def test_overlapping_arms_name_the_run_by_its_name(fixtures_db):
    result = run_cli("report", "--db", str(fixtures_db), "-c", "baseline_default_*", "-c", "baseline_*", "--mixed-arms")
    assert result.returncode == 1
    assert "run 'baseline_default_1' (id " in result.stderr and "selected by both" in result.stderr, result.stderr
