"""What another speculative setting would give, predicted from the runs at hand (docs/whatif.md: the model, its
assumptions, its measured error). `whatif(tables, ...)` is pure; `whatif_for(con, selectors)` loads the rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from speclogs.analysis.load import IN_RUNS, RunTables, load_run_tables, resolve_arms, select
from speclogs.analysis.positions import REQUEST_HISTOGRAMS
from speclogs.analysis.signals import signal_evidence_for
from speclogs.analysis.steady import client_rows
from speclogs.errors import AnalysisError

RESAMPLES = 400
HOST_BOUND_IDLE_SHARE = 0.02   # a GPU idle this share of a cycle waits for the host: the host sets the cycle's length
MAX_STEPS = 8          # settings predicted: steps 0 … max(MAX_STEPS, measured steps + 2)
SEED = 20261206


@dataclass(frozen=True)
class CycleModel:
    draft: str
    source_runs: tuple[str, ...]         # the runs of the source setting it was fitted on
    timing_source: str                   # 'profiler' (spec_cycles) | 'device timer + decode lines'
    steps: int                           # the source setting's --speculative-num-steps
    cycles: int                          # profiled single-stream cycles used
    draft_step_ms: float
    verify_1_ms: float                   # the target's one-token forward (verify of width 1)
    no_spec_step_ms: float               # a decode step without speculation: the baseline's, else verify_1 + host
    verify_slope_ms_per_token: float
    extend_ms: float
    other_ms: float                      # the rest of the cycle (setup, gaps between phases)
    idle_ms: float                       # GPU idle between cycles (profiler gap_ms; device timer: wall − GPU time)
    wall_ms: float                       # wall time per cycle (decode lines' accept len / gen throughput, else the profiler)
    host_bound: float                    # 1.0: the GPU idles over HOST_BOUND_IDLE_SHARE of the cycle, waiting for the host
    client_overhead_ms_per_token: float  # 0 where the runs have no bench requests
    accept_at_least: tuple[float, ...]   # P(A ≥ k), k = 1 … steps
    tail_ratio: float                    # P(A ≥ k + 1) / P(A ≥ k) assumed beyond the measured steps
    verify_regime: str
    cycle_regime: str
    baseline_runs: tuple[str, ...]


@dataclass(frozen=True)
class Prediction:
    draft: str
    speculative_num_steps: int           # 0: no speculation
    speculative_num_draft_tokens: int
    speculative_eagle_topk: int
    throughput_tok_s: float
    low: float
    high: float
    accept_len: float                    # tokens per cycle
    cycle_ms: float
    p_best: float                        # share of resamples in which this setting is the draft's fastest
    extrapolated: bool                   # acceptance or verify width beyond what was measured
    measured_tok_s: float | None         # mean over the selected launches of this setting, if any
    measured_launches: int
    error: float | None                  # predicted / measured − 1
    calibration: bool                    # the measurement fed the model (the source setting, a baseline)


@dataclass(frozen=True)
class WhatIf:
    unit: str                            # 'client' (single-stream bench requests) or 'cycle' (decode only)
    confidence: float
    models: tuple[CycleModel, ...]
    predictions: tuple[Prediction, ...]  # per draft, fastest first
    recommendations: tuple[str, ...]
    notes: tuple[str, ...]


def _setting(args: dict[str, str]) -> tuple[int, int, int, str] | None:
    """(steps, draft tokens, topk, draft model) of a run's server_args; None without speculation."""
    def number(name: str, default: int) -> int:
        text = (args.get(name) or "").strip("'\"")
        return int(float(text)) if text.replace(".", "", 1).isdigit() else default

    algorithm = (args.get("speculative_algorithm") or "None").strip("'\"")
    steps = number("speculative_num_steps", 0)
    if algorithm in ("None", "", "null") or steps == 0:
        return None
    topk = number("speculative_eagle_topk", 1)
    return steps, number("speculative_num_draft_tokens", steps + 1), topk, (args.get("speculative_draft_model_path") or "?").strip("'\"")


