"""Render a `speclogs.analysis.Comparison`: terminal (rich), JSON, Markdown, self-contained HTML with Altair charts.
Renderers compute no statistics; each loads on first use (`speclogs sql` loads no polars)."""

import importlib
from pathlib import Path

from speclogs.errors import InputError

__all__ = ["FORMATS", "comparison_to_dict", "render", "render_json", "render_markdown", "render_terminal", "write_report"]

# file suffix → format; one Comparison renders to any number of them (nothing is recomputed per format)
FORMATS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".txt": "text"}
_LAZY = {"comparison_to_dict": "jsonout", "render_json": "jsonout", "render_markdown": "markdown", "render_html": "html",
         "render_terminal": "terminal"}


def __getattr__(name: str):  # noqa: ANN202
    if name not in _LAZY:
        raise AttributeError(f"module 'speclogs.report' has no attribute {name!r}")
    return getattr(importlib.import_module(f"speclogs.report.{_LAZY[name]}"), name)


def render(comparison, fmt: str) -> str:  # noqa: ANN001
    """The report as text in one format: 'json', 'md', 'html' or 'text' (the terminal report without colour)."""
    if fmt != "text":
        return __getattr__({"json": "render_json", "md": "render_markdown", "html": "render_html"}[fmt])(comparison)
    import io

    from speclogs.console import make_console

    out = io.StringIO()
    __getattr__("render_terminal")(comparison, make_console(file=out, width=160))
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
