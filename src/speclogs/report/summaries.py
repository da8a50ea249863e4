"""What the commands other than `report` print (ingest, check, sql, launch); every value reaches rich as plain text."""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Column, Table
from rich.text import Text

from speclogs.console import make_console, plain, share_widths


def render_check(result, console, *, shown: int) -> None:
    """What the content check found, on stderr: the totals, the files it could not re-read, the first losses."""
    verified = len(result.files) - len(result.unchecked)
    if verified:
        share = 100.0 * result.lines_kept / result.lines if result.lines else 100.0
        console.print(Text(f"content check: {result.lines_kept:,} of {result.lines:,} lines ({share:.2f} %) of {verified:,} "
                           "file(s) are in the database with everything they print",
                           style="green" if result.lines_lost == 0 else "red"))
    if result.tokens_redacted:
        console.print(Text(f"redacted: {result.tokens_redacted:,} token(s) on {result.lines_redacted:,} line(s) are held "
                           "as <redacted> (secrets; not counted as lost)"))
    for item in result.unchecked:
        console.print(Text(f"{item.source_file}: {item.note}", style="red"))
    for loss in result.losses[:shown]:
        console.print(Text(f"{loss.source_file}:{loss.line_no}: not stored: {' '.join(loss.missing[:12])}"
                           f"{' …' if len(loss.missing) > 12 else ''}  (rows in: {', '.join(loss.tables) or 'none'})"))
        console.print(Text(f"    {loss.text[:300]}", style="dim"))
    if result.lines_lost > min(shown, len(result.losses)):
        console.print(Text(f"… {result.lines_lost - min(shown, len(result.losses)):,} more line(s) lost something "
                           "(--show N, or --format json for all the examples kept)", style="yellow"))


def render_ingest_summary(summary, console) -> None:
    """The end-of-ingest summary on stderr: totals, rows per table, what was skipped and why, warnings."""
    head = Table.grid(padding=(0, 2))
    head.add_row("lake" if Path(summary.db_path).is_dir() else "database", plain(summary.db_path))
    head.add_row("files", f"{summary.files_ingested:,} ingested, {summary.files_unchanged:,} unchanged, "
                          f"{summary.files_skipped - summary.files_unchanged:,} skipped")
    head.add_row("lines", f"{summary.account.total_lines:,}: {summary.account.parsed_lines:,} parsed ({summary.parsed_pct:.1f} %), "
                          f"{summary.account.continuation_lines:,} continuation, {summary.account.unparsed_lines:,} unparsed")
    head.add_row("time", f"{summary.seconds:.2f} s, {summary.lines_per_s:,.0f} lines/s, {summary.mb_per_s:,.1f} MB/s")
    if summary.runs:
        shown = ", ".join(summary.runs[:8]) + (f", … ({len(summary.runs)} runs)" if len(summary.runs) > 8 else "")
        head.add_row("runs", plain(shown))
    console.print(head)
    if summary.account.rows:
        rows = Table("table", Column("rows", justify="right"), title="rows per table", title_justify="left", show_edge=False,
                     pad_edge=False)
        for table, count in sorted(summary.account.rows.items()):
            rows.add_row(plain(table), f"{count:,}")
        console.print(rows)
    skipped = sorted(summary.skipped.items(), key=lambda item: -item[1])
    notes = [f"skipped {count:,} file(s): {reason}" + (f"  (e.g. {summary.skipped_examples[reason]})"
                                                        if summary.skipped_examples.get(reason) else "") for reason, count in skipped]
    notes += [f"replaced {source_file}: {why}" for source_file, why in summary.replaced]
    for line in notes + drift_lines(summary.drift_notes) + warning_lines(summary.warnings):
        console.print(Text(line, style="yellow"))


def warning_lines(warnings: list[str], most: int = 10) -> list[str]:
    """At most `most` lines: every run rename first (a name now means another run), then the other warnings grouped
    by kind (their text with file, quoted names and numbers taken out), most frequent first: one example and a count."""
    renames = [w for w in warnings if w.startswith("run name '")]
    groups: dict[str, list[tuple[str, str]]] = {}
    for warning in (w for w in warnings if w not in renames):
        path, _, message = warning.partition(": ")
        if not message or not ("/" in path or "." in path):
            path, message = "", warning
        kind = re.sub(r"\d[\d.,]*", "N", re.sub(r"(?<!\w)'[^']*'(?!\w)", "'…'", message))
        groups.setdefault(kind, []).append((path, message))
    lines = [f"warning: {w}" for w in renames[:most - 1]]
    ordered = sorted(groups.values(), key=len, reverse=True)
    room = max(most - len(lines) - 1, 1)
    for items in ordered[:room]:
        path, message = items[0]
        if len(items) == 1:
            lines.append(f"warning: {path + ': ' if path else ''}{message}")
        else:
            lines.append(f"warning ×{len(items)}: {message}" + (f"  (e.g. {path})" if path else ""))
    left = len(renames[most - 1:]) + sum(len(items) for items in ordered[room:])
    if left:
        lines.append(f"… {left} more warning(s): SELECT source_file, warnings FROM files")
    return lines


DRIFT_KINDS = {"new_label": "batch-line labels no typed column took (kept in extra_fields)",
               "unmatched_line": "lines no grammar matched, by template",
               "unknown_message": "SGLang messages no specific grammar knows (kept as kind 'message'), by template",
               "near_miss": "lines that look like a pattern's but fail it"}


