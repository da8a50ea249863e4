"""Altair charts of a Comparison. Each function returns a chart (test them through `chart.to_dict()`), or None when the
comparison has nothing to show for it. Data are the analysis' results, reshaped into rows; nothing is estimated here."""

from __future__ import annotations

import math

import altair as alt
import polars as pl

from speclogs.analysis.results import Comparison

WIDTH = 560
PANEL = 300  # one launch's panel: two side by side fit an 800 px window with their axes
# Fixed colours, the same in every report: a phase is always the same colour whichever phases a report has.
PHASES = ["draft", "verify", "extend", "other", "gap", "decode step (not profiled)"]
PHASE_COLOURS = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#bab0ac", "#54a24b"]
ROW_STATES = ["steady", "first_after_idle", "startup", "before_health_200", "no_cuda_graph", "non_finite", "other_tp_rank"]
ROW_COLOURS = ["#4c78a8", "#f58518", "#e45756", "#b279a2", "#eeca3b", "#9d755d", "#bab0ac"]
# Tick values for ratio axes (log scale): Vega's own log ticks label only powers of ten, so a 0.6–1.4 axis shows "1"
# and nothing above it. The finest steps are dropped first when there are too many for the axis.
RATIO_TICKS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0, 1.01, 1.02, 1.05, 1.1, 1.2, 1.25, 1.5,
               2.0, 2.5, 3.0, 4.0, 5.0, 10.0]
RATIO_FINE = [(0.99, 1.01), (0.98, 1.02), (0.95, 1.05), (1.25,), (0.3, 2.5, 4.0)]
MAX_TICKS = 8
ACCEPT_BIN = 0.05


def _finite(value: float | None) -> float | None:
    """A bound as drawn: none where there is no interval (one launch per arm), so the point alone is drawn."""
    return value if value is not None and math.isfinite(value) else None


def ratio_ticks(low: float, high: float) -> list[float]:
    """Tick values for a log ratio axis over [low, high]: 1 and the nice ratios either side that fit."""
    ticks = [t for t in RATIO_TICKS if low <= t <= high]
    for fine in RATIO_FINE:
        if len(ticks) <= MAX_TICKS:
            break
        ticks = [t for t in ticks if t not in fine]
    if len(ticks) < 3:  # a very narrow axis: five evenly spaced values, rounded to what the labels can show
        ticks = sorted({round(low + (high - low) * i / 4, 4) for i in range(5)})
    return ticks


def _launch_panels(c: Comparison, points: list[dict], mark: alt.Chart, height: int) -> alt.FacetChart:
    """`mark` over `points` (rows with run_name and t_s), one panel per launch with its own time axis, on the launch's
    warm-up shade drawn from its first plotted row."""
    runs = {point["run_name"] for point in points}
    spans = [{"layer": "warmup", **row} for row in c.warmup_spans.filter(pl.col("run_name").is_in(runs)).to_dicts()]
    x = alt.X("t_s:Q", title="seconds since server start", scale=alt.Scale(zero=False, nice=False), axis=alt.Axis(tickCount=6))
    shade = alt.Chart().mark_rect(color="orange", opacity=0.15).transform_joinaggregate(
        first_t="min(t_s)", groupby=["run_name"]).transform_filter(alt.datum.layer == "warmup").transform_calculate(
        t_s="max(datum.t_start_s, datum.first_t)").encode(x=x, x2="t_end_s:Q")
    rows = mark.encode(x=x).transform_filter(alt.datum.layer == "row")
    return alt.layer(shade, rows, data=alt.Data(values=[{"layer": "row", **p} for p in points] + spans)).properties(
        width=PANEL, height=height).facet(facet=alt.Facet("run_name:N", title=None), columns=2).resolve_scale(x="independent")


