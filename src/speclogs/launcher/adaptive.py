"""Adaptive launching: interleaved rounds until every planned comparison is decided, by a rule that keeps its error rate.

Repeated confidence intervals (Jennison & Turnbull 1989; 2000, ch. 9) with a Pocock-type constant boundary c over the
looks (one per round from the plan's `launches` to the budget's last round): P(|Z_k| ≥ c at some look) = α under H0,
by numerical integration. Each look's interval is d̂ ± t(ν; 1 − α′/2) · SE, α′ = 2(1 − Φ(c)), ν Welch's: they cover
the truth at every look at once, so stopping at any look keeps the coverage (docs/launcher.md, Adaptive launching).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

from speclogs.errors import PlanError
from speclogs.runrecord import read_run_json

METHOD = ("repeated confidence intervals with a Pocock-type constant boundary over the planned looks "
          "(Jennison & Turnbull 1989; 2000, ch. 9), Welch t at each look")
STATE_FILE = "adaptive.json"
_UNTIL = re.compile(r"^\s*ci_width\s*<=\s*([0-9]*\.?[0-9]+)\s*(%?)\s*$")
_NORMAL = NormalDist()


def parse_until(text: str) -> float:
    """'ci_width<=5%' → 0.05 (a bare number is a fraction)."""
    match = _UNTIL.match(text)
    if not match:
        raise PlanError(f"--until {text!r}: expected ci_width<=P%", hint="e.g. --until 'ci_width<=5%'")
    value = float(match.group(1)) / (100.0 if match.group(2) else 1.0)
    if not 0.0 < value < 1.0:
        raise PlanError(f"--until {text!r}: the width must lie between 0 and 100 %", hint="e.g. --until 'ci_width<=5%'")
    return value


def t_ppf(q: float, df: float) -> float:
    """Quantile of Student t. With θ = atan(x/√ν), F(x) = 1/2 + c·∫_0^θ cos^(ν−1)φ dφ: a bounded integrand (ν ≥ 1)
    that Simpson's rule integrates well; Newton steps on θ from the normal quantile, each adding its slice."""
    if math.isinf(df) or df > 1e7:
        return _NORMAL.inv_cdf(q)
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)

    def area(low: float, high: float, n: int) -> float:
        h = (high - low) / n
        return h / 3 * sum((1 if i in (0, n) else 4 if i % 2 else 2) * math.cos(low + i * h) ** (df - 1) for i in range(n + 1))

    theta = math.atan(_NORMAL.inv_cdf(q) / math.sqrt(df))
    cdf = 0.5 + scale * area(0.0, theta, 400)
    for _ in range(100):
        step = (cdf - q) / (scale * math.cos(theta) ** (df - 1))
        new = min(theta - step, (theta + math.pi / 2) / 2)   # never past π/2 (x = ∞)
        cdf += scale * area(theta, new, 40)
        theta = new
        if abs(step) < 1e-12:
            break
    return math.sqrt(df) * math.tan(theta)


_GRID = 61  # Simpson points per look (odd)


def _crossing_probability(c: float, looks: tuple[int, ...]) -> float:
    """P(|S_r| ≥ c √r at some look r) for S a standard random walk (one unit of information per round)."""
    def grid(r: int) -> tuple[list[float], list[float]]:
        half = c * math.sqrt(r)
        step = 2.0 * half / (_GRID - 1)
        weights = [step / 3.0 * (1 if i in (0, _GRID - 1) else 4 if i % 2 else 2) for i in range(_GRID)]
        return [-half + i * step for i in range(_GRID)], weights

    points, weights = grid(looks[0])
    sd = math.sqrt(looks[0])
    density = [math.exp(-0.5 * (s / sd) ** 2) / (sd * math.sqrt(2 * math.pi)) for s in points]
    for previous, look in zip(looks, looks[1:]):
        spread = math.sqrt(look - previous)
        new_points, new_weights = grid(look)
        mass = [w * f for w, f in zip(weights, density)]
        density = [sum(m * math.exp(-0.5 * ((s - p) / spread) ** 2) for m, p in zip(mass, points))
                   / (spread * math.sqrt(2 * math.pi)) for s in new_points]
        points, weights = new_points, new_weights
    return 1.0 - sum(w * f for w, f in zip(weights, density))


