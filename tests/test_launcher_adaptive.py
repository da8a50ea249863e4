"""Adaptive launching: the stopping rule's maths (Pocock constants, t quantiles, error rate and coverage by simulation)
and the real launcher against the stand-in server playing arms of known throughput with launch-to-launch noise."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from conftest import run_cli
from speclogs.errors import PlanError
from speclogs.launcher import LaunchOptions, adaptive, launch_plan, parse_plan
from test_launcher import STANDIN, free_port


@pytest.mark.parametrize(("looks", "constant"), [(2, 2.178), (3, 2.289), (5, 2.413), (10, 2.555)])
def test_pocock_constants_match_the_published_table(looks, constant):
    # Pocock (1977) / Jennison & Turnbull (2000) Table 2.1, α = 0.05, equally spaced looks
    assert adaptive.pocock_constant(tuple(range(1, looks + 1)), 0.05) == pytest.approx(constant, abs=2e-3)


@pytest.mark.parametrize(("q", "df"), [(0.975, 1), (0.996, 1.7), (0.99, 4.2), (0.975, 30), (0.6, 2)])
def test_student_t_quantiles_agree_with_scipy(q, df):
    from scipy.stats import t

    assert adaptive.t_ppf(q, df) == pytest.approx(float(t.ppf(q, df)), rel=1e-7)


def _simulate(design: adaptive.Design, ratio: float, cv: float, sequences: int, seed: int):
    """Run the rule on simulated per-launch throughputs: (winner rate, coverage of the stopping look's RCI, mean
    launches spent, the cells)."""
    rng = random.Random(seed)
    winners = covered = spent = 0
    cell_b = design.cells[1]
    for _ in range(sequences):
        values = {design.reference: [], cell_b: []}
        for round_ in range(1, design.last_look + 1):
            values[design.reference].append(500.0 * math.exp(rng.gauss(0, cv)))
            values[cell_b].append(500.0 * ratio * math.exp(rng.gauss(0, cv)))
            if round_ < design.first_look:
                continue
            status = adaptive.look(design, round_, values).comparisons[0]
            if status.decided or round_ == design.last_look:
                winners += status.status in ("faster", "slower")
                covered += status.ci_low <= ratio <= status.ci_high
                spent += 2 * round_
                break
    return winners / sequences, covered / sequences, spent / sequences


DESIGN = adaptive.Design(cells=("a", "b"), reference="a", until=0.04, max_launches=16, first_look=2)


class _FixedLevel(adaptive.Design):
    """The same looks with each one's interval at the fixed-sample level (what repeated peeking does)."""

    def __init__(self, design: adaptive.Design):
        super().__init__(**{k: getattr(design, k) for k in design.__dataclass_fields__})

    @property
    def nominal_level(self) -> float:
        return 1.0 - self.confidence


def test_the_rule_keeps_its_error_rate_and_coverage_under_optional_stopping(capsys):
    """True ratio 1.00, looks after rounds 2…8, stopping as soon as a winner is named or the interval spans ≤ 4 %:
    false winners ≤ 5 % and the stopping look's interval covers the truth ≥ 95 % of the time. (Under a ratio of 1
    the rule is scale-free: the launch CV does not matter.) Peeking at a fixed-sample 95 % interval after every
    round instead names a false winner far more often."""
    false_winners, coverage, spent = _simulate(DESIGN, 1.0, 0.05, 3000, seed=7)
    peeking = _simulate(_FixedLevel(DESIGN), 1.0, 0.05, 600, seed=8)[0]
    with capsys.disabled():
        print(f"\nadaptive rule (Pocock RCI, looks {DESIGN.looks}, c = {DESIGN.boundary:.3f}), ratio 1.00: false winners "
              f"{false_winners:.1%}, coverage {coverage:.1%}, mean launches {spent:.1f}; peeking at fixed 95 % "
              f"intervals after every round: false winners {peeking:.1%}")
    assert false_winners <= 0.05 and coverage >= 0.95 and peeking > 0.08


def test_a_clear_difference_stops_early_and_is_named(capsys):
    winners, coverage, spent = _simulate(DESIGN, 1.20, 0.05, 1000, seed=3)
    with capsys.disabled():
        print(f"\nadaptive rule, CV 5 %, ratio 1.20: winner named {winners:.1%}, coverage {coverage:.1%}, "
              f"mean launches {spent:.1f} of at most {DESIGN.last_look * 2}")
    assert winners >= 0.95 and coverage >= 0.95 and spent <= 8


def test_until_parses_percent_and_fraction():
    assert adaptive.parse_until("ci_width<=5%") == pytest.approx(0.05)
    assert adaptive.parse_until(" ci_width <= 0.02 ") == pytest.approx(0.02)
    with pytest.raises(PlanError):
        adaptive.parse_until("width<5%")


