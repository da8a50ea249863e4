"""speclogs doctor: a broken draft setup named before the launch (plan file, command line), refused by the launcher
without --force, and named again after the run (ingested runs, the report). Models are config.json files in tmp dirs;
the server is tests/standin_server.py; the CLI runs as a user runs it."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import duckdb
import pytest

from conftest import run_cli
from groundtruth.sglang_logs import RunSpec, write_run
from speclogs.doctor import check_command
from speclogs.errors import PlanError
from speclogs.launcher import LaunchOptions, launch_plan, load_plan

STANDIN = Path(__file__).resolve().parent / "standin_server.py"
EAGLE3_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 256, "num_hidden_layers": 1,
                "vocab_size": 512, "max_position_embeddings": 4096,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 7, 13]}}
TARGET = {"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "num_hidden_layers": 16, "vocab_size": 512,
          "max_position_embeddings": 4096}


def model(root: Path, name: str, config: dict) -> Path:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "config.json").write_text(json.dumps(config))
    return root / name


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    return model(tmp_path, "target", TARGET), model(tmp_path, "draft", EAGLE3_DRAFT)


def command(target: Path, draft: Path, algorithm: str = "EAGLE", *extra: str) -> list[str]:
    return ["python", "-m", "sglang.launch_server", "--model-path", str(target), "--speculative-algorithm", algorithm,
            "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "6", *extra]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def plan_file(tmp_path: Path, target: Path, draft: Path, algorithm: str = "EAGLE") -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(f"""name = "doctor"
command = ["{{python}}", "{STANDIN}"]
model_path = "{target}"
port = {free_port()}
health_poll_s = 0.05
stop_grace_s = 2
port_wait_s = 0.3
launches = 1
args = ["--ready-after", "0.2"]
[bench]
requests = 2
max_new_tokens = 8

[[cells]]
name = "spec"
args = ["--speculative-algorithm", "{algorithm}",
        "--speculative-draft-model-path", "{draft}"]
