"""Plan files: what a user gets for good plans (order, argv, env) and bad ones (file:line messages)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speclogs.errors import PlanError
from speclogs.launcher import LaunchOptions, launch_plan, load_plan, parse_plan, server_argv, server_env

ROOT = Path(__file__).resolve().parent.parent


def plan_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PlanError) as error:
        load_plan(path)
    return str(error.value)


def test_toml_syntax_error_names_file_and_line(tmp_path):
    message = plan_error(tmp_path, 'name = "x"\n\n[[cells]]\nname = "a\n')
    assert "bad.toml:4:" in message and "TOML syntax" in message


def test_unknown_key_in_a_cell_names_its_line(tmp_path):
    message = plan_error(tmp_path, '[[cells]]\nname = "a"\n\n[[cells]]\nname = "b"\nlaunchs = 3\n')
    assert "bad.toml:6:" in message and "unknown key 'launchs'" in message


def test_wrong_type_names_the_line_of_the_key(tmp_path):
    message = plan_error(tmp_path, 'port = "30000"\n[[cells]]\nname = "a"\n')
    assert "bad.toml:1:" in message and "port must be an integer" in message


def test_plan_without_cells_and_duplicate_cells(tmp_path):
    assert "no cells" in plan_error(tmp_path, 'name = "x"\n')
    assert "bad.toml:4:" in plan_error(tmp_path, '[[cells]]\nname = "a"\n[[cells]]\nname = "a"\n')


def test_unknown_only_cell_is_refused(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[[cells]]\nname = "a"\n')
    with pytest.raises(PlanError, match="unknown cell"):
        launch_plan(load_plan(path), LaunchOptions(out_dir=tmp_path / "o", only=("nope",)))


def test_interleaved_and_seeded_shuffle_orders(tmp_path):
    text = 'launches = 3\n[[cells]]\nname = "a"\n[[cells]]\nname = "b"\n[[cells]]\nname = "c"\nlaunches = 2\n'
    plan = parse_plan(text, tmp_path / "p.toml")
    assert [s.run_name for s in plan.launch_order()] == ["a_1", "b_1", "c_1", "a_2", "b_2", "c_2", "a_3", "b_3"]
    shuffled = parse_plan('order = "shuffle"\nseed = 7\n' + text, tmp_path / "p.toml")
    names = [s.run_name for s in shuffled.launch_order()]
    assert names == [s.run_name for s in shuffled.launch_order()]            # reproducible
    assert sorted(names[:3]) == ["a_1", "b_1", "c_1"]                          # shuffled within rounds only
    assert [s.order_index for s in shuffled.launch_order()] == list(range(8))


def test_device_plan_is_the_2x2_matrix_plus_a_profiled_cell(monkeypatch):
    monkeypatch.setenv("NCCL_PROTO", "Simple")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    plan = load_plan(ROOT / "plans" / "h200x2.toml")
    names = [cell.name for cell in plan.cells]
    assert names == ["baseline_default", "baseline_nccl", "eagle3_default", "eagle3_nccl", "eagle3_nccl_prof"]
    order = plan.launch_order()
    assert len(order) == 10 and [s.run_name for s in order[:5]] == [f"{n}_1" for n in names]
    assert plan.bench.requests == 11 and plan.bench.max_new_tokens == 500 and plan.bench.prompt_tokens == 64

    baseline = server_argv(plan, order[0])
    assert baseline[1:3] == ["-m", "sglang.launch_server"]
    for flag in ("--tp", "--skip-tokenizer-init", "--attention-backend", "--cuda-graph-max-bs"):
        assert flag in baseline
    assert "--speculative-algorithm" not in baseline
    env, dropped = server_env(plan, order[0])
    assert env["NCCL_NVLS_ENABLE"] == "0" and "NCCL_PROTO" not in env and "NCCL_PROTO" in dropped

    tuned_env, _ = server_env(plan, order[3])
    assert tuned_env["NCCL_PROTO"] == "LL" and tuned_env["NCCL_NTHREADS"] == "512"
    eagle = server_argv(plan, order[3])
    assert eagle[eagle.index("--speculative-num-steps") + 1] == "5"
    assert eagle[eagle.index("--speculative-draft-model-path") + 1] == "/tmp/d3"

    profiled = server_argv(plan, order[4])
    assert profiled[1:6] == ["-m", "speclogs.profile", "--every", "16", "--"]
    assert profiled[6:] == eagle
    assert order[4].cell.factors == {"spec": "eagle3", "nccl": "tuned", "profile": "on"}


def test_example_plan_loads():
    plan = load_plan(ROOT / "plans" / "example.toml")
    assert [cell.name for cell in plan.cells] == ["baseline", "eagle3"] and plan.bench.prompts


def test_servers_inherit_only_what_a_gpu_server_needs(tmp_path, monkeypatch):
    """The calling shell's other variables (here a driver script's MINUTES) do not reach the server;
    inherit_env = ["*"] passes everything (minus drop_inherited_env) as before."""
    for name, value in {"MINUTES": "30", "LC_ALL": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_PROTO": "Simple",
                        "HF_HOME": "/models", "AWS_SECRET_ACCESS_KEY": "x"}.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "p.toml"
    path.write_text('[env]\nNCCL_DEBUG = "INFO"\n[[cells]]\nname = "a"\nenv = { MINUTES = "1" }\n[[cells]]\nname = "b"\n')
    plan = load_plan(path)
    env, dropped = server_env(plan, plan.launch_order()[1])
    assert env["LC_ALL"] == "C.UTF-8" and env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["HF_HOME"] == "/models"
    assert env["PATH"] and env["NCCL_DEBUG"] == "INFO"
    assert "MINUTES" not in env and "AWS_SECRET_ACCESS_KEY" not in env and "NCCL_PROTO" not in env
    assert {"MINUTES", "AWS_SECRET_ACCESS_KEY", "NCCL_PROTO"} <= set(dropped)
    cell_env, _ = server_env(plan, plan.launch_order()[0])
    assert cell_env["MINUTES"] == "1"  # the plan's own env always reaches the server

    path.write_text('inherit_env = ["*"]\n[[cells]]\nname = "a"\n')
    everything, dropped = server_env(load_plan(path), load_plan(path).launch_order()[0])
    assert everything["MINUTES"] == "30" and "NCCL_PROTO" not in everything and dropped == ["NCCL_PROTO"]


def test_adaptive_table_is_checked_with_file_and_line(tmp_path):
    cells = '[[cells]]\nname = "a"\n[[cells]]\nname = "b"\n'
    assert "bad.toml:3:" in plan_error(tmp_path, f'name = "x"\n[adaptive]\nuntill = "ci_width<=5%"\n{cells}')
    assert "bad.toml:3:" in plan_error(tmp_path, f'name = "x"\n[adaptive]\nuntil = "width 5%"\n{cells}')
    assert "min_effect" in plan_error(tmp_path, f'[adaptive]\nuntil = "ci_width<=5%"\nmin_effect = "200%"\n{cells}')
    path = tmp_path / "good.toml"
    path.write_text(f'[adaptive]\nuntil = "ci_width<=4%"\nmax_launches = 10\nmin_effect = "2%"\nreference = "b"\n{cells}')
    spec = load_plan(path).adaptive
    assert (spec.until, spec.max_launches, spec.min_effect, spec.reference) == (pytest.approx(0.04), 10,
                                                                                pytest.approx(0.02), "b")


def test_adaptive_designs_that_cannot_work_are_refused_before_anything_starts(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text('launches = 2\n[adaptive]\nuntil = "ci_width<=5%"\nreference = "c"\n[[cells]]\nname = "a"\n'
                    '[[cells]]\nname = "b"\n')
    plan = load_plan(path)
    with pytest.raises(PlanError, match="needs a budget"):
        launch_plan(plan, LaunchOptions(out_dir=tmp_path / "out"))
    with pytest.raises(PlanError, match="reference 'c' is not a cell"):
        launch_plan(plan, LaunchOptions(out_dir=tmp_path / "out", max_launches=8))
    path.write_text(path.read_text().replace('reference = "c"\n', ""))
    with pytest.raises(PlanError, match="does not reach the first look"):
        launch_plan(load_plan(path), LaunchOptions(out_dir=tmp_path / "out", max_launches=3, until=0.05))
    assert not (tmp_path / "out").exists()


def test_the_device_plan_for_the_adaptive_run_is_a_two_draft_design_with_five_looks():
    from speclogs.launcher.run import adaptive_design

    plan = load_plan(ROOT / "plans" / "h200-adaptive.toml")
    design = adaptive_design(plan, LaunchOptions(out_dir=Path("/nonexistent")))
    assert design.cells == ("draft_noisy", "draft_exact") and design.reference == "draft_noisy"
    assert design.looks == (2, 3, 4, 5, 6) and design.until == pytest.approx(0.05)
    argv = server_argv(plan, plan.launch_order()[1])
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "/tmp/d3" and argv[argv.index("--tp") + 1] == "1"