def write_plan(tmp_path: Path, arms: dict[str, float], *, launches: int = 2, adaptive_table: str = "",
               launch_cv: float = 0.03) -> Path:
    cells = "".join(
        f'[[cells]]\nname = "{name}"\nfactors = {{ speed = "{name}" }}\n'
        f'args = ["--tok-s", "{rate}", "--launch-cv", "{launch_cv}", "--request-cv", "0.02"]\n'
        for name, rate in arms.items())
    text = f"""
name = "adaptive-standin"
command = ["{{python}}", "{STANDIN}"]
port = {free_port()}
health_poll_s = 0.05
progress_every_s = 5
stop_grace_s = 2
port_wait_s = 0.3
launches = {launches}
args = ["--ready-after", "0.2"]
{adaptive_table}
[bench]
requests = 4
max_new_tokens = 48
{cells}"""
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def _run(plan_path: Path, out: Path, **options):
    plan = parse_plan(plan_path.read_text(), plan_path)
    messages: list[str] = []
    return launch_plan(plan, LaunchOptions(out_dir=out, **options), progress=messages.append), messages


def test_an_adaptive_run_through_the_launcher_stops_by_itself_with_the_winner(tmp_path):
    """Two arms, 300 vs 450 tok/s (×1.5), 3 % launch noise: a look after round 2 or 3 names the winner, so 4–6 of the
    12 budgeted launches run; adaptive.json and run.json record the design and the looks."""
    plan = write_plan(tmp_path, {"slow": 300, "fast": 450})
    out = tmp_path / "out"
    summary, messages = _run(plan, out, until=0.05, max_launches=12)
    assert summary.stopped == "decided" and summary.pending == ()
    decision = summary.adaptive
    spent = decision["launches_spent"]
    assert spent in (4, 6) and decision["stopped"] == "decided"
    assert [r.run_name for r in summary.results] == ["slow_1", "fast_1", "slow_2", "fast_2", "slow_3", "fast_3"][:spent]
    final = decision["looks"][-1]["comparisons"][0]
    assert final["status"] == "faster" and final["ci_low"] <= 1.5 <= final["ci_high"]
    assert f"every comparison decided after round {spent // 2}, {spent} launches" in decision["reason"]
    state = json.loads((out / adaptive.STATE_FILE).read_text())
    assert state["design"]["looks"] == [2, 3, 4, 5, 6] and "Jennison & Turnbull" in state["design"]["method"]
    assert json.loads((out / "fast" / "1" / "run.json").read_text())["adaptive"]["max_launches"] == 12
    assert any(m.startswith(f"look after round {spent // 2}: fast vs slow faster") for m in messages)

    again, _ = _run(plan, out, until=0.05, max_launches=12, resume=True)  # resumed: the same look, nothing launched
    assert again.stopped == "decided" and all(r.skipped for r in again.results)
    with pytest.raises(PlanError, match="another design"):
        _run(plan, out, until=0.02, max_launches=12, resume=True)


def test_equal_arms_stop_when_the_interval_is_narrow_or_the_budget_is_spent(tmp_path):
    plan = write_plan(tmp_path, {"a": 400, "b": 400}, launch_cv=0.01)
    narrow, _ = _run(plan, tmp_path / "narrow", until=0.5, max_launches=12)
    assert narrow.stopped == "decided"
    assert narrow.adaptive["looks"][-1]["comparisons"][0]["status"] == "narrow"
    spent, _ = _run(plan, tmp_path / "spent", until=0.001, max_launches=4)
    assert spent.stopped == "max_launches" and spent.adaptive["stopped"] == "budget"
    assert spent.adaptive["launches_spent"] == 4 and len(spent.results) == 4
    assert spent.adaptive["looks"][-1]["comparisons"][0]["status"] == "open"


def test_the_plan_key_and_the_cli(tmp_path, db_path):
    plan = write_plan(tmp_path, {"slow": 300, "fast": 450},
                      adaptive_table='[adaptive]\nuntil = "ci_width<=5%"\nmax_launches = 8\nreference = "slow"\n')
    result = run_cli("launch", str(plan), "--out", str(tmp_path / "out"), "--db", str(db_path), "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["stopped"] == "decided" and summary["adaptive"]["design"]["max_launches"] == 8
    assert "adaptive (repeated confidence intervals" in result.stderr and "every comparison decided" in result.stderr
    report = run_cli("report", "-c", "slow_*", "fast_*", "--db", str(db_path), "--format", "json")
    assert report.returncode == 0, report.stderr
    document = json.loads(report.stdout)
    assert any(w["code"] == "adaptive_run" for w in document["warnings"])
    bad = write_plan(tmp_path, {"a": 300, "b": 400}, adaptive_table='[adaptive]\nuntil = "5%"\n')
    result = run_cli("launch", str(bad), "--out", str(tmp_path / "bad"), "--no-ingest")
    assert result.returncode == 1 and "ci_width<=P%" in result.stderr
