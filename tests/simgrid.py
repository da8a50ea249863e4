"""The simulation grid: two-arm comparisons with a known true ratio, as single-stream benchmarks produce them.

Each arm has L launches of n requests. The same prompt set is replayed in every launch and in both arms (the
launcher's seeded prompts), and prompts differ: request j runs at rate × prompt_j (prompt_j ~ exp N(0, σ_p), drawn
once per trial), so requests inside a launch differ a lot, but identically in every launch. A launch multiplies its
rate by exp N(0, cv) (launch-to-launch noise), and each request by a small residual exp N(0, σ_e).

Used by tests/test_analysis_grid.py (the statistics of speclogs.analysis.stats on this grid; figures printed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RATE_TOK_S = 500.0
TOKENS = 500.0  # every request generates max_new_tokens (ignore_eos)


@dataclass(frozen=True)
class Cell:
    launches: int       # per arm
    cv: float           # launch-to-launch coefficient of variation (log sd)
    ratio: float        # true B/A
    requests: int = 10
    prompt_sigma: float = 0.30
    residual_sigma: float = 0.02


def simulate(cell: Cell, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, seconds), each (trials, 2 arms, L, n): arm 0 = A (reference), arm 1 = B at cell.ratio × A's rate."""
    shape = (trials, 2, cell.launches, cell.requests)
    prompt = np.exp(rng.normal(0.0, cell.prompt_sigma, (trials, 1, 1, cell.requests)))
    launch = np.exp(rng.normal(0.0, cell.cv, (trials, 2, cell.launches, 1)))
    residual = np.exp(rng.normal(0.0, cell.residual_sigma, shape))
    arm = np.array([1.0, cell.ratio]).reshape(1, 2, 1, 1)
    rate = RATE_TOK_S * arm * prompt * launch * residual
    tokens = np.full(shape, TOKENS)
    return tokens, tokens / rate


