"""`--format md`: the report as GitHub-flavoured Markdown — the answer first, then the warnings ranked, then tables.

Every string from the data (arm and run names, warning text, values) is escaped: a glob such as `baseline_*` or a
name such as `exp[red]1` shows as typed, never as emphasis, a link or HTML. Secrets are redacted.
"""

from __future__ import annotations

import re

from speclogs.analysis.results import Comparison
from speclogs.redact import redact_text
from speclogs.report import text

_SPECIAL = re.compile(r"([\\`*\[\]<>|~#])")
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_escape(value: str) -> str:
    """`value` as literal Markdown text (one line): backslash before every character Markdown could read as syntax;
    underscores only where they could start or end emphasis (not inside snake_case words)."""
    escaped = _SPECIAL.sub(r"\\\1", redact_text(str(value)).replace("\n", " "))
    return _EDGE_UNDERSCORE.sub(r"\\_", escaped)


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_escape(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(comparison: Comparison) -> str:
    c = comparison
    e = md_escape
    out = [f"# {e(text.title(c))}", ""]
    if c.ranking:
        out += [f"## {e(text.ranking_title(c))}", "", md_table(text.RANKING_HEADER, text.ranking_rows(c)), ""]
    blocks = text.answer_blocks(c)
    if blocks:
        out += ["## Answer", ""]
        for head, details in blocks:
            out.append(f"- **{e(head)}**")
            out += [f"  - {e(line)}" for line in details]
    tiers = text.ranked_warnings(c)
    for tier, found in tiers:
        out += ["", f"## Warnings that {tier} ({len(found)})", ""]
        out += [f"- **{e(w.code)}**: {e(w.message)}" for w in found]
    if not tiers:
        out += ["", "## Warnings", "", "- none"]
    for _, title, header, rows, after in text.tables(c):
        out += ["", f"## {e(title)}", "", md_table(header, rows)]
        out += [""] + [f"- {e(line)}" for line in after] if after else []
    notes = [w for w in c.warnings if w.severity != "warning"]
    if notes:
        out += ["", f"<details><summary>{len(notes)} notes (how the numbers were made, settings, NCCL evidence)</summary>", ""]
        out += [f"- {e(w.code)}: {e(w.message)}" for w in notes] + ["", "</details>"]
    out += ["", "## Methods", ""] + [f"- **{e(k)}**: {e(v)}" for k, v in c.methods.items()]
    return "\n".join(out) + "\n"