def whatif_for(con: Any, selectors: Sequence[str], confidence: float = 0.95, *, tables: RunTables | None = None,
               evidence: Any = None) -> WhatIf:
    """`whatif` on the runs `selectors` name, with their rows and SGLang's own signals (unless the caller has them)."""
    arms = resolve_arms(con, list(selectors))
    run_ids = list(dict.fromkeys(run_id for ids in arms.values() for run_id in ids))
    if evidence is None:
        evidence = signal_evidence_for(con, {"runs": run_ids})
    names = dict(select(con, f"SELECT run_name, run_id FROM runs WHERE {IN_RUNS}", [run_ids]).iter_rows())
    device_ms = pl.DataFrame(
        [(names[p.run_name], p.phase, p.ms_per_cycle) for p in evidence.device_phases
         if p.ms_per_cycle is not None and p.run_name in names],
        schema={"run_id": pl.Utf8, "phase": pl.Utf8, "ms_per_cycle": pl.Float64}, orient="row")
    accept_hist = select(con, f"SELECT run_id, accepted::INTEGER AS accepted, steps::BIGINT AS cycles FROM ({REQUEST_HISTOGRAMS})",
                         [run_ids])
    return whatif(tables or load_run_tables(con, run_ids), confidence, device_ms=device_ms, accept_hist=accept_hist)


def _single_stream(decode: pl.DataFrame) -> dict[str, dict[str, float | None]]:
    """Per run, from its decode lines at one running request: tok/s, wall ms per cycle and accept len."""
    usable = (pl.col("gen_throughput_tok_s") > 0) & pl.col("accept_len").is_not_null()
    rows = decode.filter(pl.col("running_req") == 1).group_by("run_id").agg(
        pl.col("gen_throughput_tok_s").median().alias("tok_s"), pl.col("accept_len").mean(),
        (1000.0 * pl.col("accept_len") / pl.col("gen_throughput_tok_s")).filter(usable).median().alias("wall_ms"))
    return {row.pop("run_id"): row for row in rows.iter_rows(named=True)}


def whatif(tables: RunTables, confidence: float = 0.95, resamples: int = RESAMPLES, *,
           device_ms: pl.DataFrame | None = None, accept_hist: pl.DataFrame | None = None) -> WhatIf:
    """Fit a cycle model per draft on its most-steps setting with cycles (profiled, else rebuilt from `device_ms`:
    run_id, phase, ms_per_cycle and `accept_hist`: run_id, accepted, cycles); predict every topk-1 setting and no
    speculation; check against the other selected settings. Raises AnalysisError when no run has cycles."""
    args = {run_id: dict(zip(rows["name"], rows["value"]))
            for (run_id,), rows in tables.server_args.partition_by("run_id", as_dict=True).items()}
    names = dict(zip(tables.runs["run_id"], tables.runs["run_name"]))
    settings = {run_id: _setting(args.get(run_id, {})) for run_id in names}
    clients = client_rows(tables.bench.with_columns(pl.col("run_id").cast(pl.Utf8))).filter(pl.col("excluded_reason").is_null())
    single = _single_stream(tables.decode.with_columns(pl.col("run_id").cast(pl.Utf8)))
    profiled_cycles = tables.spec_cycles.with_columns(pl.col("run_id").cast(pl.Utf8)).filter(
        (pl.col("batch_size") == 1) & pl.col("accepted_tokens").is_not_null())
    profiled = set(profiled_cycles["run_id"].unique())
    rebuilt = _rebuilt_cycles([r for r, s in settings.items() if s and r not in profiled], single, device_ms, accept_hist)
    cycles = pl.concat([profiled_cycles.select(rebuilt.columns).cast(dict(rebuilt.schema)), rebuilt])
    with_cycles = set(cycles["run_id"].unique())
    drafts = sorted({s[3] for r, s in settings.items() if s and r in with_cycles})
    if not drafts:
        raise AnalysisError("no selected run has single-stream cycles: profiled (spec_cycles with bs=1), or SGLang's "
                            "device timer with per-request accept histograms",
                            hint="select a run launched under `python -m speclogs.profile` (plan cell `profile = true`), "
                                 "or with --enable-metrics, SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 and --export-metrics-to-file")
    unit = "client" if clients.height and set(clients["run_id"]) >= with_cycles else "cycle"
    # each launch's throughput in the unit predicted: Σ tokens / Σ seconds of its requests, else its decode lines'
    tok_s = (dict(clients.group_by("run_id").agg(pl.col("tokens").sum() / pl.col("seconds").sum()).iter_rows())
             if unit == "client" else {r: v["tok_s"] for r, v in single.items()})
    baselines = sorted(r for r, s in settings.items() if s is None and tok_s.get(r))
    base_step_ms = [1000.0 / v for r in baselines if (v := single.get(r, {}).get("tok_s"))]
    rng = np.random.default_rng(SEED)
    models, predictions, recommendations = [], [], []
    notes = ["topk > 1 is not predicted: a tree's acceptance per branch is not in the cycle records"]
    for draft in drafts:
        groups: dict[tuple[int, int, int], list[str]] = {}
        for run_id, s in settings.items():
            if s and s[3] == draft:
                groups.setdefault(s[:3], []).append(run_id)
        source = max((k for k in groups if set(groups[k]) & with_cycles),
                     key=lambda k: (bool(set(groups[k]) & profiled), k[0], k[2] == 1))
        if source[2] != 1:
            notes.append(f"{draft}: the source setting has topk {source[2]}; the chain model assumes topk 1")
        launches = [r for r in groups[source] if r in profiled] or [r for r in groups[source] if r in with_cycles]
        model, boot = _fit(draft, source[0], launches, cycles, tok_s if unit == "client" else {}, single, base_step_ms, names, baselines,
                           rng, resamples, "profiler" if launches[0] in profiled else "device timer + decode lines")
        models.append(model)
        measured = {k: runs for k, runs in groups.items() if k[2] == 1}
        if baselines:
            measured[(0, 0, 1)] = baselines
        predictions.extend(_predict(model, boot, measured, source, tok_s, confidence))
        ranked = [p for p in predictions if p.draft == draft]
        new = next((p for p in ranked if not p.measured_launches), None)
        recommendations.append(_recommendation(draft, ranked, new))
        measured_here = [p for p in ranked if p.measured_tok_s is not None]
        if len(measured_here) > 1:
            by_model = [p.speculative_num_steps for p in measured_here]
            by_runs = [p.speculative_num_steps for p in sorted(measured_here, key=lambda p: -p.measured_tok_s)]
            recommendations.append(
                f"{draft}: the measured settings (steps) fastest first: {by_runs} by the launches, {by_model} by the "
                f"model — {'the same order' if by_model == by_runs else 'a different order'}")
    return WhatIf(unit, confidence, tuple(models), tuple(predictions), tuple(recommendations), tuple(notes))


