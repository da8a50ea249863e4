"""A report as a list of Sections of strings (formatting only): terminal, Markdown and HTML each render this one list."""

from __future__ import annotations

import math
from typing import NamedTuple

from speclogs.analysis.power import MAX_LAUNCHES
from speclogs.analysis.results import UNSET, Attribution, Comparison, Estimate, RatioComparison, Term
from speclogs.analysis.stats import DEFAULT_EFFECT
from speclogs.report import signals, whatif


class Section(NamedTuple):
    """A heading, bullet items (a line and its sub-lines), a table, lines after it. `kind`: 'title', 'ranking',
    'warning', 'caveat', 'note', 'methods', or 'chart' (drawn by the HTML only: `key`; its items: why it has no data)."""

    title: str
    items: list[tuple[str, list[str]]] = []
    header: list[str] = []
    rows: list[list[str]] = []
    after: list[str] = []
    kind: str = ""
    key: str = ""


def pct(ratio: float) -> str:
    return f"{ratio - 1:+.1%}" if math.isfinite(ratio) else "–"


def fmt_interval(low: float, high: float, digits: int = 3) -> str:
    if not (math.isfinite(low) and math.isfinite(high)):
        return "(no interval)"
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def fmt_estimate(e: Estimate | None) -> str:
    return "–" if e is None else f"{e.value_tok_s:.1f} {fmt_interval(e.ci_low_tok_s, e.ci_high_tok_s, 1)}"


def fmt_p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_term(t: Term) -> str:
    return f"{pct(math.exp(t.log_ratio))} [{pct(math.exp(t.ci_low))}, {pct(math.exp(t.ci_high))}]"


def verdict_text(verdict: str, ratio: float, min_effect: float = 0.0) -> str:
    return {"faster": f"faster by {ratio - 1:.1%}", "slower": f"slower by {1 - ratio:.1%}",
            "equivalent": f"equivalent (within ±{min_effect or DEFAULT_EFFECT:.1%})"}.get(verdict, verdict)


def _launches_needed(r: RatioComparison, per_arm: str = "launches per arm") -> str:
    if r.n_a < 2 or r.n_b < 2:
        return "need ≥ 2 launches per arm"
    return f"±{r.target_effect:.0%} needs {r.launches_needed or f'more than {MAX_LAUNCHES}'} {per_arm}"


def needed_text(r: RatioComparison) -> str:
    """What an inconclusive comparison would need: the smallest effect its launches detect, the launches for ±target."""
    detects = math.isfinite(r.min_detectable_ratio) and r.n_a >= 2 and r.n_b >= 2
    return (f"these launches detect only ≥ ×{r.min_detectable_ratio:.3f}; " if detects else "") + _launches_needed(r)


def ranking_table(c: Comparison) -> Section:
    rows = []
    for place, rank in enumerate(c.ranking, 1):
        r = rank.vs_best
        against, verdict = ("fastest", "") if r is None else (f"×{r.ratio:.3f} {fmt_interval(r.ci_low, r.ci_high)}", r.verdict)
        if verdict in ("slower", "equivalent"):
            verdict += " (decided)"
        elif verdict == "inconclusive":
            verdict += f" — {_launches_needed(r, 'launches/arm')}"
        rows.append([str(place), rank.arm, f"{rank.value_tok_s:.1f}", against, verdict, str(rank.n_launches)])
    return Section(f"Ranking ({c.ranking[0].source} tok/s, fastest first; ratio to the fastest, {c.confidence:.0%} CI)",
                   header=["#", "arm", "tok/s", "× fastest [CI]", "verdict", "launches"], rows=rows, kind="ranking")


def headline(r: RatioComparison, c: Comparison) -> str:
    """The one line that answers a comparison; for an inconclusive one, what would decide it."""
    what = f"{r.arm_b} vs {r.arm_a}: {verdict_text(r.verdict, r.ratio, c.min_effect)}"
    if r.n_a < 2 or r.n_b < 2:
        spread = f"; within-launch spread ±{r.within_cv:.1%}" if math.isfinite(r.within_cv) else ""
        return (f"{what} — one launch per arm: ×{r.ratio:.3f}, no interval (launch-to-launch noise unknown{spread}), "
                f"{r.n_a} vs {r.n_b} launches ({r.source}); {needed_text(r)}")
    kind = "RCI (the adaptive run's repeated interval)" if "adaptive" in r.interval_covers else "CI"
    line = (f"{what} — ×{r.ratio:.3f}, {c.confidence:.0%} {kind} {fmt_interval(r.ci_low, r.ci_high)}, "
            f"p = {fmt_p(r.p_value)}, {r.n_a} vs {r.n_b} launches ({r.source})")
    return line + (f"; {needed_text(r)}" if r.verdict == "inconclusive" else "")


