"""Terminal rendering of a `speclogs.probe.ProbeResult` with rich (renders only; computes nothing)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from speclogs.console import plain

_COLUMNS = ("collective", "kind", "size", "tokens", "median µs", "p10 µs", "p90 µs", "in graph µs", "algbw GB/s", "busbw GB/s")


def _size(message_bytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if message_bytes >= scale and message_bytes % scale == 0:
            return f"{message_bytes // scale} {unit}"
    return f"{message_bytes} B"


def _number(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def render_probe_rich(result: Any, console: Console) -> None:
    if not result.env_sets:
        return
    gpus = ", ".join(dict.fromkeys(result.gpu_names)) or "no GPU"
    console.print(Text.assemble(("NCCL probe", "bold"), f" {result.probe_id} on {result.hostname}: {result.world_size} × {gpus}; "
                                f"torch {result.torch_version}, NCCL {result.nccl_version}"))
    for warning in result.warnings:
        console.print(Text.assemble(("warning:", "bold yellow"), f" {warning}"))
    for env_set in result.env_sets:
        if env_set.outcome != "ok":
            console.print(Text.assemble((f"{env_set.name}: {env_set.outcome}", "bold red"), f" {env_set.message}"))
            for line in env_set.log_excerpt[-10:]:
                console.print(plain(f"  {line}"))
            continue
        settings = " ".join(f"{key}={value}" for key, value in sorted(env_set.env.items())) or "(none)"
        table = Table(title=plain(f"{env_set.name}: {settings}  ({env_set.wall_s:.1f} s)"), title_justify="left")
        for column in _COLUMNS:
            table.add_column(column, justify="left" if column in ("collective", "kind") else "right")
        for m in env_set.measurements:
            graph = _number(m.graph_latency_us, 1) or ("failed" if m.graph_error else "")
            table.add_row(m.collective, m.kind, _size(m.bytes), "" if m.tokens is None else str(m.tokens), _number(m.latency_us, 1),
                          _number(m.latency_us_p10, 1), _number(m.latency_us_p90, 1), graph, _number(m.algbw_gb_s, 2),
                          _number(m.busbw_gb_s, 2))
        console.print(table)
        failed = next((m.graph_error for m in env_set.measurements if m.graph_error), None)
        if failed:
            console.print(Text.assemble(("CUDA-graph timing failed:", "yellow"), f" {failed}"))
