"""Drift you can see (issue 14.4): the ingest summary and the `drift` view say, per file, which batch-line labels no
typed column took, which lines no grammar matched (grouped into templates), which lines look like a pattern's but
fail it, and which fields the run's configuration implies but the log never printed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import ROOT, query, run_cli
from speclogs.store import ingest_paths
from speclogs.store.check import check_database

REAL_LAUNCH = ROOT / "fixtures" / "h200-adaptive" / "draft_exact" / "1"


def drifted_log(tmp_path: Path) -> Path:
    """A real EAGLE-3 launch's log with its accept len fields gone, a label nobody knows, two unknown lines of one
    template and a near miss of the old Decode batch line."""
    lines = []
    for line in (REAL_LAUNCH / "server.log").read_text().splitlines():
        if "Decode batch" in line:
            line = line.replace("accept len: 2.00, accept rate: 0.20, ", "") + ", #brand-new-label: 7"
        lines.append(line)
    lines += [
        "[2026-12-01 11:56:00] Rebalanced 12 experts in 0.31 s",
        "[2026-12-01 11:56:09] Rebalanced 7 experts in 0.05 s",
        "moe-balancer: moved 3 of 64 experts",
        "moe-balancer: moved 11 of 64 experts",
        "[2026-12-01 11:56:10] Decode batch. #running-req: 1, #token: 64, token usage: 0.00, gen throughput (token/s): abc",
    ]
    log = tmp_path / "eagle3.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_the_drift_view_and_the_summary_name_what_the_grammars_did_not_foresee(tmp_path):
    log = drifted_log(tmp_path)
    db = tmp_path / "s.duckdb"
    summary = ingest_paths([log], db)
    rows = {(kind, subject): (lines, example, detail)
            for kind, subject, lines, example, detail in query(db, "SELECT kind, subject, lines, example_line_no, detail FROM drift")}
    decode_lines = query(db, "SELECT count(*) FROM decode_batches")[0][0]
    assert decode_lines > 10
    assert rows[("new_label", "#brand-new-label")][0] == decode_lines - 1  # every Decode batch line but the near miss
    total = len(log.read_text().splitlines())
    known = rows[("unknown_message", "Rebalanced <n> experts in <n> s")]  # SGLang's prefix, no grammar of its own
    assert known == (2, total - 4, "Rebalanced 12 experts in 0.31 s")
    unmatched = rows[("unmatched_line", "moe-balancer: moved <n> of <n> experts")]  # no prefix, no grammar
    assert unmatched == (2, total - 2, "moe-balancer: moved 3 of 64 experts")
    missing = rows[("missing_field", "accept_len")]
    assert missing[0] == decode_lines and "speculative_algorithm EAGLE3" in missing[2]
    assert any(kind == "near_miss" for kind, _ in rows)
    noted = {(note.kind, note.subject) for note in summary.drift_notes}
    assert noted == set(rows)
    assert all(note.source_file == str(log.resolve()) for note in summary.drift_notes)

    cli = run_cli("ingest", str(log), "--db", str(tmp_path / "cli.duckdb"))
    assert cli.returncode == 0, cli.stderr
    said = " ".join(cli.stderr.split())
    assert "'#brand-new-label'" in said and "no grammar matched" in said and "no specific grammar knows" in said
    assert "accept len" in said and "SELECT * FROM drift" in said


def test_nccl_debug_set_for_a_launch_whose_log_has_no_nccl_line_is_drift(tmp_path):
    launch = tmp_path / "runs" / "eagle3" / "1"
    shutil.copytree(REAL_LAUNCH, launch)
    record = json.loads((launch / "run.json").read_text())
    record["env"] = {**(record.get("env") or {}), "NCCL_DEBUG": "INFO"}
    (launch / "run.json").write_text(json.dumps(record))
    db = tmp_path / "s.duckdb"
    summary = ingest_paths([tmp_path / "runs"], db)
    rows = query(db, "SELECT source_file, detail FROM drift WHERE kind = 'missing_field' AND subject = 'nccl_lines'")
    assert rows == [(str((launch / "server.log").resolve()), "NCCL_DEBUG=INFO was set for the launch but the log has no "
                     "NCCL INFO line")]
    assert [n.subject for n in summary.drift_notes if n.kind == "missing_field"] == ["nccl_lines"]
    assert query(db, "SELECT count(*) FROM drift WHERE kind = 'missing_field' AND subject = 'accept_len'")[0][0] == 0


def test_a_real_launch_drifts_only_by_messages_no_grammar_has_a_pattern_for(tmp_path):
    """SGLang 0.5.14 on the H200: every batch line typed, no unknown line, no near miss, accept len printed; two
    informational messages are kept as kind 'message' and the drift view names them."""
    db = tmp_path / "s.duckdb"
    summary = ingest_paths([REAL_LAUNCH], db)
    assert query(db, "SELECT kind, subject, lines FROM drift ORDER BY subject") == [
        ("unknown_message", "Tree cache initialized: source=default impl=RadixCache hybrid_swa=False hybrid_ssm=False "
                            "hierarchical=False streaming_wrapped=False", 1),
        ("unknown_message", "Using fallback token IDs for yes/no (<n>/<n>)", 1),
    ]
    assert len(summary.drift_notes) == 2


def test_a_message_after_any_prefix_is_a_typed_row_and_an_unknown_prefix_is_named(tmp_path):
    """Decode batch lines after other logging prefixes: the prefix grammars read ts and ranks; a prefix none reads
    still gives a typed row (its ts and rank tags taken where they show), is kept, and the drift view names its
    shape with a count and an example; the content check holds every line."""
    body = "Decode batch, #running-req: {n}, #token: 96, token usage: 0.00, cuda graph: True, gen throughput (token/s): 3.84, #queue-req: 0"
    lines = [
        "[2026-01-02 03:04:00 TP0] " + body.format(n=1),
        "2026-01-02 03:04:01.250 INFO 120984 [ TP3 scheduler_metrics_mixin.py:415] " + body.format(n=2),
        "I0102 03:04:02.500000 12345 scheduler_metrics_mixin.py:287] " + body.format(n=3),
        "sglang-1  | [2026-01-02 03:04:03 TP1] " + body.format(n=4),
        "node7 >> 2026-01-02 03:04:04 {worker TP2} " + body.format(n=5),
        "node7 >> 2026-01-02 03:04:05 {worker TP2} " + body.format(n=6),
    ]
    log = tmp_path / "prefixes.log"
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "p.duckdb"
    ingest_paths([log], db)
    rows = query(db, "SELECT line_no, running_req, strftime(ts, '%Y-%m-%d %H:%M:%S.%g'), tp_rank FROM decode_batches ORDER BY line_no")
    assert rows == [(1, 1, "2026-01-02 03:04:00.000", 0), (2, 2, "2026-01-02 03:04:01.250", 3), (3, 3, "2026-01-02 03:04:02.500", None),
                    (4, 4, "2026-01-02 03:04:03.000", 1), (5, 5, "2026-01-02 03:04:04.000", 2), (6, 6, "2026-01-02 03:04:05.000", 2)]
    kept = dict(query(db, "SELECT line_no, prefix FROM outer_prefixes"))
    assert kept[4] == "sglang-1  | " and kept[5] == "node7 >> 2026-01-02 03:04:04 {worker TP2} "
    new = query(db, "SELECT subject, lines, example_line_no, detail FROM drift WHERE kind = 'new_prefix'")
    assert [(subject, n, at) for subject, n, at, _ in new] == [("node<n> >> <n>-<n>-<n> <n>:<n>:<n> {worker TP<n>} ", 2, 5)]
    assert lines[4] in new[0][3]
    assert check_database(db).ok


def test_a_prefix_grammar_of_ones_own_reads_the_new_prefix(tmp_path):
    """The drift view's new prefix, written as a grammar file of kind "prefix": the same lines are read by it (ts with
    its fraction, rank tags) and the drift view names no new prefix."""
    body = "Decode batch, #running-req: 7, #token: 96, token usage: 0.00, cuda graph: True, gen throughput (token/s): 3.84, #queue-req: 0"
    log = tmp_path / "node7.log"
    log.write_text(f"node7 >> 2026-01-02 03:04:04.5 {{worker TP2}} {body}\n")
    grammar = tmp_path / "node_prefix.toml"
    grammar.write_text('''kind = "prefix"
family = "node_prefix"
table = "(all)"
scope = "line"

[shapes]
digits = { chars = "0123456789" }

[[field]]
name = "ts"
type = "str"
shape = "timestamp"

[[field]]
name = "frac"
type = "str"
shape = "digits"

[[field]]
name = "rank_tags"
type = "str"
shape = "ranktags"

[[field]]
name = "node"
type = "str"
shape = "word"

[[field]]
name = "message"
type = "str"
shape = "rest"

[[pattern]]
name = "node_worker"
gate = " >> "
derive = "rank_tags"
template = '{node} >> {ts}.{frac} \\{worker{rank_tags}\\} {message}'

[[pattern.sample]]
line = "node7 >> 2026-01-02 03:04:04.5 {worker TP2} Decode batch, #running-req: 7, #token: 96, token usage: 0.00"
expect = { node = "node7", frac = "5", tp_rank = 2 }
''')
    db = tmp_path / "own.duckdb"
    ingest_paths([log], db, grammar_paths=[grammar])
    assert query(db, "SELECT running_req, strftime(ts, '%H:%M:%S.%g'), tp_rank FROM decode_batches") == [(7, "03:04:04.500", 2)]
    assert query(db, "SELECT count(*) FROM drift WHERE kind = 'new_prefix'") == [(0,)]
