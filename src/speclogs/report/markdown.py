"""`--format md`: the report as GitHub-flavoured Markdown (warnings first)."""

from __future__ import annotations

from speclogs.analysis.results import Comparison
from speclogs.redact import redact_text
from speclogs.report import text


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_escape(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(comparison: Comparison) -> str:
    c = comparison
    out = [f"# {text.title(c)}", ""]
    warnings = [w for w in c.warnings if w.severity == "warning"]
    notes = [w for w in c.warnings if w.severity != "warning"]
    out.append("## Warnings")
    out += [f"- **{w.code}**: {w.message}" for w in warnings] or ["- none"]
    if notes:
        out += ["", f"<details><summary>{len(notes)} notes (how the numbers were made, settings, NCCL evidence)</summary>", ""]
        out += [f"- {w.code}: {w.message}" for w in notes] + ["", "</details>"]
    summary = text.summary_lines(c)
    if summary:
        out += ["", "## Summary", ""] + [f"- {line}" for line in summary]
    out += ["", "## Throughput per arm", "", md_table(text.ARM_HEADER, text.arm_rows(c))]
    if c.comparisons:
        out += ["", f"## Comparisons against {c.reference}", "", md_table(text.COMPARISON_HEADER, text.comparison_rows(c)), ""]
        out += [f"- test — {note}" for note in text.test_notes(c)]
    if c.attributions:
        out += ["", "## Attribution (server throughput ratio = acceptance × batch size ÷ step time)", "",
                md_table(text.ATTRIBUTION_HEADER, text.attribution_rows(c))]
        phase_terms = text.phase_term_rows(c)
        if phase_terms:
            out += ["", "Step-time term split by phase (spec_cycles):", "",
                    md_table(["B vs A", "phase", "contribution [CI]"], phase_terms)]
        out += [""] + [f"- {line}" for line in text.counterfactual_lines(c)]
    if c.phases:
        out += ["", "## Speculative cycle phases", "", md_table(text.PHASE_HEADER, text.phase_rows(c))]
    if c.effects:
        out += ["", "## Factorial effects", "", md_table(text.EFFECT_HEADER, text.effect_rows(c))]
    for title, header, rows in text.nccl_sections(c, brief=True):
        out += ["", f"## {title}", "", md_table(header, rows)]
    out += ["", "## Methods", ""] + [f"- **{k}**: {v}" for k, v in c.methods.items()]
    return redact_text("\n".join(out) + "\n")
