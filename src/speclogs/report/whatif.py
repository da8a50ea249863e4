"""`speclogs whatif` and the start-up breakdown as (title, header, rows) tables and lines."""

from __future__ import annotations


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1%}"


def whatif_sections(result) -> list[tuple[str, list[str], list[list[str]]]]:  # noqa: ANN001
    if result is None:
        return []
    unit = "client tok/s (single stream)" if result.unit == "client" else "decode tok/s (no bench requests)"
    sections = [(
        f"What if: predicted {unit} per setting (topk 1; {result.confidence:.0%} bootstrap interval over launches "
        "and cycles; * = acceptance or width extrapolated beyond the measured steps)",
        ["draft", "steps", "draft tokens", "predicted", "interval", "accept len", "cycle ms", "fastest in",
         "measured (launches)", "error", "role"],
        [[p.draft, str(p.speculative_num_steps) + ("*" if p.extrapolated else ""), str(p.speculative_num_draft_tokens),
          f"{p.throughput_tok_s:.1f}", f"[{p.low:.1f}, {p.high:.1f}]", f"{p.accept_len:.3f}", f"{p.cycle_ms:.3f}",
          f"{p.p_best:.0%}", "–" if p.measured_tok_s is None else f"{p.measured_tok_s:.1f} ({p.measured_launches})",
          _pct(p.error), "calibration" if p.calibration else ("check" if p.measured_tok_s is not None else "")]
         for p in result.predictions])]
    sections.append((
        "What if: the cycle model (ms; P(A ≥ k) = acceptance of draft position k, measured)",
        ["draft", "from runs", "timing", "steps", "cycles", "draft ms/step", "verify 1 token", "verify ms/token",
         "extend", "other", "idle", "wall", "no-spec step", "client overhead ms/token", "P(A ≥ k)", "tail ratio"],
        [[m.draft, ", ".join(m.source_runs), m.timing_source, str(m.steps), str(m.cycles),
          *(f"{v:.3f}" for v in (m.draft_step_ms, m.verify_1_ms, m.verify_slope_ms_per_token, m.extend_ms, m.other_ms,
                                 m.idle_ms, m.wall_ms, m.no_spec_step_ms, m.client_overhead_ms_per_token)),
          " ".join(f"{v:.3f}" for v in m.accept_at_least), f"{m.tail_ratio:.3f}"]
         for m in result.models]))
    return sections


def startup_sections(breakdown) -> list[tuple[str, list[str], list[list[str]]]]:  # noqa: ANN001
    """Mean seconds per phase and arm (phases in start-up order), the phase that differs most marked."""
    if breakdown is None or breakdown.arm_means.is_empty():
        return []
    arms = list(breakdown.ready_s)
    wide = breakdown.arm_means.pivot(on="arm", index=["phase", "phase_order"], values="mean_s").sort("phase_order", "phase")
    rows = [[row["phase"] + (" ← differs most" if row["phase"] == breakdown.differs_most else "")]
            + ["–" if row.get(arm) is None else f"{row[arm]:.2f}" for arm in arms] for row in wide.iter_rows(named=True)]
    rows.append(["to ready (Σ)"] + [f"{breakdown.ready_s[arm]:.2f}" for arm in arms])
    return [("Start-up: mean seconds per phase and arm, spawn → /health 200 (startup_phases; 'other' = ready_s − the rest)",
             ["phase", *arms], rows)]


def report_sections(c) -> list[tuple[str, list[str], list[list[str]]]]:  # noqa: ANN001
    """The report's start-up and what-if tables (none when the comparison has neither)."""
    launch_next = [("What to launch next (speclogs whatif)", ["answer"], [[line] for line in whatif_lines(c.whatif)])]
    return startup_sections(c.startup) + (launch_next if c.whatif is not None else []) + whatif_sections(c.whatif)


def whatif_lines(result) -> list[str]:  # noqa: ANN001
    """The answer: what to launch next, how sure; then the checks against measured settings and the notes."""
    if result is None:
        return []
    lines = list(result.recommendations)
    checks = [p for p in result.predictions if p.error is not None and not p.calibration]
    if checks:
        worst = max(checks, key=lambda p: abs(p.error))
        lines.append(f"model error on {len(checks)} measured setting(s) it did not see: "
                     + ", ".join(f"{p.draft} steps {p.speculative_num_steps} {_pct(p.error)}" for p in checks)
                     + f" (largest {_pct(worst.error)})")
    lines += [f"{m.draft}: cycle {m.cycle_regime}; verify {m.verify_regime}; acceptance beyond {m.steps} steps extrapolated "
              f"geometrically (tail ratio {m.tail_ratio:.3f}: unmeasured)" for m in result.models]
    return lines + [f"note: {n}" for n in result.notes]


def whatif_document(result) -> list:  # noqa: ANN001
    """`speclogs whatif`'s report as report.text sections: the answer lines, then the tables."""
    from speclogs.report.text import Section

    return [Section("What to launch next", items=[(line, []) for line in whatif_lines(result)]),
            *(Section(title, header=header, rows=rows) for title, header, rows in whatif_sections(result))]