def why_text(a: Attribution, single: bool) -> str:
    """Acceptance and step time behind the server ratio; says when the server difference itself is not significant."""
    terms = {t.name: t for t in a.terms}

    def ratio(term: Term, sign: float = 1.0) -> str:
        point = math.exp(sign * term.log_ratio)
        if single or not (math.isfinite(term.ci_low) and math.isfinite(term.ci_high)):
            return f"×{point:.2f}"
        low, high = sorted((math.exp(sign * term.ci_low), math.exp(sign * term.ci_high)))
        return f"×{point:.2f} [{low:.2f}, {high:.2f}]"

    total = a.total
    settled = single or (math.isfinite(total.ci_low) and (total.ci_low > 0 or total.ci_high < 0))
    tail = ("" if settled else " — not significant: the server difference itself may be 0") + (
        " (one launch per arm: no intervals)" if single else "")
    accept = ("no speculation;" if a.accept_len_a == 1.0 and a.accept_len_b == 1.0 else
              f"accept len {a.accept_len_b:.2f} vs {a.accept_len_a:.2f} ({ratio(terms['acceptance'])}),")
    return (f"why (server): {accept} step time {a.cycle_ms_b:.2f} vs {a.cycle_ms_a:.2f} ms ({ratio(terms['step time'], -1.0)}) "
            f"→ throughput {ratio(total)}{tail}")


def fmt_range(e: Estimate | None, count: bool = True) -> str:
    """Per-launch values as min–max (like hyperfine's range), with the launch count."""
    if e is None or not e.per_launch_tok_s:
        return "–"
    low, high, n = min(e.per_launch_tok_s), max(e.per_launch_tok_s), len(e.per_launch_tok_s)
    return (f"{low:.1f}" if n == 1 else f"{low:.1f}–{high:.1f}") + (f" ({n} launch{'es' if n > 1 else ''})" if count else "")


def arm_table(c: Comparison) -> Section:
    rows = []
    for a in c.arms:
        launches = max((e.n_launches for e in (a.client, a.server) if e), default=0)
        runs = ", ".join(a.run_names[:4]) + (f" … ({len(a.run_names)})" if len(a.run_names) > 4 else "")
        rows.append([
            a.name, runs, a.speculative_algorithm or "none", fmt_estimate(a.client), fmt_range(a.client, count=False),
            fmt_estimate(a.server), fmt_range(a.server, count=False),
            f"{a.accept_len:.2f}" if a.accept_len is not None else "–",
            f"{a.cycle_ms:.2f}" if a.cycle_ms is not None else "–", str(launches),
        ])
    return _table("Throughput per arm (geometric mean over launches)", ["arm", "runs", "speculation", "client tok/s [CI]",
                  "client per launch (min–max)", "server tok/s [CI]", "server per launch (min–max)", "accept len", "step ms",
                  "launches"], rows)


# Warnings that can change the answer itself (the ratio measures something else than the arms' difference) come
# first; then those about how sure it is (the interval may be too narrow); codes not listed here count as the latter.
ANSWER_CODES = frozenset({
    "confounded_factors", "confounder", "confounder_env", "confounder_server_args", "confounder_version",
    "confounder_hardware", "confounder_model", "arm_inconsistent", "source_disagreement", "served_before_ready",
    "warmup_in_window", "accept_len_one", "mixed_versions", "env_unknown", "acceptance_below_reference",
})
WARNING_TIERS = ("can change the answer", "change how sure it is")


def _changes_answer(code: str) -> bool:
    return code in ANSWER_CODES or code.startswith("doctor_")   # a broken setup changes the answer


def ranked_warnings(c: Comparison) -> list[tuple[str, list]]:
    """[(tier, findings)] for the warning tiers that have findings, most consequential first."""
    found = [w for w in c.warnings if w.severity == "warning"]
    tiers = [(tier, [w for w in found if _changes_answer(w.code) == answer]) for tier, answer in zip(WARNING_TIERS, (True, False))]
    return [(tier, warnings) for tier, warnings in tiers if warnings]


def _concerns(arms: tuple[str, ...], arm_a: str, arm_b: str, reference: str) -> bool:
    """Does a finding about `arms` concern the comparison arm_b vs arm_a? A (reference, arm) pair names one comparison;
    other arm lists concern every comparison with one of their arms; no arms: all of them."""
    if not arms:
        return True
    if len(arms) == 2 and arms[0] == reference:
        return set(arms) == {arm_a, arm_b}
    return bool(set(arms) & {arm_a, arm_b})


