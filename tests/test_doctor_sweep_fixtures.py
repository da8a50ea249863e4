"""The GPU fixtures for the doctor and the whatif sweep (one H100, SGLang 0.5.14, the layered synthetic pair): the
acceptance SGLang measured is the one the synthetic drafts were built for, and the profiler's runtime line says
what ran (the worker, the algorithm, the layers the target captured)."""

from __future__ import annotations

import json

import duckdb
import pytest

from conftest import ROOT
from speclogs.store import ingest_paths

FIXTURES = ROOT / "fixtures"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu") / "gpu.duckdb"
    ingest_paths([FIXTURES / "h200-doctor", FIXTURES / "h200-sweep"], path)
    connection = duckdb.connect(str(path), read_only=True)
    yield connection
    connection.close()


def accept_len_by_cell(db) -> dict[str, list[float]]:
    rows = db.execute("""SELECT r.cell, sum(b.completion_tokens) / sum(b.spec_verify_ct)
                         FROM runs r JOIN bench_requests b USING (run_id)
                         WHERE NOT b.warmup AND b.spec_verify_ct > 0 GROUP BY r.run_id, r.cell""").fetchall()
    found: dict[str, list[float]] = {}
    for cell, value in rows:
        found.setdefault(cell, []).append(value)
    return found


def expected(record: str, steps: int, fixture: str) -> float:
    meta = json.loads((FIXTURES / fixture / record).read_text())
    return meta["expected_accept_len_by_steps"][str(steps)]


def test_every_launch_accepts_what_its_draft_was_built_for(db):
    measured = accept_len_by_cell(db)
    assert len(measured) == 11 and all(len(v) == 2 for v in measured.values())
    for draft, record in (("a", "draft_A.speclogs_synth.json.console"), ("b", "draft_B.speclogs_synth.json.console")):
        for steps in (1, 2, 3, 5):
            for value in measured[f"{draft}_s{steps}"]:
                assert value == pytest.approx(expected(record, steps, "h200-sweep"), abs=0.03)
    doctor = "h200-doctor"
    assert measured["eagle3_control"][0] == pytest.approx(expected("draft_A.speclogs_synth.json.console", 5, doctor), abs=0.03)
    assert measured["eagle3_aux_offset"][0] == pytest.approx(
        expected("draft_A_aux_offset.speclogs_synth.json.console", 5, doctor), abs=0.03)
    assert all(value < 1.01 for value in measured["eagle_flag"])


def test_the_runtime_line_names_the_algorithm_and_the_captured_layers(db):
    rows = db.execute("""SELECT DISTINCT r.cell, e.message FROM server_events e JOIN runs r USING (run_id)
                         WHERE e.kind = 'spec_runtime'""").fetchall()
    by_cell = {cell: message.split("runtime: ")[1] for cell, message in rows}
    assert len(rows) == len(by_cell) == 12
    worker = "worker=sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2"
    assert by_cell["eagle_flag"] == f"{worker} algorithm=EAGLE captured_layers=- draft=LlamaForCausalLMEagle3"
    assert by_cell["eagle3_control"] == f"{worker} algorithm=EAGLE3 captured_layers=2,8,14 draft=LlamaForCausalLMEagle3"
    assert by_cell["eagle3_aux_offset"] == f"{worker} algorithm=EAGLE3 captured_layers=3,9,15 draft=LlamaForCausalLMEagle3"
    assert by_cell["baseline"] == "worker=- algorithm=NONE captured_layers=- draft=-"
