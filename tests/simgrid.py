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
