"""`--html FILE`: one self-contained HTML file (works offline): tables + Altair charts, with the Vega, Vega-Lite and
vega-embed JavaScript inlined (no CDN, no network): vl-convert-python's bundle for altair's Vega-Lite where it is
installed, else the copy shipped with speclogs (vega_bundle.js.gz: Vega 6.2, Vega-Lite 6.4.1, vega-embed 7, as
vl-convert 1.9 bundles them)."""

from __future__ import annotations

import functools
import gzip
import html
import json
from pathlib import Path

from speclogs.analysis.results import Comparison
from speclogs.errors import InputError
from speclogs.redact import redact_json, redact_text
from speclogs.report import charts, text

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 24px auto; padding: 0 16px; max-width: 1200px;
       color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.88em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
.warn { background: #fff6e0; border-left: 4px solid #e0a000; padding: 6px 10px; margin: 4px 0; }
.warn ul { margin: 2px 0; padding-left: 20px; }
.note { color: #666; font-size: 0.9em; margin: 2px 0; }
.code { font-family: monospace; font-weight: bold; }
.chart { margin: 16px 0; width: 100%; }
.chart-error { color: #b00; white-space: pre-wrap; }
.nodata { border: 1px dashed #ccc; padding: 12px; }
"""
CORE_TABLES = ("arms", "comparisons", "attribution", "phase_terms", "phases", "effects")


@functools.lru_cache(maxsize=1)
def _vega_bundle() -> str:
    try:
        import vl_convert
        from altair.utils._importers import vl_version_for_vl_convert
    except ImportError:
        return gzip.decompress((Path(__file__).parent / "vega_bundle.js.gz").read_bytes()).decode("utf-8")
    return vl_convert.javascript_bundle(vl_version=vl_version_for_vl_convert())


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _chart_sections(c: Comparison, chart_div) -> list[str]:  # noqa: ANN001
    """The charts after the tables they illustrate, each panel with nothing to draw saying why."""
    parts = ["<h2>Effects and ratios</h2>", chart_div("effects")] if c.effects or c.comparisons else []
    parts += ["<h2>Step time</h2>", chart_div("cycle", "no decode step time or profiled cycle in these runs"),
              "<h2>Acceptance</h2>", chart_div("accept", "no accept length in the decode rows (no speculative decoding?)"),
              chart_div("requests", "no per-request acceptance (client requests or --export-metrics-to-file records)"),
              "<h2>Decode throughput and acceptance over time</h2>", chart_div("timeline", "no decode rows"),
              chart_div("accepttime", "no accept length over time (no speculative decoding in these runs)"),
              "<h2>Acceptance per draft position</h2>",
              chart_div("positions", "no profiled cycles at batch size 1 and no SGLang accept histograms in these runs")]
    if c.draft_positions is not None and not c.draft_positions.is_empty():
        missing = [a.name for a in c.arms if a.name not in set(c.draft_positions["arm"])]
        if missing:
            parts.append(f'<p class="note">no data for {html.escape(", ".join(missing))}: no profiled cycles at batch '
                         "size 1 and no SGLang accept histograms</p>")
    return parts


def render_html(comparison: Comparison) -> str:
    """The whole page as a string."""
    c = comparison
    parts = [f"<h1>{html.escape(text.title(c))}</h1>"]
    if c.ranking:
        parts += [f"<h2>{html.escape(text.ranking_title(c))}</h2>", _table(text.RANKING_HEADER, text.ranking_rows(c))]
    blocks = text.answer_blocks(c)
    if blocks:
        parts.append('<h2>Answer</h2><ul class="answer">')
        for head, details in blocks:
            sub = "".join(f"<li>{html.escape(line)}</li>" for line in details)
            parts.append(f"<li><b>{html.escape(head)}</b>" + (f"<ul>{sub}</ul>" if sub else "") + "</li>")
        parts.append("</ul>")
    tiers = text.ranked_warnings(c)
    for tier, found in tiers:
        parts.append(f"<h2>Warnings that {html.escape(tier)} ({len(found)})</h2>")
        groups: dict[str, list[str]] = {}
        for w in found:
            groups.setdefault(w.code, []).append(w.message)
        for code, messages in groups.items():
            body = (html.escape(messages[0]) if len(messages) == 1
                    else "<ul>" + "".join(f"<li>{html.escape(m)}</li>" for m in messages) + "</ul>")
            parts.append(f'<div class="warn"><span class="code">{html.escape(code)}</span> {body}</div>')
    if not tiers:
        parts.append("<h2>Warnings</h2><p>none</p>")
    notes = [w for w in c.warnings if w.severity != "warning"]
    chart_list = charts.all_charts(c)
    chart_ids = {name for name, _ in chart_list}

    def chart_div(name: str, empty: str = "") -> str:
        if name in chart_ids:
            return f'<div class="chart" id="chart-{name}"></div>'
        return f'<p class="note nodata">no data: {html.escape(empty)}</p>' if empty else ""

    tables = text.tables(c, brief=False)
    core = [table for table in tables if table[0] in CORE_TABLES]   # the extra sections (NCCL, signals …) come after
    for key, title, header, rows, after in core:
        parts += [f"<h2>{html.escape(title)}</h2>", _table(header, rows)]
        parts += [f'<p class="note">{html.escape(line)}</p>' for line in after]
        if key == "arms":
            parts.append(chart_div("throughput", "no arm has a throughput estimate"))
    parts += _chart_sections(c, chart_div)
    for _, title, header, rows, _after in tables[len(core):]:
        parts += [f"<h2>{html.escape(title)}</h2>", _table(header, rows)]
    parts.append(chart_div("startup"))
    if notes:
        parts.append(f"<details><summary>{len(notes)} notes (how the numbers were made, settings, NCCL evidence)</summary>")
        parts += [f'<div class="note"><span class="code">{html.escape(w.code)}</span> {html.escape(w.message)}</div>'
                  for w in notes]
        parts.append("</details>")
    parts += ["<h2>Methods</h2><ul>"] + [f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in c.methods.items()]
    parts.append("</ul>")
    specs = redact_json({name: chart.to_dict() for name, chart in chart_list})
    script = (
        "const specs = " + json.dumps(specs).replace("</", "<\\/") + ";\n"
        "for (const [name, spec] of Object.entries(specs)) {\n"
        "  const el = document.getElementById('chart-' + name);\n"
        "  vegaEmbed(el, spec, {actions: false, renderer: 'svg'}).catch(err => {\n"
        "    el.innerHTML = '<pre class=\"chart-error\">chart ' + name + ' failed: ' + err + '</pre>'; });\n"
        "}\n"
    )
    bundle = _vega_bundle().replace("</script", "<\\/script")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>speclogs report</title>"
        f"<style>{CSS}</style>\n<script>{bundle}</script></head>\n<body>\n" + redact_text("\n".join(parts))
        + f"\n<script>\n{script}</script>\n</body></html>\n"
    )


def chart_pages(comparison: Comparison) -> dict[str, str]:
    """{chart id: a self-contained page with that chart alone} — to screenshot or embed one chart."""
    bundle = _vega_bundle().replace("</script", "<\\/script")
    pages = {}
    for name, chart in charts.all_charts(comparison):
        spec = json.dumps(redact_json(chart.to_dict())).replace("</", "<\\/")
        pages[name] = (
            f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(name)}</title>"
            f"<style>body {{ margin: 8px; font-family: sans-serif; }} .chart {{ width: calc(100% - 40px); }}</style>"
            f"<script>{bundle}</script></head>\n<body>"
            f'<div class="chart" id="chart-{name}"></div>\n<script>\nvegaEmbed(document.getElementById("chart-{name}"), '
            f"{spec}, {{actions: false, renderer: 'svg'}}).catch(err => {{ document.body.innerHTML = "
            f"'<pre class=\"chart-error\">chart {name} failed: ' + err + '</pre>'; }});\n</script></body></html>\n")
    return pages


def require_chart_export() -> None:
    """InputError unless vl-convert (the PNG / SVG renderer) is installed: checked before anything is computed."""
    try:
        import vl_convert  # noqa: F401
    except ImportError as error:
        raise InputError("--charts writes PNG and SVG with vl-convert, which is not installed",
                         hint="pip install 'speclogs[charts]' (or vl-convert-python); the --html report needs nothing more") from error


def write_charts(comparison: Comparison, folder: Path) -> list[Path]:
    """Every chart as FOLDER/<id>.svg and FOLDER/<id>.png (2× scale); the paths written. InputError when vl-convert is
    missing or the folder cannot be written."""
    require_chart_export()
    import vl_convert
    from altair.utils._importers import vl_version_for_vl_convert

    written = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, chart in charts.all_charts(comparison):
            spec = redact_json(chart.to_dict())
            if spec.get("width") == "container":   # no page to fill: the report's own width
                spec["width"] = charts.WIDTH
            (folder / f"{name}.svg").write_text(vl_convert.vegalite_to_svg(spec, vl_version=vl_version_for_vl_convert()))
            (folder / f"{name}.png").write_bytes(vl_convert.vegalite_to_png(spec, vl_version=vl_version_for_vl_convert(), scale=2))
            written += [folder / f"{name}.svg", folder / f"{name}.png"]
    except OSError as error:
        raise InputError(f"cannot write the charts to {folder}: {error.strerror}", hint="choose a writable folder") from error
    return written
