"""Terminal report: rich tables, warnings first.

Every string (arm and run names, warnings, values) reaches rich as `speclogs.console.plain` text, so the
report prints the same on any console, markup-enabled or not.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from speclogs.analysis.results import Comparison
from speclogs.console import plain, share_widths
from speclogs.redact import redact_text
from speclogs.report import text


def _text(value: object, style: str = "") -> Text:
    """Report text as it reaches the console: secrets redacted, never markup."""
    return plain(redact_text(str(value)), style)


# Columns a narrow terminal drops first (the rest of the table still answers; -o report.json keeps everything), then
# the rightmost ones: a value is never cut or folded to fit.
_DROP_FIRST = ("runs", "client per launch (min–max)", "server per launch (min–max)", "speculation", "detects ≥ (80 %)",
               "n (launches)", "A tok/s", "kind", "levels", "profiled cycles", "change")


def _min_width(values: list[str]) -> int:
    """The narrowest a column can be with no value split: its longest unbreakable word."""
    return max((len(word) for value in values for word in value.split()), default=1)


def fitted_widths(header: list[str], rows: list[list[str]], width: int) -> dict[int, int]:
    """{column index: width} of the columns to show within `width` (box borders and padding counted), each at least
    its longest word wide: low-priority columns go first, then the rightmost; the first column always stays. The
    room left is shared in proportion to what each column would need to print its values on one line."""
    columns = [[h, *(row[i] for row in rows)] for i, h in enumerate(header)]
    least = [_min_width(values) for values in columns]
    most = [max(least[i], *(len(v) for v in values[1:]), max(len(w) for w in values[0].split()) if values[0].split() else 1)
            for i, values in enumerate(columns)]
    keep = list(range(len(header)))
    order = [header.index(name) for name in _DROP_FIRST if name in header] + list(range(len(header) - 1, 0, -1))
    for index in order:
        if sum(least[i] + 3 for i in keep) + 1 <= width or len(keep) == 1:
            break
        if index in keep:
            keep.remove(index)
    shared = share_widths([least[i] for i in keep], [most[i] for i in keep], width - 1 - 3 * len(keep))
    return dict(zip(keep, shared))


def _fitted_table(title: str, header: list[str], rows: list[list[str]], width: int) -> Table:
    widths = fitted_widths(header, rows, width)
    dropped = [name for i, name in enumerate(header) if i not in widths]
    caption = f"not shown at {width} columns: {', '.join(dropped)} (a wider terminal or -o report.json has them)" if dropped else None
    table = Table(title=_text(title), title_justify="left", show_lines=False, header_style="bold",
                  caption=_text(caption, "dim") if caption else None, caption_justify="left")
    for i, column_width in widths.items():
        table.add_column(_text(header[i]), overflow="fold", width=column_width)
    for row in rows:
        table.add_row(*(_text(row[i]) for i in widths))
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
    for _, title, header, rows, after in text.tables(c):
        console.print(_fitted_table(title, header, rows, console.width))
        for line in after:
            console.print(_text(f"  • {line}"))
    notes = text.grouped_notes(c)
    if notes:
        console.print(Text("Notes (how the numbers were made)", style="bold"))
    for code, messages in notes:
        more = f" (+{len(messages) - 1} more like this: --format json lists them)" if len(messages) > 1 else ""
        console.print(Text.assemble(("  i ", "dim"), (f"[{code}] ", "dim"), _text(messages[0] + more, "dim")))
    console.print(_text("Methods: " + " ".join(c.methods[k] for k in ("estimate", "interval", "verdict")), "dim"))
