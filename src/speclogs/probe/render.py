"""Terminal rendering of a ProbeResult with rich (renders only; computes nothing)."""

from __future__ import annotations

from speclogs.probe.runner import ProbeResult


def _size(message_bytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if message_bytes >= scale and message_bytes % scale == 0:
            return f"{message_bytes // scale} {unit}"
    return f"{message_bytes} B"


def _graph_cell(measurement) -> str:
    if measurement.graph_latency_us is not None:
        return f"{measurement.graph_latency_us:.1f}"
    return "failed" if measurement.graph_error else ""


def render_probe_rich(result: ProbeResult, console) -> None:
    from rich.table import Table
    from rich.text import Text

    from speclogs.console import plain

    if not result.env_sets:
        return
    console.print(Text.assemble(("NCCL probe", "bold"), f" {result.probe_id} on {result.hostname}: {result.world_size} × "
                                f"{', '.join(dict.fromkeys(result.gpu_names)) or 'no GPU'}; torch {result.torch_version}, "
                                f"NCCL {result.nccl_version}"))
    for warning in result.warnings:
        console.print(Text.assemble(("warning:", "bold yellow"), f" {warning}"))
    for env_set in result.env_sets:
        settings = " ".join(f"{key}={value}" for key, value in sorted(env_set.env.items())) or "(none)"
        if env_set.outcome != "ok":
            console.print(Text.assemble((f"{env_set.name}: {env_set.outcome}", "bold red"), f" {env_set.message}"))
            for line in env_set.log_excerpt[-10:]:
                console.print(plain(f"  {line}"))
            continue
        table = Table(title=plain(f"{env_set.name}: {settings}  ({env_set.wall_s:.1f} s)"), title_justify="left")
        for column in ("collective", "kind", "size", "tokens", "median µs", "p10 µs", "p90 µs", "in graph µs", "algbw GB/s",
                       "busbw GB/s"):
            table.add_column(column, justify="left" if column in ("collective", "kind") else "right")
        for measurement in env_set.measurements:
            table.add_row(
                measurement.collective, measurement.kind, _size(measurement.bytes),
                "" if measurement.tokens is None else str(measurement.tokens),
                f"{measurement.latency_us:.1f}", f"{measurement.latency_us_p10:.1f}", f"{measurement.latency_us_p90:.1f}",
                _graph_cell(measurement),
                "" if measurement.algbw_gb_s is None else f"{measurement.algbw_gb_s:.2f}",
                "" if measurement.busbw_gb_s is None else f"{measurement.busbw_gb_s:.2f}",
            )
        console.print(table)
        failed = next((m.graph_error for m in env_set.measurements if m.graph_error), None)
        if failed:
            console.print(Text.assemble(("CUDA-graph timing failed:", "yellow"), f" {failed}"))