def throughput_chart(c: Comparison) -> alt.Chart | None:
    """Per arm and source: the estimate (a large diamond) on its interval (a thick bar with end ticks), and each launch's
    own value (small open circles). The axis is not zero-based: its title says where it starts."""
    rows = []
    for arm in c.arms:
        for e in (arm.client, arm.server):
            if e is not None:
                rows.append({"layer": "estimate", "arm": arm.name, "source": e.source, "tok_s": e.value_tok_s,
                             "low": _finite(e.ci_low_tok_s), "high": _finite(e.ci_high_tok_s), "launches": e.n_launches})
                rows += [{"layer": "launch", "arm": arm.name, "source": e.source, "tok_s": v} for v in e.per_launch_tok_s]
    if not rows:
        return None
    values = [v for row in rows for v in (row["tok_s"], row.get("low"), row.get("high")) if v is not None and math.isfinite(v)]
    span = max(values) - min(values) or max(values) or 1.0
    start = max(min(values) - 0.05 * span, 0.0)
    end = max(values) + 0.05 * span
    scale = alt.Scale(domain=[start, end], nice=False, zero=False)
    data = alt.Data(values=rows)
    base = alt.Chart(data).encode(
        y=alt.Y("arm:N", title=None, sort=[a.name for a in c.arms], axis=alt.Axis(labelLimit=300)),
        yOffset=alt.YOffset("source:N"),
        color=alt.Color("source:N", title="source"),
    )
    estimate = alt.datum.layer == "estimate"
    x_title = f"throughput (tok/s) — axis starts at {start:,.0f}, not 0" if start > 0 else "throughput (tok/s)"
    bars = base.mark_rule(strokeWidth=5, opacity=0.45).encode(
        x=alt.X("low:Q", title=x_title, scale=scale, axis=alt.Axis(format=",.0f", tickCount=8)), x2="high:Q"
    ).transform_filter(estimate)
    caps = [base.mark_tick(thickness=2, size=14).encode(x=f"{end}:Q").transform_filter(estimate) for end in ("low", "high")]
    points = base.mark_point(filled=True, size=220, shape="diamond", stroke="black", strokeWidth=1).encode(
        x="tok_s:Q", tooltip=["arm:N", "source:N", alt.Tooltip("tok_s:Q", format=".1f", title="estimate"),
                              alt.Tooltip("low:Q", format=".1f"), alt.Tooltip("high:Q", format=".1f"), "launches:Q"]
    ).transform_filter(estimate)
    launches = base.mark_point(filled=False, size=45, strokeWidth=1.5, shape="circle", opacity=0.9).encode(
        x="tok_s:Q", tooltip=["arm:N", "source:N", alt.Tooltip("tok_s:Q", format=".1f", title="one launch")]
    ).transform_filter(alt.datum.layer == "launch")
    return alt.layer(bars, *caps, points, launches).properties(
        width="container", title=f"Throughput per arm: estimate (diamond) with its {c.confidence:.0%} interval (bar); "
                           "circles: single launches")


def effects_chart(c: Comparison) -> alt.Chart | None:
    rows = [{"effect": f"{e.name} ({e.source})", "kind": e.kind, "ratio": e.ratio, "low": _finite(e.ci_low),
             "high": _finite(e.ci_high), "verdict": e.verdict} for e in c.effects]
    rows += [{"effect": f"{r.arm_b} vs {r.arm_a} ({r.source})", "kind": "comparison", "ratio": r.ratio, "low": _finite(r.ci_low),
              "high": _finite(r.ci_high), "verdict": r.verdict} for r in c.comparisons]
    if not rows:
        return None
    data = alt.Data(values=rows)
    order = [row["effect"] for row in rows]
    low = min([1.0] + [row[k] for row in rows for k in ("low", "ratio") if row[k] and row[k] > 0])
    high = max([1.0] + [row[k] for row in rows for k in ("high", "ratio") if row[k]])
    x_scale = alt.Scale(type="log", domain=[low / 1.05, high * 1.05], nice=False)
    x_axis = alt.Axis(values=ratio_ticks(low / 1.05, high * 1.05), format="~g")
    base = alt.Chart(data).encode(y=alt.Y("effect:N", sort=order, title=None, axis=alt.Axis(labelLimit=360)),
                                  color=alt.Color("kind:N", title="kind"))
    one = alt.Chart(alt.Data(values=[{"x": 1.0}])).mark_rule(strokeDash=[4, 4], color="gray").encode(x="x:Q")
    rules = base.mark_rule(strokeWidth=2).encode(
        x=alt.X("low:Q", scale=x_scale, axis=x_axis, title="ratio (log scale; 1 = no effect)"), x2="high:Q")
    points = base.mark_point(filled=True, size=60).encode(
        x=alt.X("ratio:Q", scale=x_scale),
        tooltip=["effect:N", alt.Tooltip("ratio:Q", format=".3f"), alt.Tooltip("low:Q", format=".3f"),
                 alt.Tooltip("high:Q", format=".3f"), "verdict:N"])
    return (one + rules + points).properties(width="container", title="Effects and ratios (forest plot)")


