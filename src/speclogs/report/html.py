"""`--html FILE`: one self-contained HTML file (works offline): tables + Altair charts, with the Vega, Vega-Lite and
vega-embed JavaScript inlined from the copy shipped with speclogs (vega_bundle.js.gz: Vega 6.2, Vega-Lite 6.4.1,
vega-embed 7, as vl-convert 1.9 bundles them), so no CDN and no network."""

from __future__ import annotations

import functools
import gzip
import html
import json
from pathlib import Path

from speclogs.analysis.results import Comparison
from speclogs.redact import redact_json, redact_text
from speclogs.report import charts, text

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 24px auto; padding: 0 16px; max-width: 1200px;
       color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.88em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
.warn { background: #fff6e0; border-left: 4px solid #e0a000; padding: 6px 10px; margin: 4px 0; list-style: none; }
.note { color: #666; font-size: 0.9em; margin: 2px 0; }
.chart { margin: 16px 0; width: 100%; }
.chart-error { color: #b00; white-space: pre-wrap; }
.nodata { border: 1px dashed #ccc; padding: 12px; }
"""


@functools.lru_cache(maxsize=1)
def _vega_bundle() -> str:
    return gzip.decompress((Path(__file__).parent / "vega_bundle.js.gz").read_bytes()).decode("utf-8")


def _list(items: list[tuple[str, list[str]]], item: str = "<li>") -> str:
    return "<ul>" + "".join(f"{item}{html.escape(head)}{_list([(d, []) for d in details]) if details else ''}</li>"
                            for head, details in items) + "</ul>"


def _section(s, drawn: set[str]) -> str:  # noqa: ANN001 - a report.text.Section
    """A section as HTML; a chart section as its chart's div, or what it would need when there is nothing to draw."""
    e = html.escape
    if s.kind == "chart" and s.key not in drawn:
        heading = f"<h2>{e(s.title)}</h2>" if s.title and s.items else ""
        return heading + "".join(f'<p class="note nodata">{e(head)}</p>' for head, _ in s.items)
    if s.kind == "note":   # folded: how the numbers were made, not what they say
        return f"<details><summary>{e(s.title)}</summary>{_list(s.items)}</details>"
    parts = [f"<h1>{e(s.title)}</h1>" if s.kind == "title" else f"<h2>{e(s.title)}</h2>" if s.title else ""]
    if s.kind == "chart":
        parts.append(f'<div class="chart" id="chart-{s.key}"></div>')
    elif s.items:
        parts.append(_list(s.items, '<li class="warn">' if s.kind in ("warning", "caveat") else "<li>"))
    if s.header:
        head = "".join(f"<th>{e(h)}</th>" for h in s.header)
        body = "".join("<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>" for row in s.rows)
        parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return "".join(parts + [f'<p class="note">{e(line)}</p>' for line in s.after])


def _embed(name: str, spec: dict) -> str:
    """A script drawing `spec` into #chart-<name>, or saying there why it could not."""
    target = f"document.getElementById('chart-{name}')"
    failed = f"'<pre class=\"chart-error\">chart {name} failed: ' + err + '</pre>'"
    spec_js = json.dumps(spec).replace("</", "<\\/")
    return f"vegaEmbed({target}, {spec_js}, {{actions: false, renderer: 'svg'}}).catch(err => {{ {target}.innerHTML = {failed}; }});\n"


def _page(title: str, style: str, body: str, script: str) -> str:
    bundle = _vega_bundle().replace("</script", "<\\/script")
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{style}</style>\n'
            f"<script>{bundle}</script></head>\n<body>\n{body}\n<script>\n{script}</script>\n</body></html>\n")


def render_html(comparison: Comparison) -> str:
    """The whole page as a string."""
    chart_list = charts.all_charts(comparison)
    drawn = {name for name, _ in chart_list}
    body = "\n".join(_section(s, drawn) for s in text.sections(comparison, brief=False))
    specs = redact_json({name: chart.to_dict() for name, chart in chart_list})
    return _page("speclogs report", CSS, redact_text(body), "".join(_embed(name, spec) for name, spec in specs.items()))

