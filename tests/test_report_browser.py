"""The HTML report in a real headless Chromium: every chart draws (SVG marks present, no error text), offline."""

from __future__ import annotations

import re
import shutil
import subprocess

import duckdb
import pytest

from groundtruth import dbs
from speclogs.analysis import compare_runs
from speclogs.report import write_report

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
    page = write_report(comparison, tmp_path / "report.html")
    dom = _dom(page)
    blocks = _chart_blocks(dom)
    assert set(blocks) == {"throughput", "effects", "cycle", "accept", "timeline", "accepttime", "positions", "startup"}
    assert "no data for baseline_default_*, baseline_nccl_*" in dom   # the arms without per-position counts are named
    assert dom.index("<h2>Ranking") < dom.index("<h2>Answer")       # the ranking first, as in the terminal
    for name, block in blocks.items():
        assert "<svg" in block, f"chart {name} did not draw"
        assert "chart-error" not in block and "failed" not in block, block[:500]
        assert block.count("<path") + block.count("<rect") + block.count("<line") > 5, name


# --- every chart alone, screenshotted, its axes and bars read back from the drawn SVG --------------------------------

def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--disable-background-networking", "--hide-scrollbars", "--virtual-time-budget=15000", *args],
                          capture_output=True, text=True, timeout=120)


def _axes(dom: str) -> dict[str, list[str]]:
    """{'X' | 'Y': labels of the first axis of that kind} from Vega's SVG (axis groups carry an aria-label)."""
    axes: dict[str, list[str]] = {}
    for chunk in re.split(r'(?=<g class="mark-group role-axis")', dom)[1:]:
        kind = re.search(r'aria-label="([XY])-axis', chunk)
        labels = re.search(r'role-axis-label"[^>]*>(.*?)</g>', chunk, re.S)
        if kind and labels and kind.group(1) not in axes:
            axes[kind.group(1)] = re.findall(r"<text[^>]*>([^<]*)</text>", labels.group(1))
    return axes


def _bar_widths(dom: str) -> list[float]:
    marks = re.search(r'<g class="mark-rect role-mark[^"]*"[^>]*>(.*?)</g>', dom, re.S)
    return [float(w) for w in re.findall(r'<path[^>]* d="M[-\d.e]+,[-\d.e]+h([\d.e]+)', marks.group(1))] if marks else []


# Run in the page once Vega has drawn: every axis' visible tick labels, as boxes on the screen, and the pairs that overlap
# (Vega hides a label it drops for overlap with opacity 0; those do not count).
LABEL_BOXES = """<script>setTimeout(() => {
  const found = {axes: 0, labels: 0, overlaps: []};
  document.querySelectorAll('g.role-axis').forEach((axis) => {
    const texts = [...axis.querySelectorAll('g.role-axis-label text')].filter(
      (t) => t.textContent.trim() && t.getAttribute('opacity') !== '0' && getComputedStyle(t).opacity !== '0');
    const boxes = texts.map((t) => t.getBoundingClientRect());
    found.axes += 1; found.labels += texts.length;
    for (let a = 0; a < boxes.length; a++) for (let b = a + 1; b < boxes.length; b++) {
      const p = boxes[a], q = boxes[b];
      if (p.left < q.right - 0.5 && q.left < p.right - 0.5 && p.top < q.bottom - 0.5 && q.top < p.bottom - 0.5)
        found.overlaps.push(texts[a].textContent + ' / ' + texts[b].textContent);
    }
  });
  const pre = document.createElement('pre'); pre.id = 'label-boxes'; pre.textContent = JSON.stringify(found);
  document.body.appendChild(pre);
}, 4000);</script>"""


def chart_pages(comparison) -> dict[str, str]:
    """{chart id: a self-contained page with that chart alone, as the report draws it}."""
    from speclogs.report import charts, html

    style = "body { margin: 8px; font-family: sans-serif; } .chart { width: calc(100% - 40px); }"
    return {name: html._page(name, style, f'<div class="chart" id="chart-{name}"></div>', html._embed(name, chart.to_dict()))
            for name, chart in charts.all_charts(comparison)}


@pytest.fixture(scope="module")
def chart_screens(tmp_path_factory):
    """Every chart of three reports — the seeds' 2×2 story, the real matrix (its EAGLE-3 acceptance is constant, 2.00)
    and the launcher's H200 runs — alone on a page, drawn by headless Chromium: a PNG screenshot and the DOM of each. Screenshots are kept
    under $SPECLOGS_SCREENSHOTS when set (to look at them), else in a temporary folder."""
    import os
    from pathlib import Path

    from conftest import MATRIX
    from speclogs.store import ingest_paths

    base = tmp_path_factory.getbasetemp()
    out = Path(os.environ.get("SPECLOGS_SCREENSHOTS") or tmp_path_factory.mktemp("screens"))
    out.mkdir(parents=True, exist_ok=True)
    seeds_db, _ = dbs.seeds_db(base)
    matrix_db = tmp_path_factory.mktemp("matrix") / "matrix.duckdb"
    ingest_paths([MATRIX], matrix_db)
    launches_db = tmp_path_factory.mktemp("launches") / "launches.duckdb"
    ingest_paths([MATRIX.parents[1] / "h200x2"], launches_db)
    reports = {"seeds": (seeds_db, ["baseline_default_*", "baseline_nccl_*", "eagle3_default_*", "eagle3_nccl_*"]),
               "matrix": (matrix_db, ["baseline_default", "baseline_nccl", "eagle3_default", "eagle3_nccl"]),
               # the launcher's H200 runs: ratios 0.55–1.45, where Vega's own log ticks label nothing above 1
               "launches": (launches_db, ["baseline_default_[0-9]*", "baseline_nccl_[0-9]*", "eagle3_default_[0-9]*",
                                          "eagle3_nccl_[0-9]*", "eagle3_nccl_prof_[0-9]*"])}
    screens = {}
    for report, (db, arms) in reports.items():
        with duckdb.connect(str(db), read_only=True) as con:
            comparison = compare_runs(con, arms)
        for name, page in chart_pages(comparison).items():
            html = out / f"{report}-{name}.html"
            head, tail = page.rsplit("</body>", 1)   # the last one: the Vega bundle holds the string too
            html.write_text(head + LABEL_BOXES + "</body>" + tail)
            png = out / f"{report}-{name}.png"
            shot = _chromium("--window-size=1000,1000", f"--screenshot={png}", html.as_uri())
            assert shot.returncode == 0, shot.stderr[-2000:]
            dom = _chromium("--dump-dom", html.as_uri())
            assert dom.returncode == 0, dom.stderr[-2000:]
            screens[(report, name)] = (png, dom.stdout)
    return screens