def cycle_chart(c: Comparison) -> alt.Chart | None:
    # the stacked parts add up to the time per cycle: draft + verify + extend + other (+ the GPU idle gap when measured)
    rows = [{"arm": p.arm, "phase": p.phase, "ms": p.mean_ms, "share": p.share, "position": PHASES.index(p.phase)}
            for p in c.phases if p.phase not in ("cycle", "wall")]
    profiled = {p.arm for p in c.phases}
    rows += [{"arm": a.name, "phase": PHASES[-1], "ms": a.cycle_ms, "share": 1.0, "position": len(PHASES) - 1}
             for a in c.arms if a.name not in profiled and a.cycle_ms is not None]
    if not rows:
        return None
    present = [phase for phase in PHASES if any(row["phase"] == phase and row["ms"] for row in rows)]
    return alt.Chart(alt.Data(values=rows)).mark_bar().encode(
        y=alt.Y("arm:N", title=None, sort=[a.name for a in c.arms], axis=alt.Axis(labelLimit=300)),
        x=alt.X("ms:Q", title="time per decode step / speculative cycle (ms)", stack="zero", axis=alt.Axis(tickCount=8)),
        color=alt.Color("phase:N", sort=present,
                        scale=alt.Scale(domain=present, range=[PHASE_COLOURS[PHASES.index(p)] for p in present])),
        order=alt.Order("position:Q"),
        tooltip=["arm:N", "phase:N", alt.Tooltip("ms:Q", format=".3f"), alt.Tooltip("share:Q", format=".1%")],
    ).properties(width="container", title="Step-time breakdown: " + " / ".join(present))


def accept_chart(c: Comparison) -> alt.Chart | None:
    """Histogram per arm (rows) and source (columns), bins of 0.05 over the data's range padded by a bin either side:
    a constant accept length shows as one narrow bar at its value, and arms never stack on each other."""
    if c.accept_hist.is_empty():
        return None
    values = c.accept_hist["accept_len"]
    low = math.floor(float(values.min()) / ACCEPT_BIN) * ACCEPT_BIN - ACCEPT_BIN
    high = math.ceil(float(values.max()) / ACCEPT_BIN) * ACCEPT_BIN + 2 * ACCEPT_BIN
    extent = [round(max(low, 0.0), 2), round(high, 2)]
    arms = [a.name for a in c.arms]
    return alt.Chart(alt.Data(values=c.accept_hist.to_dicts())).mark_bar().encode(
        x=alt.X("accept_len:Q", title="accept length (tokens per verify step)",
                bin=alt.Bin(step=ACCEPT_BIN, extent=extent), scale=alt.Scale(domain=extent), axis=alt.Axis(format=".2f")),
        y=alt.Y("sum(count):Q", title="count", axis=alt.Axis(tickCount=3)),
        color=alt.Color("arm:N", sort=arms, legend=None),
        tooltip=["arm:N", "source:N", "accept_len:Q", "sum(count):Q"],
    ).properties(width=min(PANEL - 100, 480 // c.accept_hist["source"].n_unique()), height=70).facet(  # fits 800 px
        row=alt.Row("arm:N", title=None, sort=arms, header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=160)),
        column=alt.Column("source:N", title=None),
    ).resolve_scale(y="independent").properties(title="Accept-length distribution")


