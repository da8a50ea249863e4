"""Altair charts of a Comparison. Each function returns a chart (test them through `chart.to_dict()`), or None when the
comparison has nothing to show for it. Data are the analysis' results, reshaped into rows; nothing is estimated here."""

from __future__ import annotations

import altair as alt

from speclogs.analysis.results import Comparison

WIDTH = 560


def throughput_chart(c: Comparison) -> alt.Chart | None:
    rows = []
    for arm in c.arms:
        for e in (arm.client, arm.server):
            if e is not None:
                rows.append({"arm": arm.name, "source": e.source, "tok_s": e.value_tok_s, "low": e.ci_low_tok_s,
                             "high": e.ci_high_tok_s, "launches": e.n_launches})
    if not rows:
        return None
    data = alt.Data(values=rows)
    base = alt.Chart(data).encode(
        y=alt.Y("arm:N", title=None, sort=[a.name for a in c.arms], axis=alt.Axis(labelLimit=300)),
        yOffset=alt.YOffset("source:N"),
        color=alt.Color("source:N", title="source"),
    )
    bars = base.mark_rule(strokeWidth=2).encode(x=alt.X("low:Q", title="throughput (tok/s)", scale=alt.Scale(zero=False)),
                                               x2="high:Q")
    points = base.mark_point(filled=True, size=70).encode(
        x="tok_s:Q", tooltip=["arm:N", "source:N", alt.Tooltip("tok_s:Q", format=".1f"), alt.Tooltip("low:Q", format=".1f"),
                              alt.Tooltip("high:Q", format=".1f"), "launches:Q"])
    return (bars + points).properties(width=WIDTH, title=f"Throughput per arm with {c.confidence:.0%} intervals")


def effects_chart(c: Comparison) -> alt.Chart | None:
    rows = [{"effect": f"{e.name} ({e.source})", "kind": e.kind, "ratio": e.ratio, "low": e.ci_low, "high": e.ci_high,
             "verdict": e.verdict} for e in c.effects]
    rows += [{"effect": f"{r.arm_b} vs {r.arm_a} ({r.source})", "kind": "comparison", "ratio": r.ratio, "low": r.ci_low,
              "high": r.ci_high, "verdict": r.verdict} for r in c.comparisons]
    if not rows:
        return None
    data = alt.Data(values=rows)
    order = [row["effect"] for row in rows]
    low = min([1.0] + [row["low"] for row in rows if row["low"] and row["low"] > 0])
    high = max([1.0] + [row["high"] for row in rows if row["high"]])
    x_scale = alt.Scale(type="log", domain=[low / 1.05, high * 1.05], nice=False)
    base = alt.Chart(data).encode(y=alt.Y("effect:N", sort=order, title=None, axis=alt.Axis(labelLimit=360)),
                                  color=alt.Color("kind:N", title="kind"))
    one = alt.Chart(alt.Data(values=[{"x": 1.0}])).mark_rule(strokeDash=[4, 4], color="gray").encode(x="x:Q")
    rules = base.mark_rule(strokeWidth=2).encode(x=alt.X("low:Q", scale=x_scale, title="ratio (log scale; 1 = no effect)"),
                                                x2="high:Q")
    points = base.mark_point(filled=True, size=60).encode(
        x=alt.X("ratio:Q", scale=x_scale),
        tooltip=["effect:N", alt.Tooltip("ratio:Q", format=".3f"), alt.Tooltip("low:Q", format=".3f"),
                 alt.Tooltip("high:Q", format=".3f"), "verdict:N"])
    return (one + rules + points).properties(width=WIDTH, title="Effects and ratios (forest plot)")


def cycle_chart(c: Comparison) -> alt.Chart | None:
    # the stacked parts add up to the time per cycle: draft + verify + extend + other (+ the GPU idle gap when measured)
    order = ["draft", "verify", "extend", "other", "gap", "decode step (not profiled)"]
    rows = [{"arm": p.arm, "phase": p.phase, "ms": p.mean_ms, "share": p.share} for p in c.phases
            if p.phase not in ("cycle", "wall")]
    profiled = {p.arm for p in c.phases}
    rows += [{"arm": a.name, "phase": "decode step (not profiled)", "ms": a.cycle_ms, "share": 1.0}
             for a in c.arms if a.name not in profiled and a.cycle_ms is not None]
    if not rows:
        return None
    for row in rows:
        row["position"] = order.index(row["phase"])
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("arm:N", title=None, sort=[a.name for a in c.arms]),
        x=alt.X("ms:Q", title="time per decode step / speculative cycle (ms)", stack="zero"),
        color=alt.Color("phase:N", sort=order),
        order=alt.Order("position:Q"),
        tooltip=["arm:N", "phase:N", alt.Tooltip("ms:Q", format=".3f"), alt.Tooltip("share:Q", format=".1%")],
    ).properties(width=WIDTH, title="Step-time breakdown (draft / verify / extend / other / GPU idle gap)")


def accept_chart(c: Comparison) -> alt.Chart | None:
    if c.accept_hist.is_empty():
        return None
    return alt.Chart(alt.Data(values=c.accept_hist.to_dicts())).mark_bar(opacity=0.8).encode(
        x=alt.X("accept_len:Q", title="accept length (tokens per verify step)", bin=alt.Bin(step=0.05)),
        y=alt.Y("sum(count):Q", title="count"),
        color=alt.Color("arm:N"),
        row=alt.Row("source:N", title=None),
        tooltip=["arm:N", "source:N", "accept_len:Q", "sum(count):Q"],
    ).properties(width=WIDTH, height=120, title="Accept-length distribution").resolve_scale(y="independent")


def timeline_chart(c: Comparison) -> alt.Chart | None:
    if c.timeline.is_empty():
        return None
    points = [{"layer": "row", **row} for row in c.timeline.with_columns(
        c.timeline["excluded_reason"].fill_null("steady").alias("state")).to_dicts()]
    spans = [{"layer": "warmup", **row} for row in c.warmup_spans.to_dicts()]
    data = alt.Data(values=points + spans)
    shade = alt.Chart().mark_rect(color="orange", opacity=0.15).encode(x="t_start_s:Q", x2="t_end_s:Q").transform_filter(
        alt.datum.layer == "warmup")
    dots = alt.Chart().mark_point(filled=True, size=18).encode(
        x=alt.X("t_s:Q", title="seconds since server start"),
        y=alt.Y("gen_throughput_tok_s:Q", title="gen throughput (tok/s)"),
        color=alt.Color("state:N", title="row", scale=alt.Scale(domain=[
            "steady", "first_after_idle", "startup", "before_health_200", "no_cuda_graph", "non_finite", "other_tp_rank"])),
        tooltip=["run_name:N", "t_s:Q", "gen_throughput_tok_s:Q", "accept_len:Q", "state:N"],
    ).transform_filter(alt.datum.layer == "row")
    return alt.layer(shade, dots, data=data).properties(width=WIDTH // 2, height=140).facet(
        facet=alt.Facet("run_name:N", title=None), columns=2
    ).resolve_scale(x="independent").properties(title="Decode throughput over time (shaded: before the first steady row)")


def all_charts(c: Comparison) -> list[tuple[str, alt.Chart]]:
    """(id, chart) for every chart that has data, in report order."""
    builders = [("throughput", throughput_chart), ("effects", effects_chart), ("cycle", cycle_chart),
                ("accept", accept_chart), ("timeline", timeline_chart)]
    return [(name, chart) for name, build in builders if (chart := build(c)) is not None]
