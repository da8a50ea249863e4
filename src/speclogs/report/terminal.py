"""Terminal report: report.text's sections as rich text and tables. Every string reaches rich as
`speclogs.console.plain` text, so the report prints the same on any console, markup-enabled or not."""

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
_DROP_FIRST = ("runs", "client per launch (min–max)", "server per launch (min–max)", "speculation", "kind", "levels",
               "profiled cycles", "change")


def fitted_widths(header: list[str], rows: list[list[str]], width: int) -> dict[int, int]:
    """{column index: width} of the columns to show within `width` (box borders and padding counted), each at least
    its longest word wide: low-priority columns go first, then the rightmost; the first column always stays. The
    room left is shared in proportion to what each column would need to print its values on one line."""
    columns = [[h, *(row[i] for row in rows)] for i, h in enumerate(header)]
    # the narrowest a column can be with no value split: its longest word; the widest it needs: its values on one line
    least = [max((len(word) for value in values for word in value.split()), default=1) for values in columns]
    most = [max(least[i], *(len(v) for v in values[1:])) for i, values in enumerate(columns)]
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


def render_sections(sections: list[text.Section], console: Console) -> None:
    """Print a report's sections, tables fitted to the console's width; a note's further lines are counted, not printed."""
    for index, s in enumerate(sections):
        if s.kind == "chart":
            continue
        if index and s.kind not in ("title", "ranking"):
            console.print()
        if s.header and s.kind != "ranking":
            console.print(_fitted_table(s.title, s.header, s.rows, console.width))
        else:
            console.print(_text(s.title, "bold yellow" if s.kind in ("warning", "caveat") else "bold"))
        for head, details in s.items:
            if s.kind in ("caveat", "methods"):   # the full text is in every other format
                head = text.first_sentence(head, limit=300)
            if s.kind in ("note", "methods"):
                more = f" (+{len(details)} more like this: --format json lists them)" if details else ""
                console.print(_text(f"  {head}{more}", "dim"))
                continue
            console.print(_text(f"  • {head}"))
            for line in details:
                console.print(_text(f"      {line}", "dim" if line.startswith("per launch") else ""))
        if s.kind == "ranking":   # a table without borders: one line per row, the header dim
            widths = [max(len(row[i]) for row in [s.header, *s.rows]) for i in range(len(s.header))]
            for row in [s.header, *s.rows]:
                line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                console.print(_text(f"  {line}", "dim" if row is s.header else ""))
        for line in s.after:
            console.print(_text(f"  • {line}"))


def render_terminal(comparison: Comparison, console: Console, brief: bool = False) -> None:
    """The report on `console`; `brief`: the ranking (else one line per comparison), then the warnings' codes."""
    c = comparison
    sections = text.sections(c)
    render_sections([s for s in sections if not brief or s.kind in ("title", "ranking")], console)
    if not brief:
        return
    if not c.ranking:
        for r in text.preferred(c):
            console.print(_text(f"  {text.headline(r, c)}"))
    codes = [w.code for tier, found in text.ranked_warnings(c) for w in found]
    if codes:
        console.print(Text.assemble((f"{len(codes)} warning(s): ", "bold yellow"), _text(", ".join(dict.fromkeys(codes)))))
    else:
        console.print(Text("no warnings", style="bold green"))
    console.print(_text("the full report: the same command without --brief", "dim"))