""")
    return path


def codes(findings) -> set[str]:
    return {f.code for f in findings}


def test_the_eagle_flag_with_an_eagle3_draft_is_named_from_a_command_line_alone(pair):
    target, draft = pair
    found = check_command(command(target, draft))
    [mismatch] = [f for f in found if f.code == "algorithm_draft_mismatch"]
    assert mismatch.severity == "error"
    assert "`--speculative-algorithm EAGLE` with an EAGLE-3 draft (LlamaForCausalLMEagle3): use EAGLE3" in mismatch.message
    assert mismatch.fix == "launch with --speculative-algorithm EAGLE3"
    assert mismatch.source == "command line --speculative-algorithm"
    assert check_command(command(target, draft, "EAGLE3")) == []   # the control: nothing to say


def test_cli_on_a_command_line_exits_1_and_prints_json_findings(pair):
    target, draft = pair
    done = run_cli("doctor", "--format", "json", "--", *command(target, draft))
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)
    assert [f["code"] for f in findings] == ["algorithm_draft_mismatch"]
    assert set(findings[0]) == {"subject", "code", "severity", "message", "fix", "source"}
    control = run_cli("doctor", "--", *command(target, draft, "EAGLE3"))
    assert control.returncode == 0 and "no finding" in control.stdout


def test_a_hub_id_is_said_not_checked(pair):
    target, _ = pair
    found = check_command(command(target, Path("org/some-eagle3-draft"), "EAGLE3"))
    assert [(f.code, f.severity, f.message) for f in found] == [
        ("not_checked", "info", "draft not checked: org/some-eagle3-draft is not a local path")]


def test_the_mismatch_is_named_from_a_plan_alone_with_its_line(tmp_path, pair):
    target, draft = pair
    plan = plan_file(tmp_path, target, draft)
    done = run_cli("doctor", str(plan), "--format", "json")
    assert done.returncode == 1, done.stderr
    [finding] = json.loads(done.stdout)
    assert finding["code"] == "algorithm_draft_mismatch" and finding["subject"] == "cell spec"
    line = plan.read_text().splitlines().index('args = ["--speculative-algorithm", "EAGLE",') + 1
    assert finding["source"] == f"{plan}:{line} (cell spec)"
    assert "use EAGLE3" in run_cli("doctor", str(plan)).stdout


def test_the_launcher_refuses_that_plan_without_force_and_records_the_findings_with_it(tmp_path, pair):
    target, draft = pair
    plan = load_plan(plan_file(tmp_path, target, draft))
    out = tmp_path / "out"
    with pytest.raises(PlanError, match="algorithm_draft_mismatch|use EAGLE3") as refused:
        launch_plan(plan, LaunchOptions(out_dir=out))
    assert "--force" in refused.value.hint
    assert not out.exists()   # nothing started, nothing written
    summary = launch_plan(plan, LaunchOptions(out_dir=out, force=True))
    assert [r.outcome for r in summary.results] == ["ok"]
    record = json.loads((out / "spec" / "1" / "run.json").read_text())
    assert [f["code"] for f in record["doctor"]] == ["algorithm_draft_mismatch"]
    assert record["models"]["draft"]["eagle_config"] == EAGLE3_DRAFT["eagle_config"]

    # … and from the ingested run alone (run.json + the server's log), through the CLI
    db = tmp_path / "runs.duckdb"
    assert run_cli("ingest", str(out), "--db", str(db)).returncode == 0
    done = run_cli("doctor", "--db", str(db), "spec_*", "--format", "json")
    assert done.returncode == 1, done.stderr
    [finding] = json.loads(done.stdout)
    assert finding["subject"] == "spec_1" and finding["code"] == "algorithm_draft_mismatch"
    assert "(LlamaForCausalLMEagle3): use EAGLE3" in finding["message"]
    assert finding["source"].endswith("(ServerArgs speculative_algorithm)")   # the flag as the server printed it


def test_the_cli_launch_needs_force_too(tmp_path, pair):
    target, draft = pair
    plan = plan_file(tmp_path, target, draft)
    done = run_cli("launch", str(plan), "--out", str(tmp_path / "out"), "--no-ingest")
    assert done.returncode == 1 and "use EAGLE3" in done.stderr and "--force" in done.stderr
    forced = run_cli("launch", str(plan), "--out", str(tmp_path / "out"), "--no-ingest", "--force")
    assert forced.returncode == 0, forced.stderr
    record = json.loads((tmp_path / "out" / "spec" / "1" / "run.json").read_text())
    assert record["outcome"] == "ok" and record["doctor"][0]["code"] == "algorithm_draft_mismatch"


@pytest.mark.parametrize("ids, trained, expected", [
    ([2, 8, 14], "1,7,13", ("aux_layers_offset", "offset by +1 from")),
    ([0, 6, 12], "1,7,13", ("aux_layers_offset", "offset by -1 from")),
    ([-1, 7, 13], "1,7,13", ("aux_layers_mismatch", "differ from")),
])
def test_aux_layer_ids_against_the_trained_layers(tmp_path, ids, trained, expected):
    target = model(tmp_path, "t", TARGET)
    draft = model(tmp_path, "d", {**EAGLE3_DRAFT, "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}})
    done = run_cli("doctor", "--trained-layers", trained, "--format", "json", "--", *command(target, draft, "EAGLE3"))
    assert done.returncode == 1
    [layer] = [f for f in json.loads(done.stdout) if f["code"] == expected[0]]
    assert expected[1] in layer["message"] and f"[{trained.replace(',', ', ')}]" in layer["fix"]
    assert layer["source"] == str(draft / "config.json")


def test_aux_layer_ids_out_of_range_embedding_duplicates_and_misplaced(tmp_path):
    target = model(tmp_path, "t", TARGET)
    draft = model(tmp_path, "d", {**EAGLE3_DRAFT, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 7, 7, 15]}})
    found = {f.code: f for f in check_command(command(target, draft, "EAGLE3"))}
    assert found["aux_layers_out_of_range"].severity == "error" and "[15]" in found["aux_layers_out_of_range"].message
    assert found["aux_layers_embedding"].severity == "warning"
    assert found["aux_layers_duplicate"].severity == "warning"
    top = model(tmp_path, "top", {**{k: v for k, v in EAGLE3_DRAFT.items() if k != "eagle_config"},
                                  "eagle_aux_hidden_state_layer_ids": [1, 7, 13]})
    found = {f.code: f for f in check_command(command(target, top, "EAGLE3"))}
    assert found["aux_layers_ignored"].severity == "warning"
    assert "ids [1, 7, 12]" in found["aux_layers_default"].message   # SGLang's default for 16 layers


def test_sizes_vocab_map_positions_base_model_and_draft_tokens(tmp_path):
    target = model(tmp_path, "t", TARGET)
    draft = model(tmp_path, "d", {**EAGLE3_DRAFT, "hidden_size": 128, "vocab_size": 256, "draft_vocab_size": 128,
                                  "max_position_embeddings": 2048, "base_model_name_or_path": "other/model"})
    header = json.dumps({"fc.weight": {"dtype": "BF16", "shape": [128, 384], "data_offsets": [0, 0]}}).encode()
    (draft / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    argv = command(target, draft, "EAGLE3")
    argv[argv.index("--speculative-num-draft-tokens") + 1] = "4"
    found = {f.code: f for f in check_command(argv)}
    assert {"hidden_size_mismatch", "vocab_size_mismatch", "draft_vocab_map_missing"} <= {
        code for code, f in found.items() if f.severity == "error"}
    assert {"max_position_shorter", "base_model_differs", "draft_tokens_adjusted"} <= {
        code for code, f in found.items() if f.severity == "warning"}
    assert "by 6" in found["draft_tokens_adjusted"].message
    mapped = model(tmp_path, "mapped", {**EAGLE3_DRAFT, "draft_vocab_size": 128,
                                        "eagle_config": {"eagle_aux_hidden_state_layer_ids": "1,7,13"}})
    header = json.dumps({"d2t": {"dtype": "I64", "shape": [100], "data_offsets": [0, 0]}}).encode()
    (mapped / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    found = {f.code: f for f in check_command(command(target, mapped, "EAGLE3"))}
    assert "the d2t map has 100 rows, draft_vocab_size is 128" in found["draft_vocab_map_size"].message
    assert found["aux_layers_invalid"].severity == "error"
    too_big = model(tmp_path, "too_big", {**EAGLE3_DRAFT, "draft_vocab_size": 1024})
    assert "draft_vocab_size" in codes(check_command(command(target, too_big, "EAGLE3")))


def test_algorithm_flags_for_other_draft_kinds(tmp_path):
    target = model(tmp_path, "t", TARGET)
    eagle2 = model(tmp_path, "e2", {**EAGLE3_DRAFT, "architectures": ["LlamaForCausalLMEagle"]})
    plain = model(tmp_path, "plain", {**TARGET, "num_hidden_layers": 2})
    assert "use EAGLE" in check_command(command(target, eagle2, "EAGLE3"))[0].message
    assert check_command(command(target, eagle2, "NEXTN")) == []
    assert "use STANDALONE" in check_command(command(target, plain, "EAGLE"))[0].message
    small = model(tmp_path, "small", {**TARGET, "hidden_size": 64, "num_hidden_layers": 2})
    assert check_command(command(target, small, "STANDALONE")) == []   # a standalone draft reads tokens, not states
    deepseek = model(tmp_path, "dsv3", {**TARGET, "architectures": ["DeepseekV3ForCausalLM"]})
    assert check_command(command(deepseek, deepseek, "EAGLE")) == []   # SGLang loads its NextN head as the draft
    no_draft = ["--model-path", str(target), "--speculative-algorithm", "EAGLE3"]
    assert codes(check_command(no_draft)) == {"draft_missing"}
    partial = command(target, model(tmp_path, "d3", EAGLE3_DRAFT), "EAGLE3")
    steps = partial.index("--speculative-num-steps")
    del partial[steps:steps + 2]
    assert codes(check_command(partial)) == {"spec_params_partial"}
    ngram = ["--model-path", str(target), "--speculative-algorithm", "NGRAM", "--speculative-draft-model-path", str(eagle2)]
    assert codes(check_command(ngram)) == {"draft_ignored"}


def test_the_report_names_the_cause_and_a_drop_below_the_reference(tmp_path):
    from speclogs.analysis import compare_runs
    from speclogs.store import ingest_paths

    draft = {"path": "/models/d3", "config_sha256": "c" * 64, **EAGLE3_DRAFT}
    eagle = dict(spec=True, nccl_tuned=False, rate_tok_s=100.0, requests=10, draft_model=draft)
    for launch in (1, 2):
        write_run(RunSpec(name=f"flag_{launch}", cell="flag", launch=launch, seed=launch, accept_len=1.0,
                          server_arg_overrides={"speculative_algorithm": "'EAGLE'"}, **eagle), tmp_path / "runs", "launcher")
        write_run(RunSpec(name=f"low_{launch}", cell="low", launch=launch, seed=10 + launch, accept_len=1.6, **eagle),
                  tmp_path / "runs", "launcher")
        write_run(RunSpec(name=f"good_{launch}", cell="good", launch=launch, seed=20 + launch, accept_len=2.0, **eagle),
                  tmp_path / "runs", "launcher")
    db = tmp_path / "r.duckdb"
    ingest_paths([tmp_path / "runs"], db)
    with duckdb.connect(str(db), read_only=True) as con:
        c = compare_runs(con, ["good_*", "flag_*", "low_*"], reference_acceptance=(2.0, 0.0))
        shifted = compare_runs(con, ["good_*"], trained_layers=[2, 8, 14])   # the draft names [1, 7, 13]
    [offset] = [w for w in shifted.warnings if w.code == "doctor_aux_layers_offset"]
    assert "offset by -1 from the layers it was trained on [2, 8, 14]" in offset.message
    by_code = {}
    for w in c.warnings:
        by_code.setdefault(w.code, []).append(w)
    [one] = by_code["accept_len_one"]
    assert one.arms == ("flag_*",)
    assert "`--speculative-algorithm EAGLE` with an EAGLE-3 draft (LlamaForCausalLMEagle3): use EAGLE3" in one.message
    assert "hidden layers of the target (mismatched" not in one.message   # the old guess is gone
    [setup] = by_code["doctor_algorithm_draft_mismatch"]
    assert setup.runs == ("flag_1", "flag_2")
    [low] = by_code["acceptance_below_reference"]
    assert low.arms == ("low_*",) and "below the reference 2.00 (-20%)" in low.message
    assert "The doctor finds nothing wrong" in low.message
    assert not [w for w in c.warnings if "good_*" in w.arms and w.code.startswith(("doctor_", "accept"))]


def test_the_profilers_runtime_line_is_what_ran(pair):
    from speclogs.doctor import check_settings, parse_runtime, server_settings

    target, draft = pair
    line = "speclogs profiler: runtime: worker=sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2 algorithm={} " \
           "captured_layers={} draft=LlamaForCausalLMEagle3"
    flag = {**parse_runtime(line.format("EAGLE", "-")), "source": "server.log:40"}
    found = {f.code: f for f in check_settings(server_settings(command(target, draft)), str, runtime=flag)}
    assert found["runtime_no_aux_capture"].source == "server.log:40"
    assert "captured no auxiliary hidden states" in found["runtime_no_aux_capture"].message
    shifted = {**parse_runtime(line.format("EAGLE3", "3,9,15")), "source": "server.log:41"}
    found = {f.code: f for f in check_settings(server_settings(command(target, draft, "EAGLE3")), str, [1, 7, 13],
                                               runtime=shifted)}
    assert "captured ids [2, 8, 14]" in found["runtime_layers_differ"].message
    assert found["aux_layers_offset"].source == "server.log:41" and "offset by +1" in found["aux_layers_offset"].message
    # a log without run.json: the draft class the server loaded stands for the draft's config
    plain_log = {"speculative_algorithm": "EAGLE", "speculative_draft_model_path": "/elsewhere/draft"}
    found = {f.code: f for f in check_settings(plain_log, str, models={}, where="run.json", runtime=flag)}
    assert "(LlamaForCausalLMEagle3): use EAGLE3" in found["algorithm_draft_mismatch"].message


FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "h200-doctor"


@pytest.mark.skipif(not FIXTURE.is_dir(), reason="fixtures/h200-doctor (the GPU runs) is not in this checkout")
def test_the_report_on_the_gpu_fixture_names_the_flag_bug_and_the_layer_offset_with_the_drop(tmp_path):
    """One H100, SGLang 0.5.14: the layered synthetic pair with the EAGLE flag (the bug), with EAGLE3 (the control), and
    with the draft's aux ids +1. The reference is what the draft was built for (its design record), ±1 %."""
    from speclogs.analysis import compare_runs
    from speclogs.analysis.lint import doctor_runs
    from speclogs.store import ingest_paths

    design = json.loads((FIXTURE / "draft_A.speclogs_synth.json.console").read_text())
    trained, expected = design["trained_aux_layers"], design["expected_accept_len_by_steps"]["5"]
    db = tmp_path / "doctor.duckdb"
    ingest_paths([FIXTURE], db)
    with duckdb.connect(str(db), read_only=True) as con:
        c = compare_runs(con, ["eagle3_control_*", "eagle_flag_*", "eagle3_aux_offset_*"], trained_layers=trained,
                         reference_acceptance=(expected, expected / 100))
        by_run = dict(doctor_runs(con, ["*"], trained))
    arms = {a.name: a for a in c.arms}
    assert arms["eagle_flag_*"].accept_len == pytest.approx(1.0, abs=0.01)
    assert arms["eagle3_aux_offset_*"].accept_len == pytest.approx(2.66, abs=0.01)
    assert arms["eagle3_control_*"].accept_len == pytest.approx(3.0, abs=0.01)
    [one] = [w for w in c.warnings if w.code == "accept_len_one"]
    assert one.arms == ("eagle_flag_*",)
    assert "`--speculative-algorithm EAGLE` with an EAGLE-3 draft (LlamaForCausalLMEagle3): use EAGLE3" in one.message
    assert "captured no auxiliary hidden states" in one.message   # what the profiler saw run
    [drop] = [w for w in c.warnings if w.code == "acceptance_below_reference"]
    assert drop.arms == ("eagle3_aux_offset_*",) and "accept len 2.66" in drop.message and "(-12%)" in drop.message
    assert "offset by +1 from the layers it was trained on [1, 7, 13]" in drop.message
    assert not [w for w in c.warnings if "eagle3_control_*" in w.arms and w.code.startswith(("doctor_", "accept"))]
    assert by_run["eagle3_control_1"] == [] and by_run["eagle3_control_2"] == []
    assert {f.code for f in by_run["eagle_flag_1"]} == {"algorithm_draft_mismatch", "runtime_no_aux_capture"}
    assert {f.code for f in by_run["eagle3_aux_offset_2"]} == {"aux_layers_offset"}
