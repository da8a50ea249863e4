"""The HTML report in a real headless Chromium: every chart draws (SVG marks present, no error text), offline."""

from __future__ import annotations

import re
import shutil
import subprocess

import duckdb
import pytest

from groundtruth import dbs
from speclogs.analysis import compare_runs
from speclogs.report import write_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")]


def _dom(page_path) -> str:
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--virtual-time-budget=15000",
         "--dump-dom", page_path.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _chart_blocks(dom: str) -> dict[str, str]:
    """id → inner HTML of each chart div (up to the next chart div or heading)."""
    blocks = {}
    for match in re.finditer(r'<div class="chart[^"]*" id="chart-([a-z]+)"', dom):
        rest = dom[match.end():]
        end = re.search(r'<div class="chart[^"]*" id="chart-|<h2>', rest)
        blocks[match.group(1)] = rest[: end.start() if end else len(rest)]
    return blocks


def test_every_chart_draws_in_chromium(tmp_path, tmp_path_factory):
    db, _ = dbs.seeds_db(tmp_path_factory.getbasetemp())
    con = duckdb.connect(str(db), read_only=True)
    try:
        comparison = compare_runs(con, ["baseline_default_*", "baseline_nccl_*", "eagle3_default_*", "eagle3_nccl_*"])
    finally:
        con.close()
    page = write_html(comparison, tmp_path / "report.html")
    dom = _dom(page)
    blocks = _chart_blocks(dom)
    assert set(blocks) == {"throughput", "effects", "cycle", "accept", "timeline"}
    for name, block in blocks.items():
        assert "<svg" in block, f"chart {name} did not draw"
        assert "chart-error" not in block and "failed" not in block, block[:500]
        assert block.count("<path") + block.count("<rect") + block.count("<line") > 5, name