def answer_blocks(c: Comparison) -> list[tuple[str, list[str]]]:
    """(headline, detail lines) per comparison against the reference, then the signals' answer lines."""
    arms = {a.name: a for a in c.arms}
    attributions = {(a.arm_a, a.arm_b): a for a in c.attributions}
    blocks: list[tuple[str, list[str]]] = []
    for r in preferred(c):
        a = attributions.get((r.arm_a, r.arm_b))
        details = [why_text(a, r.n_a < 2 or r.n_b < 2)] if a is not None else []
        ranges = [f"{name} {fmt_range(getattr(arms[name], r.source) if name in arms else None)}" for name in (r.arm_a, r.arm_b)]
        details.append(f"per launch ({r.source} tok/s): " + "; ".join(ranges))
        concerning = sorted({w.code for w in c.warnings if w.severity == "warning" and w.code in ANSWER_CODES
                             and _concerns(w.arms, r.arm_a, r.arm_b, c.reference)})
        if concerning:
            details.append("read first: " + ", ".join(concerning))
        blocks.append((headline(r, c), details))
    return blocks + [(line, []) for line in signals.answer_lines(c)]


def attribution_tables(c: Comparison) -> list[Section]:
    """The attribution, then its step-time term split by phase where profiled; the counterfactuals under the last."""
    names = ["acceptance", "batch size", "step time"]
    rows = [[f"{a.arm_b} vs {a.arm_a}", fmt_term(a.total), *(fmt_term(t) for n in names for t in a.terms if t.name == n),
             f"{a.accept_len_a:.2f} → {a.accept_len_b:.2f}", f"{a.cycle_ms_a:.2f} → {a.cycle_ms_b:.2f}"] for a in c.attributions]
    phase_terms = [[f"{a.arm_b} vs {a.arm_a}", t.name, fmt_term(t)] for a in c.attributions for t in a.phase_terms]
    counterfactuals = [f"{cf.text} {cf.value_tok_s:.2f} [{cf.ci_low_tok_s:.2f}, {cf.ci_high_tok_s:.2f}]"
                       + ("" if "accept len" in cf.text and "need" in cf.text else " tok/s")   # an accept length has no unit
                       for a in c.attributions for cf in a.counterfactuals]
    tables = [_table("Attribution of the server throughput ratio (acceptance × batch size ÷ step time; contributions, "
                     "log-additive)", ["B vs A", "throughput", *names, "accept len A→B", "step ms A→B"], rows,
                     [] if phase_terms else counterfactuals)]
    if phase_terms:
        tables.append(_table("Step-time term split by phase (from spec_cycles profiling)", ["B vs A", "phase",
                             "contribution [CI]"], phase_terms, counterfactuals))
    return tables


def _phase_share(phase: str, share: float) -> str:
    # draft + verify + extend + other = the GPU cycle (100 %); the idle gap comes after it, and wall = cycle + gap
    if phase == "gap":
        return f"+{share:.1%} after the cycle (GPU idle)"
    return "cycle + gap" if phase == "wall" else f"{share:.1%}"


def phase_table(c: Comparison) -> Section:
    rows = [[p.arm, p.phase, f"{p.mean_ms:.3f} {fmt_interval(p.ci_low_ms, p.ci_high_ms)}", _phase_share(p.phase, p.share),
             str(p.n_rows)] for p in c.phases]
    return _table("Speculative cycle phases (spec_cycles)", ["arm", "phase", "mean ms [CI]", "share of the GPU cycle",
                  "profiled cycles"], rows)


def effect_table(c: Comparison) -> Section:
    rows = [[e.name, e.kind, e.source, f"{e.low} → {e.high}" if e.low or e.high else "difference of simple effects",
             f"{e.ratio:.3f} {fmt_interval(e.ci_low, e.ci_high)}", pct(e.ratio), e.verdict] for e in c.effects]
    return _table("Factorial effects on throughput", ["effect", "kind", "source", "levels", "ratio [CI]", "change", "verdict"], rows)


def first_sentence(sentence: str, limit: int = 160) -> str:
    head = sentence.split(". ")[0]
    head = head if head.endswith(".") else head + "."
    return head if len(head) <= limit else head[: limit - 1] + "…"