@lru_cache(maxsize=64)
def pocock_constant(looks: tuple[int, ...], alpha: float) -> float:   # c: P(cross at some look) = alpha under H0
    low, high = _NORMAL.inv_cdf(1.0 - alpha / 2.0), _NORMAL.inv_cdf(1.0 - alpha / (2.0 * len(looks)))
    for _ in range(40):
        mid = (low + high) / 2.0
        if _crossing_probability(mid, looks) > alpha:
            low = mid
        else:
            high = mid
        if high - low < 1e-5:
            break
    return (low + high) / 2.0


@dataclass(frozen=True)
class Design:   # what the error rate depends on; fixed for an out directory (recorded in adaptive.json)
    cells: tuple[str, ...]
    reference: str
    until: float            # decided when the RCI spans at most this (exp(high) − exp(low))
    max_launches: int       # budget, all cells
    first_look: int         # round of the first look (the plan's launches per cell, ≥ 2)
    confidence: float = 0.95
    min_effect: float = 0.0

    @property
    def last_look(self) -> int:
        return self.max_launches // len(self.cells)

    @property
    def looks(self) -> tuple[int, ...]:
        return tuple(range(self.first_look, self.last_look + 1))

    @property
    def boundary(self) -> float:
        return pocock_constant(self.looks, 1.0 - self.confidence)

    @property
    def nominal_level(self) -> float:   # two-sided level of each look's t interval
        return 2.0 * (1.0 - _NORMAL.cdf(self.boundary))

    def check(self, source: str) -> None:
        if self.reference not in self.cells:
            raise PlanError(f"{source}: adaptive reference {self.reference!r} is not a cell",
                            hint=f"cells: {', '.join(self.cells)}")
        if len(self.cells) < 2:
            raise PlanError(f"{source}: adaptive launching compares cells: the plan has one",
                            hint="add a second [[cells]] table")
        if self.first_look < 2:
            raise PlanError(f"{source}: adaptive launching needs launches ≥ 2 per cell before its first look",
                            hint="set launches = 2 (or more) in the plan")
        if self.last_look < self.first_look:
            raise PlanError(f"{source}: max_launches {self.max_launches} does not reach the first look "
                            f"({self.first_look} rounds × {len(self.cells)} cells = {self.first_look * len(self.cells)})",
                            hint="raise --max-launches")

    def to_dict(self) -> dict:
        return {**asdict(self), "looks": list(self.looks), "boundary": self.boundary,
                "nominal_level": self.nominal_level, "method": METHOD}


@dataclass(frozen=True)
class ComparisonStatus:
    cell_a: str
    cell_b: str
    n_a: int
    n_b: int
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    df: float | None
    status: str             # faster | slower | equivalent | narrow | open
    detail: str

    @property
    def decided(self) -> bool:
        return self.status != "open"

    def __str__(self) -> str:
        interval = f" ×{self.ratio:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}]" if self.ratio is not None else ""
        return f"{self.cell_b} vs {self.cell_a} {self.status}{interval} ({self.n_a} vs {self.n_b} launches, {self.detail})"


@dataclass(frozen=True)
class Look:
    round: int
    comparisons: tuple[ComparisonStatus, ...]

    @property
    def decided(self) -> bool:
        return all(c.decided for c in self.comparisons)


def compare_cells(design: Design, cell_b: str, a: list[float], b: list[float]) -> ComparisonStatus:
    """One comparison at a look: the RCI of log(B/A) from per-launch throughputs (tok/s), Welch's degrees of freedom."""
    if len(a) < 2 or len(b) < 2:
        return ComparisonStatus(design.reference, cell_b, len(a), len(b), None, None, None, None, "open",
                                "need ≥ 2 ok launches per cell")
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)   # squared standard errors
    point, se = statistics.fmean(lb) - statistics.fmean(la), math.sqrt(va + vb)
    denominator = va**2 / (len(la) - 1) + vb**2 / (len(lb) - 1)
    df = (va + vb) ** 2 / denominator if denominator else float("inf")
    half = t_ppf(1.0 - design.nominal_level / 2.0, df) * se
    low, high = point - half, point + half
    threshold = math.log1p(design.min_effect)
    width = math.exp(high) - math.exp(low)
    if low > threshold:
        status = "faster"
    elif high < -threshold:
        status = "slower"
    elif design.min_effect > 0 and -threshold <= low and high <= threshold:
        status = "equivalent"
    elif width <= design.until:
        status = "narrow"
    else:
        status = "open"
    detail = f"width {width:.1%} (until ≤ {design.until:.1%})"
    return ComparisonStatus(design.reference, cell_b, len(a), len(b), math.exp(point), math.exp(low), math.exp(high),
                            df, status, detail)


