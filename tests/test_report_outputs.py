"""What a user reads: the JSON schema, Markdown, terminal and HTML reports, and the chart specs (chart.to_dict())."""

from __future__ import annotations

import io
import json
import re

import duckdb
import pytest
from rich.console import Console

from groundtruth import dbs
from speclogs.analysis import compare_runs
from speclogs.report import charts, comparison_to_dict, render, render_json, render_markdown, render_terminal

ARMS = ["baseline_default_*", "baseline_nccl_*", "eagle3_default_*", "eagle3_nccl_*"]


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    db, _ = dbs.seeds_db(tmp_path_factory.getbasetemp())
    con = duckdb.connect(str(db), read_only=True)
    try:
        yield compare_runs(con, ARMS)
    finally:
        con.close()


def test_json_has_the_documented_schema(comparison):
    doc = json.loads(render_json(comparison))
    assert doc["schema"] == "speclogs.report/1"
    assert doc["reference"] == "baseline_default_*"
    for row in doc["comparisons"]:
        assert {"metric", "unit", "a", "b", "ratio", "ci_low", "ci_high", "p_value", "n_a", "n_b", "source", "test",
                "verdict", "arm_a", "arm_b"} <= row.keys()
        assert row["ci_low"] <= row["ratio"] <= row["ci_high"]
        assert row["unit"] == "tok/s"
    assert all({"code", "message", "severity"} <= w.keys() for w in doc["warnings"])
    # warnings come before notes
    severities = [w["severity"] for w in doc["warnings"]]
    assert severities == sorted(severities, key=lambda s: s != "warning")
    assert {"terms", "total", "counterfactuals", "phase_terms"} <= doc["attribution"][0].keys()
    assert {t["name"] for t in doc["attribution"][0]["terms"]} == {"acceptance", "batch size", "step time"}
    assert {e["kind"] for e in doc["effects"]} == {"main", "interaction", "simple"}
    assert doc["factors"] == {"nccl": ["default", "tuned"], "spec": ["baseline", "eagle3"]}
    assert doc["arms"][2]["server"]["n_launches"] == 3


def test_json_turns_non_finite_numbers_into_null(comparison):
    doc = comparison_to_dict(comparison)
    text = json.dumps(doc, allow_nan=False)  # raises on NaN/inf
    assert "NaN" not in text


def test_markdown_puts_warnings_before_numbers(comparison):
    md = render_markdown(comparison)
    assert md.startswith("# speclogs report")
    assert md.index("## Warnings") < md.index("## Throughput per arm") < md.index("## Factorial effects")
    assert "confounded_factors" in md
    # arm names are escaped (a glob's '*' and '_' are not emphasis)
    assert re.search(r"\| baseline_nccl\\_\\\* \| baseline_nccl_1, baseline_nccl_2, baseline_nccl_3 \| none \| 89\.\d", md)


def test_terminal_report_shows_warnings_first_and_every_table(comparison):
    buffer = io.StringIO()
    render_terminal(comparison, Console(file=buffer, width=220, color_system=None))
    out = buffer.getvalue()
    assert out.index("Answer") < out.index("read before the numbers") < out.index("Throughput per arm")
    for title in ("Attribution", "Speculative cycle phases", "Factorial effects"):
        assert title in out
    assert "faster by 41." in out


def test_charts_specs(comparison):
    specs = {name: chart.to_dict() for name, chart in charts.all_charts(comparison)}
    assert set(specs) == {"throughput", "effects", "cycle", "accept", "timeline", "accepttime", "positions", "startup"}
    positions = specs["positions"]["data"]["values"]   # the seeds' profiled EAGLE-3 arms: position 1 accepted most often
    assert {row["arm"] for row in positions} == {"eagle3_default_*", "eagle3_nccl_*"}
    assert all(0 <= row["acceptance"] <= 1 and row["accepted"] <= row["reached"] for row in positions)
    startup = specs["startup"]       # one stacked bar per launch, a colour per start-up phase
    assert startup["mark"]["type"] == "bar" and startup["encoding"]["color"]["field"] == "phase"
    assert {row["phase"] for row in startup["data"]["values"]} >= {"imports", "health_poll", "other"}
    throughput = specs["throughput"]
    marks = [layer["mark"] for layer in throughput["layer"]]
    assert {"type": "point", "filled": True, "size": 220, "shape": "diamond", "stroke": "black", "strokeWidth": 1} in marks
    assert throughput["layer"][0]["encoding"]["x"]["title"].startswith("throughput (tok/s) — axis starts at ")
    estimates = [row for row in throughput["data"]["values"] if row["layer"] == "estimate"]
    launches = [row for row in throughput["data"]["values"] if row["layer"] == "launch"]
    assert len(estimates) == 8 and len(launches) == 8 * 3  # 4 arms × (client, server), 3 launches each
    effects = specs["effects"]
    x = effects["layer"][1]["encoding"]["x"]
    assert x["scale"]["type"] == "log" and any(v > 1 for v in x["axis"]["values"]) and any(v < 1 for v in x["axis"]["values"])
    cycle = specs["cycle"]
    assert cycle["mark"]["type"] == "bar"
    phases = {row["phase"] for row in cycle["data"]["values"]}
    assert {"draft", "verify", "extend", "other", "decode step (not profiled)"} <= phases
    # a phase has the same colour in every report, whichever phases this one has; the legend lists only those it has
    scale = cycle["encoding"]["color"]["scale"]
    assert set(scale["domain"]) == phases - {"gap"} | ({"gap"} & phases) and len(set(scale["range"])) == len(scale["domain"])
    assert all(charts.PHASE_COLOURS[charts.PHASES.index(p)] == c for p, c in zip(scale["domain"], scale["range"]))
    accepttime = specs["accepttime"]
    assert accepttime["title"].startswith("Accept length over time")
    timeline = specs["timeline"]
    assert "facet" in timeline and timeline["spec"]["layer"][0]["mark"]["type"] == "rect"
    assert timeline["spec"]["layer"][1]["encoding"]["x"]["scale"]["zero"] is False
    assert specs["accept"]["spec"]["mark"]["type"] == "bar"


def test_html_is_self_contained(comparison):
    page = render(comparison, "html")
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=[\"']https?:", page)
    assert "vegaEmbed" in page and page.count('class="chart"') == 8
    assert page.index("Warnings") < page.index("Throughput per arm")


def test_phase_table_does_not_call_wall_a_share_of_the_cycle():
    from types import SimpleNamespace

    from speclogs.analysis.results import PhaseStat
    from speclogs.report import text

    phases = [PhaseStat("a", name, ms, ms, ms, share, 10) for name, ms, share in
              (("draft", 1.0, 0.25), ("verify", 3.0, 0.75), ("cycle", 4.0, 1.0), ("gap", 1.8, 0.45), ("wall", 5.8, 1.45))]
    shares = {row[1]: row[3] for row in text.phase_table(SimpleNamespace(phases=phases)).rows}
    assert shares["verify"] == "75.0%" and shares["cycle"] == "100.0%"
    assert shares["wall"] == "cycle + gap" and "145" not in shares["wall"]
    assert shares["gap"].startswith("+45.0% after the cycle")
