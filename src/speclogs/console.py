"""Where text becomes a rich renderable: the one place that decides nothing in the user's data is markup.

Log lines, file names, run names and SQL values are full of brackets and colons that rich would read as
markup (`[rank1]:[W1130 10:19:01]` loses its `[rank1]`), emoji codes (`uvicorn.toml:100:` becomes 💯) or
highlighting. Every console speclogs prints to comes from `make_console` (markup, emoji and highlighting
off, so a plain str prints as it is), and every renderer that may be handed someone else's console wraps
its strings with `plain` (a `Text`, which rich never parses).
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.text import Text


def make_console(*, stderr: bool = False, width: int | None = None, file: Any = None) -> Console:
    """A console that prints strings literally: no markup, no emoji codes, no highlighting."""
    return Console(stderr=stderr, width=width, file=file, markup=False, emoji=False, highlight=False)


def report_console(*, stderr: bool = False) -> Console:
    """`make_console` for wide output: when not a terminal, $COLUMNS if set, else 160 (so piped tables do not fold
    at 80)."""
    console = make_console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():   # rich reads $COLUMNS itself
        return console
    return make_console(stderr=stderr, width=160)


def plain(value: object, style: str = "") -> Text:
    """`value` as literal text (never parsed as markup or emoji), optionally styled."""
    return Text(str(value), style=style)


def share_widths(least: list[int], most: list[int], room: int) -> list[int]:
    """Column widths within `room` characters: each what it needs for one line when all fit, else its least plus a
    share of the rest in proportion to what it would still need."""
    if sum(most) <= room:
        return list(most)
    spare = max(room - sum(least), 0)
    want = sum(m - n for n, m in zip(least, most)) or 1
    return [n + (m - n) * spare // want for n, m in zip(least, most)]
