"""run.json has one owner (speclogs.runrecord): what the launcher writes is what the ingest, --resume and the report
read, a newer schema is read for what it holds and said, a broken file never stops anything."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from conftest import SRC, query
from speclogs.runrecord import SCHEMA, read_run_json, write_run_json
from speclogs.store import ingest_paths
from test_launcher import run, write_plan

RECORD = {
    "run_uid": "c" * 32, "run_name": "eagle3_tuned_2", "cell": "eagle3_tuned", "launch": 2,
    "factors": {"spec": "eagle3"}, "argv": ["python3", "-m", "sglang.launch_server", "--api-key", "sk-live1234567890abcdef"],
    "env": {"NCCL_PROTO": "LL", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz123456"},
    "versions": {"sglang": "0.5.14"}, "gpus": [{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}], "hostname": "box",
    "outcome": "ok", "timestamps": {"spawn": "2026-12-01T10:00:00"},
}


def test_what_the_launcher_writes_the_ingest_and_resume_read_alike(tmp_path, db_path):
    run_dir = tmp_path / "out" / "eagle3_tuned" / "2"
    run_dir.mkdir(parents=True)
    path = write_run_json(run_dir, RECORD)

    text = path.read_text()
    assert next(iter(json.loads(text))) == "schema" and json.loads(text)["schema"] == "speclogs.run/1"
    assert "sk-live" not in text and "hf_abc" not in text          # secrets never reach the file
    record = read_run_json(run_dir)
    assert (record.run_name, record.cell, record.launch, record.outcome, record.sglang_version, record.gpu_names) == (
        "eagle3_tuned_2", "eagle3_tuned", 2, "ok", "0.5.14", ("NVIDIA H200",))
    assert record.is_complete() and record.schema_note is None

    ingest_paths([tmp_path / "out"], db_path)
    assert query(db_path, "SELECT run_name, cell, launch_index, outcome, sglang_version, gpu_name, hostname, "
                          "run_json->>'schema' FROM runs") == [
        ("eagle3_tuned_2", "eagle3_tuned", 2, "ok", "0.5.14", "NVIDIA H200", "box", SCHEMA)]


def test_a_newer_schema_is_read_for_what_it_holds_and_said(tmp_path, db_path):
    run_dir = tmp_path / "out" / "a" / "1"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"schema": "speclogs.run/2", "cell": "a", "launch": 1, "outcome": "ok",
                                                  "something_new": {"x": 1}}))
    summary = ingest_paths([tmp_path / "out"], db_path)
    assert any("schema 'speclogs.run/2' is not 'speclogs.run/1'" in w for w in summary.warnings)
    assert query(db_path, "SELECT run_name, outcome FROM runs") == [("a_1", "ok")]


def test_a_broken_run_json_keeps_the_directory_name_and_resume_redoes_the_launch(tmp_path, db_path):
    plan = write_plan(tmp_path, '[[cells]]\nname = "o"')
    out = tmp_path / "out"
    (out / "o" / "1").mkdir(parents=True)
    (out / "o" / "1" / "run.json").write_text('{"schema": "speclogs.run/1", "outcome": "ok", ')   # cut short
    assert read_run_json(out / "o" / "1") is None

    summary = ingest_paths([out], db_path)
    assert any("run.json is not JSON" in w and "keeps its directory name" in w for w in summary.warnings)
    assert query(db_path, "SELECT run_name FROM runs") == [("1",)]

    launched, _ = run(plan, out, resume=True)
    assert [(r.run_name, r.outcome, r.skipped) for r in launched.results] == [("o_1", "ok", False)]
    assert read_run_json(out / "o" / "1").outcome == "ok"


def test_only_runrecord_spells_the_schema_and_the_file_name():
    """Every other module reaches run.json through speclogs.runrecord (docstrings and comments may name it)."""
    spelled = []
    for path in sorted((SRC / "speclogs").rglob("*.py")):
        if path.name == "runrecord.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if node.value == "run.json" or "speclogs.run/" in node.value:
                    spelled.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}")
    assert spelled == []


def test_the_record_reads_a_hand_written_minimal_file(tmp_path):
    (tmp_path / "run.json").write_text('{"cell": "x", "launch": 3, "launch_extra": true}')
    record = read_run_json(tmp_path)
    assert record.run_name == "x_3" and record.outcome is None and not record.is_complete()
    assert record.env is None and record.versions == {} and record.models == {} and record.gpu_names == ()
    assert read_run_json(Path(tmp_path) / "missing") is None