def request_accept_chart(c: Comparison) -> alt.Chart | None:
    """Per-request accept length per arm (one row per arm: requests per bin of 0.1), with the arm's verify-weighted
    mean as a rule: where it sits against the bars shows how much long requests weigh."""
    evidence = c.signals
    if evidence is None or not evidence.request_acceptance:
        return None
    bars = [{"layer": "bin", "arm": r.arm, "bin_start": start, "bin_end": round(start + 0.1, 6), "requests": count}
            for r in evidence.request_acceptance for start, count in r.histogram]
    means = [{"layer": "mean", "arm": r.arm, "mean": r.verify_weighted_mean} for r in evidence.request_acceptance]
    arms = [r.arm for r in evidence.request_acceptance]
    starts = [b["bin_start"] for b in bars]
    extent = [round(max(min(starts) - 0.1, 0.0), 2), round(max(starts) + 0.2, 2)]   # a bin of room either side
    data = alt.Data(values=bars + means)
    histogram = alt.Chart(data).transform_filter(alt.datum.layer == "bin").mark_rect().encode(
        x=alt.X("bin_start:Q", title="accept length per request (tokens per verify step)", scale=alt.Scale(domain=extent),
                axis=alt.Axis(format=".2f")),
        x2="bin_end:Q", y=alt.Y("requests:Q", title="requests", scale=alt.Scale(zero=True)), y2=alt.datum(0),
        color=alt.Color("arm:N", sort=arms, legend=None),
        tooltip=["arm:N", "bin_start:Q", "bin_end:Q", "requests:Q"])
    rule = alt.Chart(data).transform_filter(alt.datum.layer == "mean").mark_rule(strokeDash=[4, 2], color="black").encode(
        x="mean:Q", tooltip=["arm:N", alt.Tooltip("mean:Q", format=".3f", title="verify-weighted mean")])
    return alt.layer(histogram, rule).properties(width=WIDTH, height=70).facet(
        row=alt.Row("arm:N", title=None, sort=arms, header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=260)),
    ).properties(title="Per-request acceptance (dashed: verify-weighted mean)")


def timeline_chart(c: Comparison) -> alt.Chart | None:
    """Decode throughput over time, one panel per launch from its first decode row: the start-up before it (loading,
    CUDA-graph capture) is not drawn, so the panel's width goes to the decode rows."""
    if c.timeline.is_empty():
        return None
    points = c.timeline.with_columns(pl.col("excluded_reason").fill_null("steady").alias("state")).to_dicts()
    states = [state for state in ROW_STATES if any(point["state"] == state for point in points)]
    dots = alt.Chart().mark_point(filled=True, size=18).encode(
        y=alt.Y("gen_throughput_tok_s:Q", title="gen throughput (tok/s)", axis=alt.Axis(tickCount=5)),
        color=alt.Color("state:N", title="row",
                        scale=alt.Scale(domain=states, range=[ROW_COLOURS[ROW_STATES.index(s)] for s in states])),
        tooltip=["run_name:N", "t_s:Q", "gen_throughput_tok_s:Q", "accept_len:Q", "state:N"])
    return _launch_panels(c, points, dots, 150).properties(
        title="Decode throughput over time, from each launch's first decode row (shaded: before the first steady row)")


def startup_chart(c: Comparison) -> alt.Chart | None:
    """Start-up of each launch as one stacked bar (spawn → /health 200), a colour per phase in start-up order."""
    if c.startup is None or c.startup.phases.is_empty():
        return None
    rows = c.startup.phases.filter(pl.col("within_ready"))
    several = rows.group_by("run_name").agg(pl.col("launch_no").n_unique() > 1)["launch_no"].any()
    rows = rows.with_columns((pl.col("run_name") + (" · start " + pl.col("launch_no").cast(pl.Utf8) if several else ""))
                             .alias("launch"))
    phases = rows.sort("phase_order", "phase")["phase"].unique(maintain_order=True).to_list()
    return alt.Chart(alt.Data(values=rows.select("launch", "arm", "phase", "phase_order", "seconds").to_dicts())).mark_bar().encode(
        y=alt.Y("launch:N", title=None, sort=None, axis=alt.Axis(labelLimit=320)),
        x=alt.X("sum(seconds):Q", title="seconds from spawn to /health 200"),
        color=alt.Color("phase:N", sort=phases, title="phase", scale=alt.Scale(scheme="tableau20")),
        order=alt.Order("phase_order:Q"),
        tooltip=["arm:N", "launch:N", "phase:N", alt.Tooltip("seconds:Q", format=".2f")],
    ).properties(width=WIDTH, title=f"Start-up per launch (differs most between arms: {c.startup.differs_most or '–'})")