def nccl_sections(c: Comparison, brief: bool = False) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) tables from speclogs.analysis.nccl's evidence."""
    evidence = c.nccl
    if evidence is None:
        return []
    sections = []
    if evidence.runs:
        rows = []
        for run in evidence.runs:
            settings = ", ".join(f"{s.name}={s.log_value if s.log_value is not None else s.env_value}"
                                 + ("" if s.agrees in (True, None) else " (log≠env!)") for s in run.settings)
            rows.append([run.run_name, str(run.nccl_version or "–"), str(run.info_lines), settings or "–",
                         str(run.coll_channels or "–"),
                         first_sentence(run.allreduce_verdict) if brief else run.allreduce_verdict])
        sections.append(("NCCL per run", ["run", "NCCL", "INFO lines", "settings (log, else env)", "coll channels",
                                          "all-reduce"], rows))
    if evidence.settings_diff:
        sections.append(("NCCL settings that differ", ["setting", "values"],
                         [[d.name, "; ".join(f"{run}: {UNSET if value is None else value}" for run, value in d.values)]
                          for d in evidence.settings_diff]))
    return sections


def preferred(c: Comparison) -> list[RatioComparison]:
    """One comparison row per pair: the client source when there is one (what users measure), else the server."""
    chosen = {}
    for r in c.comparisons:
        if (r.arm_a, r.arm_b) not in chosen or r.source == "client":
            chosen[(r.arm_a, r.arm_b)] = r
    return list(chosen.values())


def _table(title: str, header: list[str], rows: list[list[str]], after: list[str] | None = None) -> Section:
    return Section(title, header=header, rows=rows, after=after or [])


def _chart(key: str, title: str = "", empty: str = "", after: list[str] | None = None) -> Section:
    return Section(title, items=[(f"no data: {empty}", [])] if empty else [], after=after or [], kind="chart", key=key)


def sections(c: Comparison, brief: bool = True) -> list[Section]:
    """The whole report in order: title, ranking, answer, warnings (most consequential first), tables with the charts
    after the tables they illustrate, notes, methods. `brief`: the NCCL estimate without its assumptions."""
    out = [Section(f"speclogs report — {len(c.arms)} arm(s), reference {c.reference}, {c.confidence:.0%} intervals "
                   f"(Student t over launches{f', min effect {c.min_effect:.1%}' if c.min_effect > 0 else ''})", kind="title")]
    if c.ranking:
        out.append(ranking_table(c))
    if blocks := answer_blocks(c):
        out.append(Section("Answer", items=blocks))
    tiers = ranked_warnings(c)
    out += [Section(f"Warnings that {tier} ({len(found)})" + (" — read before the numbers" if index == 0 else ""),
                    items=[(f"[{w.code}] {w.message}", []) for w in found], kind="caveat" if index else "warning")
            for index, (tier, found) in enumerate(tiers)]
    if not tiers:
        out.append(Section("Warnings: none"))
    out += [arm_table(c), _chart("throughput", empty="no arm has a throughput estimate")]
    out += attribution_tables(c) if c.attributions else []
    out += ([phase_table(c)] if c.phases else []) + ([effect_table(c)] if c.effects else [])
    missing = [] if c.draft_positions is None or c.draft_positions.is_empty() else [
        a.name for a in c.arms if a.name not in set(c.draft_positions["arm"])]
    out += [_chart("effects", "Effects and ratios"),
            _chart("cycle", "Step time", "no decode step time or profiled cycle in these runs"),
            _chart("accept", "Acceptance", "no accept length in the decode rows (no speculative decoding?)"),
            _chart("requests", empty="no per-request acceptance (client requests or --export-metrics-to-file records)"),
            _chart("timeline", "Decode throughput and acceptance over time", "no decode rows"),
            _chart("accepttime", empty="no accept length over time (no speculative decoding in these runs)"),
            _chart("positions", "Acceptance per draft position",
                   "no profiled cycles at batch size 1 and no SGLang accept histograms in these runs",
                   [f"no data for {', '.join(missing)}: no profiled cycles at batch size 1 and no SGLang accept histograms"]
                   if missing else None)]
    out += [_table(title, header, rows) for title, header, rows
            in nccl_sections(c, brief) + signals.signal_sections(c) + whatif.report_sections(c)]
    out.append(_chart("startup"))
    groups: dict[str, list[str]] = {}
    for w in c.warnings:
        if w.severity != "warning":
            groups.setdefault(w.code, []).append(w.message)
    if groups:
        out.append(Section("Notes (how the numbers were made)", items=[(f"[{code}] {messages[0]}", messages[1:])
                                                                        for code, messages in groups.items()], kind="note"))
    return out + [Section("Methods", items=[(f"{k}: {v}", []) for k, v in c.methods.items()], kind="methods")]
