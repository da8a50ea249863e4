"""Render a `speclogs.analysis.Comparison`: terminal (rich), JSON, Markdown, self-contained HTML with Altair charts.

Renderers format and draw; they compute no statistics.
"""

from pathlib import Path

from speclogs.errors import InputError
from speclogs.report.jsonout import comparison_to_dict, render_json
from speclogs.report.markdown import render_markdown

__all__ = ["FORMATS", "check_output_path", "comparison_to_dict", "render", "render_json", "render_markdown",
           "render_terminal", "render_html", "write_html", "write_report"]

# file suffix → format; one Comparison renders to any number of them (nothing is recomputed per format)
FORMATS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".txt": "text"}


def render(comparison, fmt: str) -> str:  # noqa: ANN001
    """The report as text in one format: 'json', 'md', 'html' or 'text' (the terminal report without colour)."""
    if fmt == "json":
        return render_json(comparison) + "\n"
    if fmt == "md":
        return render_markdown(comparison)
    if fmt == "html":
        return render_html(comparison)
    if fmt in ("text", "terminal"):
        import io

        from speclogs.console import make_console

        out = io.StringIO()
        render_terminal(comparison, make_console(file=out, width=160))
        return out.getvalue()
    raise ValueError(f"unknown report format {fmt!r}")


def check_output_path(path: Path) -> str:
    """The format `path`'s suffix names; InputError (before anything is computed) when it names none."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise InputError(f"cannot tell the report format of {path} from its suffix",
                         hint=f"end the file name in one of {', '.join(sorted(FORMATS))}")
    return fmt


def write_report(comparison, path: Path) -> Path:  # noqa: ANN001
    """Write the report to `path` in the format its suffix names; InputError when it cannot be written."""
    text = render(comparison, check_output_path(path))
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write the report to {path}: {error.strerror}", hint="choose a writable path") from error
    return Path(path)


def render_terminal(comparison, console, brief=False):  # noqa: ANN001 - thin lazy wrapper (rich imported on use)
    from speclogs.report.terminal import render_terminal as _render

    return _render(comparison, console, brief=brief)


def render_html(comparison):  # noqa: ANN001
    from speclogs.report.html import render_html as _render

    return _render(comparison)


def write_html(comparison, path):  # noqa: ANN001
    from speclogs.report.html import write_html as _write

    return _write(comparison, path)