def accept_time_chart(c: Comparison) -> alt.Chart | None:
    """Accept length (and accept rate where the log prints it) over time: a drift shows here before it does in throughput."""
    if c.timeline.is_empty() or c.timeline["accept_len"].drop_nulls().is_empty():
        return None

    def panels(column: str, title: str, colour: str) -> alt.FacetChart:
        # a launch without the value (no speculation) gets no panel
        points = c.timeline.filter(pl.col(column).is_not_null()).select("run_name", "t_s", value=column).to_dicts()
        line = alt.Chart().mark_line(color=colour, point=alt.OverlayMarkDef(size=14, filled=True, color=colour)).encode(
            y=alt.Y("mean(value):Q", title=title, axis=alt.Axis(tickCount=5, format=".2f"), scale=alt.Scale(zero=False, padding=8)),
            tooltip=["run_name:N", "t_s:Q", alt.Tooltip("mean(value):Q", format=".3f", title=title)])
        return _launch_panels(c, points, line, 120)

    charts = [panels("accept_len", "accept length", "#4c78a8")]
    if not c.timeline["accept_rate"].drop_nulls().is_empty():
        charts.append(panels("accept_rate", "accept rate", "#f58518"))
    title = ("Accept length over time" + (" (top) and accept rate (bottom)" if len(charts) > 1 else "")
             + ", per launch; mean per second (shaded: before the first steady row)")
    return (alt.vconcat(*charts) if len(charts) > 1 else charts[0]).properties(title=title)


def positions_chart(c: Comparison) -> alt.Chart | None:
    """Acceptance of draft position k given positions 1…k−1 accepted, per arm (colour) and source (dash); positions no
    verify step reached are not drawn."""
    if c.draft_positions is None or c.draft_positions.filter(pl.col("acceptance").is_not_null()).is_empty():
        return None
    rows = c.draft_positions.filter(pl.col("acceptance").is_not_null())
    positions = list(range(1, int(rows["position"].max()) + 1))
    return alt.Chart(alt.Data(values=rows.to_dicts())).mark_line(point=alt.OverlayMarkDef(size=60, filled=True)).encode(
        x=alt.X("position:O", title="draft position k", sort=positions, scale=alt.Scale(domain=positions),
                axis=alt.Axis(labelAngle=0)),
        y=alt.Y("acceptance:Q", title="P(token k accepted | 1…k−1 accepted)", scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format=".0%", tickCount=5)),
        color=alt.Color("arm:N", sort=[a.name for a in c.arms]),
        strokeDash=alt.StrokeDash("source:N"),
        tooltip=["arm:N", "source:N", "position:O", alt.Tooltip("acceptance:Q", format=".1%"), "reached:Q", "accepted:Q",
                 alt.Tooltip("at_least:Q", format=".1%", title="P(accepted ≥ k)")],
    ).properties(width="container", height=220, title="Acceptance per draft position (conditional, EAGLE's n-α)")


def all_charts(c: Comparison) -> list[tuple[str, alt.Chart]]:
    """(id, chart) for every chart that has data, in report order; Vega drops labels that would collide."""
    builders = [("throughput", throughput_chart), ("effects", effects_chart), ("cycle", cycle_chart),
                ("accept", accept_chart), ("requests", request_accept_chart), ("timeline", timeline_chart),
                ("accepttime", accept_time_chart), ("positions", positions_chart), ("startup", startup_chart)]
    return [(name, chart.configure_axis(labelFontSize=12, titleFontSize=12, labelOverlap="greedy").configure_legend(
                labelFontSize=12, orient="top", labelLimit=300))
            for name, build in builders if (chart := build(c)) is not None]
