"""Render a `speclogs.analysis.Comparison`: terminal (rich), JSON, Markdown, self-contained HTML with Altair charts.

Renderers format and draw; they compute no statistics.
"""

from speclogs.report.jsonout import comparison_to_dict, render_json
from speclogs.report.markdown import render_markdown

__all__ = ["comparison_to_dict", "render_json", "render_markdown", "render_terminal", "render_html", "write_html"]


def render_terminal(comparison, console):  # noqa: ANN001 - thin lazy wrapper (rich imported on use)
    from speclogs.report.terminal import render_terminal as _render

    return _render(comparison, console)


def render_html(comparison):  # noqa: ANN001
    from speclogs.report.html import render_html as _render

    return _render(comparison)


def write_html(comparison, path):  # noqa: ANN001
    from speclogs.report.html import write_html as _write

    return _write(comparison, path)
