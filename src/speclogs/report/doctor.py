"""Render `speclogs doctor`'s findings: a block per cell, command line or run (terminal), or one JSON list."""

from __future__ import annotations

import json
from collections.abc import Sequence

from speclogs.doctor import DoctorFinding

Checked = Sequence[tuple[str, Sequence[DoctorFinding]]]   # (what was checked: cell, run or command line, its findings)
_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def doctor_json(checked: Checked) -> str:
    """Every finding as {subject, code, severity, message, fix, source}, in one JSON list."""
    return json.dumps([{"subject": subject, **finding.to_dict()} for subject, found in checked for finding in found],
                      indent=1)


def render_doctor(checked: Checked, console) -> None:  # noqa: ANN001 - a rich Console from speclogs.console
    from rich.text import Text

    for subject, found in checked:
        console.print(Text(f"{subject}: " + (f"{len(found)} finding(s)" if found else "no finding"), style="bold"))
        for finding in found:
            line = Text("  ")
            line.append(f"{finding.severity:<7} ", style=_STYLE[finding.severity])
            line.append(f"{finding.code}: {finding.message}")
            console.print(line, soft_wrap=True)
            console.print(Text(f"          fix: {finding.fix}\n          at:  {finding.source}"), soft_wrap=True)