def drift_lines(notes) -> list[str]:  # noqa: ANN001 - the drift view's rows for the files just ingested
    """A line per kind of drift, its most frequent subjects first (SELECT * FROM drift has them all)."""
    lines = [f"drift: {note.source_file}: {note.detail}" for note in notes if note.kind == "missing_field"]
    for kind, what in DRIFT_KINDS.items():
        counted: Counter[str] = Counter()
        for note in (note for note in notes if note.kind == kind):
            counted[note.subject] += note.lines
        if top := counted.most_common():
            lines.append(f"drift: {what}: {sum(counted.values()):,} line(s): "
                         + ", ".join(f"{subject[:100]!r} ({count:,})" for subject, count in top[:4])
                         + (f", … {len(top) - 4} more" if len(top) > 4 else ""))
    return lines + (["drift: SELECT * FROM drift lists every one, per file, with an example line"] if lines else [])


def render_query_table(result, limit: int, *, first: bool = True, show_types: bool = False) -> None:
    """One result as a table on stdout: its first `limit` rows (all when 0), then how many more there are."""
    console = make_console()
    if not first:
        console.print()
    rows = result.head(limit + 1) if limit else [row for batch in result.batches() for row in batch]
    more = result.count() - limit if limit and len(rows) > limit else 0
    rows = rows[:limit] if more else rows
    table = Table(show_edge=False, pad_edge=False)
    cells = [[cell(value, type_name) for value, type_name in zip(row, result.types)] for row in rows]

    numeric_types = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
                     "UHUGEINT", "DOUBLE", "FLOAT", "DECIMAL")
    numeric = [t.upper().startswith(numeric_types) and not t.endswith("]") for t in result.types]
    most = [max([len(name), len(kind) if show_types else 0, *(len(row[i]) for row in cells)])
            for i, (name, kind) in enumerate(zip(result.columns, result.types))]
    # a number is never wrapped, nor a name or id (≤ 40 characters): long text gives up its width first
    values = [max((len(row[i]) for row in cells), default=0) for i in range(len(most))]
    least = [v if numeric[i] or v <= 40 else 8 for i, v in enumerate(values)]
    named = [max(n, min(len(name), 24), len(kind) if show_types else 0) for n, name, kind in zip(least, result.columns, result.types)]
    room = console.width - 3 * (len(most) - 1)
    # the column names whole where they fit, else the values; where even those do not fit, rich folds as it can
    fitting = next((choice for choice in (named, least) if sum(choice) <= room), None)
    widths = share_widths(fitting, most, room) if fitting else [None] * len(most)
    for index, (name, type_name) in enumerate(zip(result.columns, result.types)):
        header = plain(name) + plain("\n" + type_name.lower(), "dim") if show_types else plain(name)
        table.add_column(header, justify="right" if numeric[index] else "left", overflow="fold", width=widths[index])
    for row in cells:
        table.add_row(*(plain(value) for value in row))
    console.print(table)
    shown = len(rows) + more
    if more:
        console.print(f"… {more:,} more row{'s' if more != 1 else ''} ({shown:,} in all; --limit N shows N, --limit 0 all, "
                      "--format csv|json streams them)", style="dim")
    else:
        console.print(f"({shown:,} row{'s' if shown != 1 else ''})", style="dim")


def cell(value, type_name: str) -> str:
    """A value as the table shows it: floats to 15 significant digits (7 for FLOAT), as the duckdb CLI shows them,
    so binary noise (144.52499999999998) does not print."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.{7 if type_name == 'FLOAT' else 15}g}"
    return str(value)


@contextmanager
def progress_bar(flag: bool | None):  # noqa: ANN201
    """The ingest's progress callback: a bar on stderr (default: when stderr is a terminal), else None."""
    if flag is False or (flag is None and not sys.stderr.isatty()):
        yield None
        return
    progress = Progress(TextColumn("ingest", style="bold"), TextColumn("{task.description}", markup=False), BarColumn(),
                        DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                        console=make_console(stderr=True), transient=True)

    def update(event) -> None:  # noqa: ANN001 - speclogs.store's progress event
        if not event.show:
            return
        if not progress.tasks:
            progress.start()
            progress.add_task(event.current, total=event.total_bytes)
        progress.update(progress.task_ids[0], completed=event.done_bytes, total=event.total_bytes, description=event.current)

    try:
        yield update
    finally:
        if progress.tasks:
            progress.stop()


def render_rows(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Rows as a borderless table on stdout (200 columns wide when piped, so lines do not fold)."""
    table = Table(*header, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*(plain(value) for value in row))
    console = make_console()
    (console if console.is_terminal else make_console(width=200)).print(table)


def render_launch_summary(summary, console) -> None:
    table = Table(title=f"{summary.plan_name} → {summary.out_dir} (stopped: {summary.stopped})", title_justify="left")
    for column in ("run", "order", "outcome", "ready s", "median tok/s", "detail"):
        table.add_column(column, justify="right" if column in ("order", "ready s", "median tok/s") else "left")
    for r in summary.results:
        table.add_row(r.run_name, str(r.order_index), "complete (skipped)" if r.skipped else r.outcome,
                      "-" if r.ready_s is None else f"{r.ready_s:.1f}",
                      "-" if r.median_tok_s is None else f"{r.median_tok_s:.1f}", r.outcome_detail[:80])
    console.print(table)
    if summary.adaptive:
        console.print(f"adaptive ({summary.adaptive['design']['method']}): {summary.adaptive['reason']}",
                      highlight=False, markup=False, soft_wrap=True)
    if summary.pending:
        console.print(f"pending: {len(summary.pending)} launch(es): {', '.join(summary.pending)} — run again with --resume",
                      highlight=False)