def _name(p: Prediction) -> str:
    return ("no speculation" if p.speculative_num_steps == 0 else
            f"--speculative-num-steps {p.speculative_num_steps} --speculative-num-draft-tokens "
            f"{p.speculative_num_draft_tokens} --speculative-eagle-topk 1")


def _recommendation(draft: str, ranked: list[Prediction], new: Prediction | None) -> str:
    """The fastest predicted setting(s), how sure (interval, share of resamples won), what to launch next — nothing
    when a measured setting is predicted as fast as any other."""
    best = ranked[0]
    tied = [p for p in ranked if p.throughput_tok_s >= best.throughput_tok_s * (1 - 1e-6)]
    said = (f"{draft}: fastest predicted is {_name(best)}: {best.throughput_tok_s:.0f} tok/s [{best.low:.0f}, "
            f"{best.high:.0f}], fastest in {sum(p.p_best for p in tied):.0%} of the resamples"
            + (f" (with steps {', '.join(str(p.speculative_num_steps) for p in tied[1:])}: they predict the same, "
               "the fewest steps is named)" if len(tied) > 1 else "")
            + ("; extrapolated beyond what was measured" if best.extrapolated else ""))
    measured = next((p for p in tied if p.measured_launches), None)
    if measured is not None:
        said += (f"; measured already (steps {measured.speculative_num_steps}: {measured.measured_tok_s:.0f} tok/s over "
                 f"{measured.measured_launches} launch(es)): no other start is predicted faster")
        if new is not None and new not in tied:
            said += (f"; the best setting not launched yet: {_name(new)} ({new.throughput_tok_s:.0f} tok/s "
                     f"[{new.low:.0f}, {new.high:.0f}])")
        return said
    return said + f"; next to launch: {_name(best)}"


