"""Render a `speclogs.analysis.Comparison`: terminal (rich), JSON, Markdown, self-contained HTML with Altair charts.

Renderers format and draw; they compute no statistics.
"""

from pathlib import Path

from speclogs.errors import InputError

__all__ = ["FORMATS", "comparison_to_dict", "render", "render_json", "render_markdown", "render_terminal", "write_report"]

# file suffix → format; one Comparison renders to any number of them (nothing is recomputed per format)
FORMATS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".txt": "text"}


def __getattr__(name: str):  # noqa: ANN202
    """The renderers load on first use: `speclogs sql` prints its tables with report.summaries and loads no polars."""
    if name in ("comparison_to_dict", "render_json"):
        from speclogs.report import jsonout

        return getattr(jsonout, name)
    if name == "render_markdown":
        from speclogs.report.markdown import render_markdown

        return render_markdown
    raise AttributeError(f"module 'speclogs.report' has no attribute {name!r}")


def render(comparison, fmt: str) -> str:  # noqa: ANN001
    """The report as text in one format: 'json', 'md', 'html' or 'text' (the terminal report without colour)."""
    if fmt == "json":
        from speclogs.report.jsonout import render_json

        return render_json(comparison) + "\n"
    if fmt == "md":
        from speclogs.report.markdown import render_markdown

        return render_markdown(comparison)
    if fmt == "html":   # altair and the Vega bundle load only for this format
        from speclogs.report.html import render_html

        return render_html(comparison)
    import io

    from speclogs.console import make_console

    out = io.StringIO()
    render_terminal(comparison, make_console(file=out, width=160))
    return out.getvalue()


def write_report(comparison, path: Path) -> Path:  # noqa: ANN001
    """Write the report to `path` in the format its suffix names; InputError when it names none or cannot be written."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise InputError(f"cannot tell the report format of {path} from its suffix",
                         hint=f"end the file name in one of {', '.join(sorted(FORMATS))}")
    try:
        Path(path).write_text(render(comparison, fmt), encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write the report to {path}: {error.strerror}", hint="choose a writable path") from error
    return Path(path)


def render_terminal(comparison, console, brief=False):  # noqa: ANN001 - rich is imported on use
    from speclogs.report.terminal import render_terminal as _render

    return _render(comparison, console, brief=brief)
