"""Where text becomes a rich renderable: nothing in the user's data is read as markup, emoji codes or a terminal
control sequence (`[rank1]:` would lose its brackets, `:100:` become 💯, an ESC in a file name recolour the terminal).
Every console comes from `make_console`; renderers handed someone else's console wrap strings with `plain`.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.text import Text

from speclogs.redact import redact_text

# C0 controls but newline and tab, and DEL, → their Unicode control pictures (one character each, so a Text's styles
# stay where they were); C1 controls → U+FFFD.
_CONTROL_PICTURES = {code: 0x2400 + code for code in range(32) if code not in (9, 10)}
_CONTROL_PICTURES |= {0x7F: 0x2421, **{code: 0xFFFD for code in range(0x80, 0xA0)}}


def escaped(text: str) -> str:
    """`text` as it may reach a terminal: secrets redacted, control characters (but newline and tab) made visible."""
    return redact_text(text).translate(_CONTROL_PICTURES)


class _Console(Console):
    """A Console whose strings (render_str: also table cells) and Text objects print their control characters as
    visible characters."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(_visible(item) for item in objects), **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(escaped(text), **kwargs)


def _visible(item: Any) -> Any:
    if isinstance(item, Text) and (shown := escaped(item.plain)) != item.plain:
        if len(shown) == len(item.plain):  # control characters only: the styles stay where they were
            item = item.copy()
            item.plain = shown
        else:
            item = Text(shown, style=item.style)
    return item


def make_console(*, stderr: bool = False, width: int | None = None, file: Any = None) -> Console:
    """A console that prints strings literally (no markup, emoji codes, highlighting or control characters)."""
    return _Console(stderr=stderr, width=width, file=file, markup=False, emoji=False, highlight=False)


def report_console(*, stderr: bool = False) -> Console:
    """`make_console` for wide output: when piped, $COLUMNS if set, else 160 (so tables do not fold at 80)."""
    console = make_console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():   # rich reads $COLUMNS itself
        return console
    return make_console(stderr=stderr, width=160)


def plain(value: object, style: str = "") -> Text:
    """`value` as literal text, optionally styled."""
    return Text(escaped(str(value)), style=style)


def share_widths(least: list[int], most: list[int], room: int) -> list[int]:
    """Column widths within `room`: each its most when all fit, else its least plus a share of the rest."""
    if sum(most) <= room:
        return list(most)
    spare = max(room - sum(least), 0)
    want = sum(m - n for n, m in zip(least, most)) or 1
    return [n + (m - n) * spare // want for n, m in zip(least, most)]