def _fit(draft: str, steps: int, launches: list[str], cycles: pl.DataFrame, client_tok_s: dict[str, float],
         single: dict, base_step_ms: list[float], names: dict[str, str], baselines: list[str],
         rng: np.random.Generator, resamples: int, timing_source: str) -> tuple[CycleModel, dict[str, np.ndarray]]:
    """The point model and, per parameter, its bootstrap replicates (launches, then cycles within each)."""
    per_launch = []
    for run_id in launches:
        rows = cycles.filter(pl.col("run_id") == run_id)
        wall_ms, accept_len = (single.get(run_id, {}).get(key) for key in ("wall_ms", "accept_len"))
        # the first profiler version timed no gap between cycles: the decode lines' wall time less the profiled cycle
        gap_ms = 0.0 if wall_ms is None else max(0.0, wall_ms - float(rows["cycle_ms"].mean()))
        phases = np.column_stack([rows[c].fill_null(0.0).to_numpy() for c in ("draft_ms", "verify_ms", "extend_ms", "other_ms")]
                                 + [rows["gap_ms"].fill_null(gap_ms).to_numpy()])
        per_launch.append((phases, np.minimum(rows["accepted_tokens"].to_numpy(), steps),
                           1000.0 / client_tok_s[run_id] if client_tok_s else None, wall_ms, accept_len))
    base_ms = float(np.mean(base_step_ms)) if base_step_ms else None

    def estimate(picks: list[tuple]) -> dict[str, float | np.ndarray]:
        draft_ms, verify_ms, extend_ms, other_ms, idle_ms = np.concatenate([p[0] for p in picks]).mean(axis=0)
        accepted = np.concatenate([p[1] for p in picks])
        at_least = np.array([(accepted >= k).mean() for k in range(1, steps + 1)])
        means = [p[4] for p in picks]
        if all(m is not None for m in means) and at_least.sum() > 0:
            # the profiler samples every N-th cycle; the decode lines count every cycle: their mean sets the level
            at_least = np.clip(at_least * (float(np.mean(means)) - 1.0) / at_least.sum(), 0.0, 1.0)
        walls = [p[3] if p[3] is not None else p[0].sum(axis=1).mean() for p in picks]
        tokens = [p[4] if p[4] is not None else 1.0 + p[1].mean() for p in picks]
        overheads = [p[2] - w / t for p, w, t in zip(picks, walls, tokens) if p[2] is not None]
        wall_ms = float(np.mean(walls))
        verify_1 = verify_ms if base_ms is None else min(base_ms, verify_ms)
        previous = at_least[-2] if steps > 1 else 1.0
        return {"draft_step_ms": draft_ms / steps, "verify_1_ms": verify_1,
                "no_spec_step_ms": verify_1 + other_ms + idle_ms if base_ms is None else base_ms,
                "verify_slope_ms_per_token": (verify_ms - verify_1) / steps, "extend_ms": extend_ms,
                "other_ms": other_ms, "idle_ms": idle_ms, "wall_ms": wall_ms,
                "host_bound": float(idle_ms > HOST_BOUND_IDLE_SHARE * wall_ms),
                "client_overhead_ms_per_token": float(np.mean(overheads)) if overheads else 0.0,
                "accept_at_least": at_least, "tail_ratio": float(at_least[-1] / previous) if previous > 0 else 0.0}

    point = estimate(per_launch)
    replicates = []
    for _ in range(resamples):
        picks = [per_launch[i] for i in rng.integers(0, len(per_launch), len(per_launch))]
        replicates.append(estimate([(p[0][idx], p[1][idx], *p[2:]) for p in picks
                                    for idx in [rng.integers(0, len(p[1]), len(p[1]))]]))
    boot = {key: np.array([r[key] for r in replicates]) for key in point}
    verify_regime = ("memory-bound: verify linear in the tokens verified, from the baseline's decode step (1 token) to "
                     f"the measured verify ({steps + 1} tokens), extended on the same line" if base_ms is not None else
                     "flat: verify taken as measured for any width (no baseline selected to calibrate its slope)")
    cycle_regime = (f"host-bound (the GPU idles {point['idle_ms']:.2f} of {point['wall_ms']:.2f} ms a cycle waiting for "
                    "the host): fewer steps do not shorten the cycle, more steps lengthen it once the modelled GPU work "
                    "exceeds the measured cycle" if point["host_bound"] else
                    "GPU-bound: the measured cycle changes by the modelled change of its phases")
    model = CycleModel(draft, tuple(names[r] for r in launches), timing_source, steps, sum(len(p[1]) for p in per_launch),
                       **{k: float(v) for k, v in point.items() if k != "accept_at_least"},
                       accept_at_least=tuple(float(v) for v in point["accept_at_least"]), verify_regime=verify_regime,
                       cycle_regime=cycle_regime, baseline_runs=tuple(names[r] for r in baselines))
    return model, boot