def test_every_chart_is_screenshotted_and_draws(chart_screens):
    assert {name for _, name in chart_screens} == {"throughput", "effects", "cycle", "accept", "timeline", "accepttime", "startup",
                                                   "positions"}
    for (report, name), (png, dom) in chart_screens.items():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000, (report, name)
        assert "<svg" in dom and not re.search(r"chart \w+ failed: (?!' \+ err)", dom), (report, name, dom[-500:])


def test_no_tick_labels_overlap_and_every_chart_has_axes_with_labels(chart_screens):
    import html
    import json

    for (report, name), (_, dom) in chart_screens.items():
        found = re.search(r'<pre id="label-boxes">(.*?)</pre>', dom, re.S)
        assert found, (report, name, "the label check did not run")
        boxes = json.loads(html.unescape(found.group(1)))
        assert boxes["axes"] >= 2 and boxes["labels"] >= 4, (report, name, boxes)
        assert not boxes["overlaps"], (report, name, boxes["overlaps"])


def test_forest_plot_labels_ticks_above_one(chart_screens):
    for report in ("seeds", "matrix", "launches"):
        labels = _axes(chart_screens[(report, "effects")][1])["X"]
        values = [float(label) for label in labels]
        assert any(v > 1 for v in values) and any(v < 1 for v in values) and 1.0 in values, (report, labels)


def test_constant_acceptance_is_one_narrow_bar_per_arm(chart_screens):
    dom = chart_screens[("matrix", "accept")][1]
    labels = _axes(dom)["X"]
    assert len(labels) >= 3, labels                     # not a single bin stretched over the whole axis
    widths = _bar_widths(dom)
    assert widths and max(widths) < 0.5 * 200, widths      # a 200 px panel: the bar is a bin wide, not the panel


def test_startup_is_one_stacked_bar_per_launch(chart_screens):
    labels = _axes(chart_screens[("launches", "startup")][1])["Y"]
    assert len(labels) == 10 and "eagle3_nccl_prof_2" in labels, labels   # 5 arms × 2 launches, one bar each


def test_acceptance_per_draft_position_draws_the_profiled_arms(chart_screens):
    """The seeds' EAGLE-3 arms are profiled with 5 draft positions: a line per arm over positions 1–5, on a 0–100 % axis.
    In the launcher's runs only the profiled arm has counts (the synthetic pair: position 1 always accepted, position 2
    never, no verify step reached 3)."""
    seeds = chart_screens[("seeds", "positions")][1]
    assert _axes(seeds)["X"] == ["1", "2", "3", "4", "5"] and _axes(seeds)["Y"][-1] == "100%", _axes(seeds)
    legend = [label for block in re.findall(r'role-legend-label"[^>]*>(.*?)</g>', seeds, re.S)
              for label in re.findall(r"<text[^>]*>([^<]*)</text>", block)]
    assert legend == ["eagle3_default_*", "eagle3_nccl_*", "profiler (batch size 1)"], legend   # not the baselines
    launches = chart_screens[("launches", "positions")][1]
    assert _axes(launches)["X"] == ["1", "2"] and "eagle3_nccl_prof_[0-9]*" in launches
    assert ("matrix", "positions") not in chart_screens     # one-line logs, no profiler: no chart


def test_throughput_over_time_starts_at_the_first_decode_row(chart_screens):
    for report in ("seeds", "matrix", "launches"):
        labels = _axes(chart_screens[(report, "timeline")][1])["X"]
        assert labels and float(labels[0]) > 0, (report, labels)


def test_the_signals_page_of_the_real_metrics_run_draws(tmp_path):
    """fixtures/h200-sglang-0.5.14-metrics: the per-request acceptance chart draws next to the others; the signal tables
    are on the page."""
    from pathlib import Path

    from speclogs.store import ingest_paths

    db = tmp_path / "speclogs.duckdb"
    ingest_paths([Path(__file__).resolve().parents[1] / "fixtures" / "h200-sglang-0.5.14-metrics"], db, run_name="h200_metrics")
    con = duckdb.connect(str(db), read_only=True)
    try:
        comparison = compare_runs(con, ["h200_metrics"])
    finally:
        con.close()
    dom = _dom(write_report(comparison, tmp_path / "report.html"))
    block = _chart_blocks(dom)["requests"]
    assert "<svg" in block and "chart-error" not in block
    assert block.count("<path") + block.count("<line") >= 2   # the bar and the mean's rule
    assert "Phase split from SGLang's device timer" in dom and "Per-request acceptance" in dom
