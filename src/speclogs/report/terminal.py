"""Terminal report: rich tables, warnings first.

Every string (arm and run names, warnings, values) reaches rich as `speclogs.console.plain` text, so the
report prints the same on any console, markup-enabled or not.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from speclogs.analysis.results import Comparison
from speclogs.console import plain
from speclogs.redact import redact_text
from speclogs.report import signals, text, whatif


def _text(value: object, style: str = "") -> Text:
    """Report text as it reaches the console: secrets redacted, never markup."""
    return plain(redact_text(str(value)), style)


def _table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=_text(title), title_justify="left", show_lines=False, header_style="bold")
    for column in header:
        table.add_column(_text(column), overflow="fold")
    for row in rows:
        table.add_row(*(_text(cell) for cell in row))
    return table


def _aligned(rows: list[list[str]]) -> list[str]:
    """Rows as lines with columns padded to a common width (a table without borders: one line per row)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def _brief_tail(c: Comparison, console: Console) -> None:
    """--brief after the ranking: one line per comparison against the reference, then the warnings by code."""
    if not c.ranking:
        for r in text.preferred(c):
            console.print(_text(f"  {text.headline(r, c)}"))
    codes = [w.code for tier, found in text.ranked_warnings(c) for w in found]
    if codes:
        shown = ", ".join(dict.fromkeys(codes))
        console.print(Text.assemble((f"{len(codes)} warning(s): ", "bold yellow"), _text(shown)))
    else:
        console.print(Text("no warnings", style="bold green"))
    console.print(_text("the full report: the same command without --brief", "dim"))


def render_terminal(comparison: Comparison, console: Console, brief: bool = False) -> None:
    """Print the report to `console`: the ranking (fastest first), then — unless `brief` — the answer
    (verdict, ratio, interval, why, per-launch range), the warnings ranked
    by whether they can change it, then the tables (arms, comparisons, attribution, phases, effects, NCCL), notes,
    methods."""
    c = comparison
    console.print(_text(text.title(c), "bold"))
    if c.ranking:
        console.print(_text(text.ranking_title(c), "bold"))
        header, *rows = _aligned([text.RANKING_HEADER, *text.ranking_rows(c)])
        console.print(_text(f"  {header}", "dim"))
        for row in rows:
            console.print(_text(f"  {row}"))
    if brief:
        _brief_tail(c, console)
        return
    blocks = text.answer_blocks(c)
    if blocks:
        console.print(Text("\nAnswer", style="bold"))
        for head, details in blocks:
            console.print(_text(f"  • {head}"))
            for line in details:
                console.print(_text(f"      {line}", "dim" if line.startswith("per launch") else ""))
    tiers = text.ranked_warnings(c)
    for index, (tier, found) in enumerate(tiers):
        read = " — read before the numbers" if index == 0 else ""
        console.print(Text(f"\n{len(found)} warning(s) that {tier}{read}:", style="bold yellow"))
        for w in found:
            message = w.message if tier == text.WARNING_TIERS[0] else text.first_sentence(w.message, limit=300)
            console.print(Text.assemble(("  ! ", "bold yellow"), (f"[{w.code}] ", "yellow"), _text(message)))
    if not tiers:
        console.print(Text("\nno warnings", style="bold green"))
    console.print()
    console.print(_table("Throughput per arm (geometric mean over launches)", text.ARM_HEADER, text.arm_rows(c)))
    if c.comparisons:
        console.print(_table(f"Comparisons against {c.reference}", text.COMPARISON_HEADER, text.comparison_rows(c)))
        for note in text.test_notes(c):
            console.print(_text(f"  test — {note}", "dim"))
    if c.attributions:
        console.print(_table("Attribution of the server throughput ratio (contributions, log-additive)",
                             text.ATTRIBUTION_HEADER, text.attribution_rows(c)))
        phase_terms = text.phase_term_rows(c)
        if phase_terms:
            console.print(_table("Step-time term split by phase (from spec_cycles profiling)",
                                 ["B vs A", "phase", "contribution [CI]"], phase_terms))
        for line in text.counterfactual_lines(c):
            console.print(_text(f"  • {line}"))
    if c.phases:
        console.print(_table("Speculative cycle phases (spec_cycles)", text.PHASE_HEADER, text.phase_rows(c)))
    if c.effects:
        console.print(_table("Factorial effects on throughput", text.EFFECT_HEADER, text.effect_rows(c)))
    for title, header, rows in text.nccl_sections(c, brief=True) + signals.signal_sections(c) + whatif.report_sections(c):
        console.print(_table(title, header, rows))
    notes = text.grouped_notes(c)
    if notes:
        console.print(Text("Notes (how the numbers were made)", style="bold"))
    for code, messages in notes:
        more = f" (+{len(messages) - 1} more like this: --format json lists them)" if len(messages) > 1 else ""
        console.print(Text.assemble(("  i ", "dim"), (f"[{code}] ", "dim"), _text(messages[0] + more, "dim")))
    console.print(_text("Methods: " + " ".join(c.methods[k] for k in ("estimate", "interval", "verdict")), "dim"))