def per_launch_logs(tokens: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """log(Σ tokens / Σ seconds) per launch: (..., L)."""
    return np.log(tokens.sum(axis=-1) / seconds.sum(axis=-1))


def welch(per_launch_a: np.ndarray, per_launch_b: np.ndarray, confidence: float = 0.95):
    """The reference: Welch's t interval on per-launch log means, (..., L) each → (point, low, high), natural-log units."""
    from scipy.stats import t as student_t

    la, lb = per_launch_a.shape[-1], per_launch_b.shape[-1]
    va = per_launch_a.var(axis=-1, ddof=1) / la
    vb = per_launch_b.var(axis=-1, ddof=1) / lb
    df = (va + vb) ** 2 / (va**2 / (la - 1) + vb**2 / (lb - 1))
    half = student_t.ppf(0.5 + confidence / 2, df) * np.sqrt(va + vb)
    point = per_launch_b.mean(axis=-1) - per_launch_a.mean(axis=-1)
    return point, point - half, point + half


GRID = tuple(Cell(launches, cv, ratio) for launches in (2, 3, 4, 5) for cv in (0.03, 0.05, 0.08)
             for ratio in (1.00, 1.05, 1.20))


# --- the trust table: what a user reads first, measured on known truths ----------------------------------------------
# `python tests/simgrid.py [TRIALS]` prints it; tests/test_analysis_grid.py asserts its targets on fewer trials.

def simulate_varied(cell: Cell, trials: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """As `simulate`, but every launch draws its own prompts (no replayed prompt set): within-launch noise is large."""
    shape = (trials, 2, cell.launches, cell.requests)
    prompt = np.exp(rng.normal(0.0, cell.prompt_sigma, shape))
    launch = np.exp(rng.normal(0.0, cell.cv, (trials, 2, cell.launches, 1)))
    arm = np.array([1.0, cell.ratio]).reshape(1, 2, 1, 1)
    rate = RATE_TOK_S * arm * prompt * launch
    tokens = np.full(shape, TOKENS)
    return tokens, tokens / rate


def _client_stat(s):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(s[:, [0]] / s[:, [1]])


def summarize(tokens: np.ndarray, seconds: np.ndarray):
    """One arm's client group from (L, n) arrays."""
    from speclogs.analysis import stats

    return stats.summarize_group([np.column_stack([tokens[i], seconds[i]]) for i in range(len(tokens))], _client_stat)


def compare_one(tokens: np.ndarray, seconds: np.ndarray, confidence: float = 0.95):
    """speclogs' verdict on arm 1 vs arm 0 of one trial ((2, L, n) arrays)."""
    from speclogs.analysis import stats

    result = stats.t_interval(stats.diff_parts(summarize(tokens[0], seconds[0]), summarize(tokens[1], seconds[1]), 0), confidence)
    return result, stats.verdict_for(result, enough=True)


WINNERS = ("faster", "slower")


def trust_table(trials: int = 400, seed: int = 20261206) -> list[tuple[str, float, str]]:
    """(measure, value, target) rows."""
    import math

    rng = np.random.default_rng(seed)
    rows: list[tuple[str, float, str]] = []
    coverage = {}
    false_winners = []
    for cell in GRID:
        tokens, seconds = simulate(cell, trials, rng)
        hits = []
        for t in range(trials):
            result, verdict = compare_one(tokens[t], seconds[t])
            hits.append(result.low <= math.log(cell.ratio) <= result.high)
            if cell.ratio == 1.0:
                false_winners.append((cell, verdict in WINNERS))
        coverage.setdefault(cell.launches, []).append(np.mean(hits))
    for launches, values in coverage.items():
        rows.append((f"coverage, {launches} launches/arm (min over cells)", float(np.min(values)), "≥ 0.93"))
    by_cell: dict = {}
    for cell, won in false_winners:
        by_cell.setdefault(cell, []).append(won)
    rows.append(("false winners, fixed design (max over null cells)", float(max(np.mean(v) for v in by_cell.values())), "≤ 0.05"))
    # adaptive stopping: the launcher looks after 2, 3, … 6 launches per arm by its own rule (speclogs.launcher.adaptive)
    # and stops at the first winner; the report then reads the launches the run stopped with, its design recorded
    from speclogs.analysis.compare import _ratio, sequential_confidence
    from speclogs.launcher.adaptive import Design, compare_cells

    design = Design(("A", "B"), "A", until=0.0001, max_launches=12, first_look=2)
    level = sequential_confidence({"a": design.to_dict(), "b": design.to_dict()}, ["a"], ["b"], 0.95)
    adaptive = []
    for cv in (0.03, 0.05, 0.08):
        tokens, seconds = simulate(Cell(6, cv, 1.0), trials, rng)
        won = []
        for t in range(trials):
            values = np.exp(per_launch_logs(tokens[t], seconds[t]))
            stop = next((n for n in design.looks if compare_cells(design, "B", list(values[0, :n]), list(values[1, :n])).decided),
                        design.last_look)
            a, b = (summarize(tokens[t, arm, :stop], seconds[t, arm, :stop]) for arm in range(2))
            won.append(_ratio("A", "B", "client", a, b, 0.95, 0.0, level).verdict in WINNERS)
        adaptive.append(np.mean(won))
    rows.append(("false winners after adaptive stopping (looks at 2..6 launches, max)", float(max(adaptive)), "≤ 0.05"))
    # one launch per arm: an interval printed is a claim; the share of 1v1 comparisons that print one
    tokens, seconds = simulate(Cell(1, 0.08, 1.0), trials // 4, rng)
    claims = []
    for t in range(trials // 4):
        a, b = (summarize(tokens[t, arm], seconds[t, arm]) for arm in range(2))
        claims.append(math.isfinite(_ratio("A", "B", "client", a, b, 0.95, 0.0).ci_low))
    rows.append(("1 vs 1 comparisons printing an interval", float(np.mean(claims)), "= 0"))
    # power against Welch on per-launch means, random prompts per launch, 1 % launch noise
    gaps, varied_coverage = [], []
    for launches in (2, 3, 5):
        for cv in (0.01, 0.03, 0.08):
            cell = Cell(launches, cv, 1.05 if cv == 0.01 else 1.10, requests=10, prompt_sigma=0.30)
            tokens, seconds = simulate_varied(cell, trials, rng)
            results = [compare_one(tokens[t], seconds[t]) for t in range(trials)]
            varied_coverage.append(np.mean([r.low <= math.log(cell.ratio) <= r.high for r, _ in results]))
            ours = np.mean([verdict == "faster" for _, verdict in results])
            welch_low = np.array([welch(per_launch_logs(tokens[t, 0], seconds[t, 0]),
                                        per_launch_logs(tokens[t, 1], seconds[t, 1]))[1] for t in range(trials)])
            gaps.append(ours - np.mean(welch_low > 0))
    rows.append(("coverage, random prompts per launch, CV 1/3/8 % (min)", float(min(varied_coverage)), "≥ 0.93"))
    rows.append(("power − Welch's power, random prompts per launch (min)", float(min(gaps)), "≥ −0.05"))
    for scenario in ("gradual", "slow ramp", "thermal", "stationary"):
        rows.append((f"warm-up bias of a launch's throughput, {scenario} (mean error)",
                     warmup_bias(scenario, trials // 4, rng), "|…| ≤ 0.02"))
    rows.append(("drift false alarms, stationary launches, prompts differ", drift_false_alarms(trials // 4, rng), "≤ 0.05"))
    return rows



# --- warm-up and drift on decode-row series (one launch: `requests` requests of `rows` decode rows each) ------------

def decode_series(rng: np.random.Generator, scenario: str, requests: int = 10, rows: int = 20,
                  row_sigma: float = 0.03, request_sigma: float = 0.05) -> tuple[np.ndarray, np.ndarray, float]:
    """(rates, request number per row, the steady mean rate) of one launch. Rows are AR(1) (ρ 0.5) around their
    request's level (prompts differ: each request's level is exp N(0, request_sigma)). Scenarios: 'stationary';
    'gradual' (CUDA graphs on, a slow start: 1 − 0.25·exp(−t/τ), τ = a fifth of the rows: 5 % slow uncut); 'slow ramp'
    (τ = a third of the rows: still 3 % slow halfway, beyond the cut the rule can make); 'thermal' (a 5 % slide
    over the run: no warm-up; the run's own mean is the truth)."""
    n = requests * rows
    noise = np.empty(n)
    noise[0] = rng.normal(0.0, row_sigma)
    shocks = rng.normal(0.0, row_sigma * np.sqrt(1 - 0.25), n)
    for i in range(1, n):
        noise[i] = 0.5 * noise[i - 1] + shocks[i]
    request = np.repeat(np.arange(requests), rows)
    level = np.exp(rng.normal(0.0, request_sigma, requests))[request]
    t = np.arange(n)
    shape = {"stationary": np.ones(n), "gradual": 1 - 0.25 * np.exp(-t / (n / 5)), "slow ramp": 1 - 0.25 * np.exp(-t / (n / 3)),
             "thermal": 1 - 0.05 * t / n}[scenario]
    rates = 100.0 * level * shape * np.exp(noise)
    truth = float(np.mean(100.0 * level * np.exp(noise) * (shape if scenario == "thermal" else 1.0)))
    return rates, request, truth


def warmup_bias(scenario: str, trials: int, rng: np.random.Generator) -> float:
    """Mean relative error of a launch's throughput after the warm-up rule cut its start."""
    from speclogs.analysis import stats

    errors = []
    for _ in range(trials):
        rates, _, truth = decode_series(rng, scenario)
        cut = stats.warmup_length(rates)
        errors.append(float(np.mean(rates[cut:])) / truth - 1.0)
    return float(np.mean(errors))


def drift_false_alarms(trials: int, rng: np.random.Generator) -> float:
    """Share of stationary launches (prompts differ) the drift test calls drifting (p < 0.01, change > 3 %)."""
    from speclogs.analysis import stats

    alarms = 0
    for _ in range(trials):
        rates, request, _ = decode_series(rng, "stationary")
        blocked = getattr(stats, "request_trend", None)
        trend = blocked(rates, request) if blocked else stats.trend_test(rates)
        alarms += bool(trend and trend.p_value < 0.01 and abs(trend.relative_change) > 0.03)
    return alarms / trials


if __name__ == "__main__":
    import sys

    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    for measure, value, target in trust_table(trials, int(sys.argv[2])) if len(sys.argv) > 2 else trust_table(trials):
        print(f"  {measure:<66} {value:>7.3f}   target {target}")
