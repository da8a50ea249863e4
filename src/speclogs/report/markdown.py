"""`--format md`: report.text's sections as GitHub-flavoured Markdown. Every string from the data is escaped (a glob
such as `baseline_*` or a name such as `exp[red]1` shows as typed, never as emphasis, a link or HTML) and redacted."""

from __future__ import annotations

import re

from speclogs.redact import redact_text
from speclogs.report.text import Section, sections

_SPECIAL = re.compile(r"([\\`*\[\]<>|~#])")
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_escape(value: str) -> str:
    """`value` as literal Markdown text (one line): backslash before every character Markdown could read as syntax;
    underscores only where they could start or end emphasis (not inside snake_case words)."""
    escaped = _SPECIAL.sub(r"\\\1", redact_text(str(value)).replace("\n", " "))
    return _EDGE_UNDERSCORE.sub(r"\\_", escaped)


def md_sections(sections: list[Section]) -> str:
    e = md_escape
    out = []
    for s in sections:
        if s.kind == "chart":
            continue
        body = [f"- {e(head)}" + "".join(f"\n  - {e(line)}" for line in details) for head, details in s.items]
        if s.header:
            body += ["| " + " | ".join(e(cell) for cell in row) + " |" for row in [s.header, ["---"] * len(s.header), *s.rows]]
        body += ([""] if s.after and body else []) + [f"- {e(line)}" for line in s.after]
        if s.kind == "note":   # folded: how the numbers were made, not what they say
            out += [f"<details><summary>{e(s.title)}</summary>", "", *body, "", "</details>", ""]
        else:
            out += [f"{'#' if s.kind == 'title' else '##'} {e(s.title)}", ""] + (body + [""] if body else [])
    return "\n".join(out)


def render_markdown(comparison) -> str:  # noqa: ANN001
    return md_sections(sections(comparison))
