"""Wording for SGLang's own signals (speclogs.analysis.signals' evidence): (title, header, rows) tables of strings that
every report format renders the same way, and the lines of the answer. Formatting only."""

from __future__ import annotations

from speclogs.analysis.results import Comparison


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _agreement(flag: bool | None) -> str:
    return "–" if flag is None else ("yes" if flag else "NO")


def answer_lines(c: Comparison) -> list[str]:
    """One line per arm: the exact accept length (counters) next to the log lines' estimate."""
    return [f"{a.arm}: accept len {a.accept_len_counters:.3f} exactly from SGLang's counters ({a.windows} window(s)); "
            f"the Decode lines say {_f(a.accept_len_decode_lines)}"
            for a in (c.signals.arms if c.signals else []) if a.accept_len_counters is not None]


def signal_sections(c: Comparison) -> list[tuple[str, list[str], list[list[str]]]]:
    evidence = c.signals
    if evidence is None:
        return []
    sections = []
    if evidence.windows:
        sections.append((
            "Accept length: SGLang's counters (exact) vs the log lines, per benchmark window",
            ["arm", "run", "window", "Δ tokens", "Δ verify calls", "counters", "Decode lines (verify-weighted)",
             "lines", "requests (verify-weighted)", "requests", "agree"],
            [[w.arm, w.run_name, w.window, f"{w.generation_tokens:.0f}", f"{w.verify_calls:.0f}", _f(w.accept_len_counters),
              _f(w.accept_len_decode_lines), str(w.decode_rows), _f(w.accept_len_requests), str(w.requests),
              _agreement(w.agrees)] for w in evidence.windows]))
    if evidence.device_phases:
        sections.append((
            "Phase split from SGLang's device timer (forward_execution_seconds_total, GPU time)",
            ["arm", "run", "window", "category", "phase", "seconds", "share of cycle", "ms per cycle"],
            [[p.arm, p.run_name, p.window, p.category, p.phase, f"{p.seconds:.4f}",
              "–" if p.share is None else f"{p.share:.1%}", _f(p.ms_per_cycle)] for p in evidence.device_phases]))
    if evidence.request_acceptance:
        sections.append((
            "Per-request acceptance (one row per request; verify-weighted mean = what the counters measure)",
            ["arm", "requests", "verify-weighted mean", "unweighted mean", "min", "p10", "median", "p90", "max", "sources"],
            [[r.arm, str(r.n_requests), _f(r.verify_weighted_mean), _f(r.mean), _f(r.minimum, 2), _f(r.p10, 2),
              _f(r.median, 2), _f(r.p90, 2), _f(r.maximum, 2), ", ".join(r.sources)]
             for r in evidence.request_acceptance]))
    return sections