def _rebuilt_cycles(run_ids: list[str], single: dict, device_ms: pl.DataFrame | None,
                    accept_hist: pl.DataFrame | None) -> pl.DataFrame:
    """spec_cycles-like rows (one per verify step) of unprofiled runs that have the device timer, per-request accept
    histograms and single-stream decode lines: the phases as the timer's mean per cycle, host = wall − GPU phases."""
    rows = []
    for run_id in run_ids:
        phases = {} if device_ms is None else dict(device_ms.filter(pl.col("run_id") == run_id).group_by("phase").agg(
            pl.col("ms_per_cycle").mean()).iter_rows())
        hist = None if accept_hist is None else accept_hist.filter((pl.col("run_id") == run_id) & (pl.col("cycles") > 0))
        wall_ms = single.get(run_id, {}).get("wall_ms")
        if "verify" not in phases or hist is None or not hist.height or wall_ms is None:
            continue
        gpu = [phases.get(name, 0.0) for name in ("draft", "verify", "extend")]
        accepted = np.repeat(hist["accepted"].to_numpy(), hist["cycles"].to_numpy())
        rows.append(pl.DataFrame({"run_id": run_id, "draft_ms": gpu[0], "verify_ms": gpu[1], "extend_ms": gpu[2],
                                  "other_ms": 0.0, "gap_ms": max(0.0, wall_ms - sum(gpu)), "cycle_ms": wall_ms,
                                  "accepted_tokens": accepted}))
    schema = {"run_id": pl.Utf8, "draft_ms": pl.Float64, "verify_ms": pl.Float64, "extend_ms": pl.Float64,
              "other_ms": pl.Float64, "gap_ms": pl.Float64, "cycle_ms": pl.Float64, "accepted_tokens": pl.Int64}
    return pl.concat([r.cast(schema) for r in rows]) if rows else pl.DataFrame(schema=schema)


def _tokens_and_cycle(p: dict[str, np.ndarray], steps: int, measured_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens per cycle and cycle ms at `steps`, for arrays of parameters (replicates)."""
    at_least = np.atleast_2d(p["accept_at_least"])
    tail = np.atleast_1d(p["tail_ratio"])
    tokens = 1.0 + at_least[:, :min(steps, measured_steps)].sum(axis=1)
    for k in range(measured_steps + 1, steps + 1):
        tokens = tokens + at_least[:, -1] * tail ** (k - measured_steps)
    if steps == 0:
        return tokens, np.atleast_1d(p["no_spec_step_ms"])

    def gpu_ms(s: int) -> np.ndarray:   # the cycle's phases without the idle between cycles
        return (p["draft_step_ms"] * s + p["verify_1_ms"] + p["verify_slope_ms_per_token"] * s + p["extend_ms"]
                + p["other_ms"])

    cycle = np.where(p["host_bound"] > 0, np.maximum(p["wall_ms"], gpu_ms(steps)),
                     p["wall_ms"] + gpu_ms(steps) - gpu_ms(measured_steps))
    return tokens, np.atleast_1d(cycle)


def _predict(model: CycleModel, boot: dict[str, np.ndarray], measured: dict[tuple[int, int, int], list[str]],
             source: tuple[int, int, int], tok_s: dict[str, float | None], confidence: float) -> list[Prediction]:
    point = {k: np.asarray(getattr(model, k)) for k in boot}
    candidates = range(0, max(MAX_STEPS, model.steps + 2) + 1)
    rates, boots = {}, {}
    shapes = {}   # steps → (tokens per cycle, cycle ms) of the point model
    for steps in candidates:
        tokens, cycle = _tokens_and_cycle(point, steps, model.steps)
        shapes[steps] = (float(tokens[0]), float(cycle[0]))
        rates[steps] = float(1000.0 / (model.client_overhead_ms_per_token + cycle[0] / tokens[0]))
        tokens, cycle = _tokens_and_cycle(boot, steps, model.steps)
        boots[steps] = 1000.0 / (boot["client_overhead_ms_per_token"] + cycle / tokens)
    stacked = np.column_stack([boots[s] for s in candidates])
    # settings that tie in a resample (a host-bound cycle is as long at any steps) share its win
    winners = stacked >= stacked.max(axis=1, keepdims=True) * (1.0 - 1e-9)
    best_share = (winners / winners.sum(axis=1, keepdims=True)).mean(axis=0)
    tail = (1.0 - confidence) / 2.0
    out = []
    for i, steps in enumerate(candidates):
        runs = measured.get((steps, steps + 1 if steps else 0, 1), [])
        values = [v for r in runs if (v := tok_s.get(r)) is not None]
        mean = float(np.mean(values)) if values else None
        low, high = np.quantile(boots[steps], [tail, 1.0 - tail])
        out.append(Prediction(
            model.draft, steps, steps + 1 if steps else 0, 1, rates[steps], float(low), float(high), *shapes[steps],
            float(best_share[i]),
            steps > model.steps or (steps == 0 and not model.baseline_runs), mean, len(values),
            None if mean is None else rates[steps] / mean - 1.0,
            steps == 0 and bool(model.baseline_runs) or steps == source[0]))
    return sorted(out, key=lambda p: (-round(p.throughput_tok_s, 6), p.speculative_num_steps))