def look(design: Design, round_: int, values: dict[str, list[float]]) -> Look:
    return Look(round_, tuple(compare_cells(design, cell, values.get(design.reference, []), values.get(cell, []))
                              for cell in design.cells if cell != design.reference))


def launch_throughput(run_dir: Path) -> float | None:
    """tok/s of one ok launch: Σ completion tokens / Σ latency of its measured requests, each latency as the server
    measured it (SGLang's meta_info.e2e_latency: no client or HTTP scheduling in it) where it says, else the client's."""
    record = read_run_json(run_dir)
    if record is None or record.outcome != "ok":
        return None
    try:
        lines = (run_dir / "bench.jsonl").read_text().splitlines()
    except OSError:
        return None
    tokens = seconds = 0.0
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("warmup") or not isinstance(row.get("completion_tokens"), (int, float)):
            continue
        served = (row.get("meta_info") or {}).get("e2e_latency")
        latency = served if isinstance(served, (int, float)) and served > 0 else row.get("latency_s")
        if isinstance(latency, (int, float)) and latency > 0 and math.isfinite(latency):
            tokens += row["completion_tokens"]
            seconds += latency
    return tokens / seconds if seconds > 0 and tokens > 0 else None


def values_through(out_dir: Path, cells: tuple[str, ...], round_: int) -> dict[str, list[float]]:
    """Per cell, the throughputs of its ok launches of rounds ≤ round_."""
    found = {cell: [launch_throughput(out_dir / cell / str(launch)) for launch in range(1, round_ + 1)] for cell in cells}
    return {cell: [v for v in values if v is not None] for cell, values in found.items() if any(v is not None for v in values)}


def finish(out_dir: Path, design: Design, looks: list[Look], stopped: str) -> dict:
    """What the adaptive run did, written to adaptive.json: its design, every look, the launches spent and why it
    stopped: decided | budget | not yet (this call ended before a decision: run again with --resume)."""
    spent = sum(bool((record := read_run_json(path.parent)) and record.is_complete())
                for cell in design.cells for path in (out_dir / cell).glob("*/run.json"))
    if not looks:
        reason = f"no look yet: the first comes after round {design.first_look} ({spent} launch(es) so far)"
    else:
        parts = "; ".join(map(str, looks[-1].comparisons))
        what = {"decided": f"every comparison decided after round {looks[-1].round}",
                "budget": f"budget spent ({design.max_launches} launches, {design.last_look} rounds) without a decision",
                "not yet": f"not decided after round {looks[-1].round}; run again with --resume"}[stopped]
        reason = f"{what}, {spent} launches: {parts}"
    summary = {"design": design.to_dict(), "launches_spent": spent, "stopped": stopped, "reason": reason,
               "looks": [asdict(lk) for lk in looks]}
    (tmp := out_dir / f"{STATE_FILE}.tmp").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    tmp.replace(out_dir / STATE_FILE)
    return summary


def check_state(out_dir: Path, design: Design) -> None:
    """A resumed adaptive run must keep its design: the error rate depends on the planned looks."""
    path = out_dir / STATE_FILE
    try:
        previous = json.loads(path.read_text())["design"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return
    now = design.to_dict()
    changed = [k for k in asdict(design) if json.dumps(previous.get(k)) != json.dumps(now[k])]
    if changed:
        raise PlanError(f"{path}: this adaptive run was started with another design ("
                        + ", ".join(f"{k} {previous.get(k)!r} → {now[k]!r}" for k in changed) + ")",
                        hint="resume with the same --until / --max-launches / plan, or choose a new --out")
