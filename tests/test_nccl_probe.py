"""NCCL probe result files (`*.nccl_probe.json`, docs/nccl.md §3): the reader, into a real DuckDB table."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from speclogs.ingest.jsonfiles import parse_nccl_probe

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "fixtures/h200x2/nccl_probe.nccl_probe.json"


def test_probe_json_round_trips_into_a_real_duckdb_table(tmp_path):
    import duckdb

    document = json.loads(PROBE.read_text())
    tables, account = parse_nccl_probe(PROBE.read_text(), str(PROBE))
    assert tables["nccl_probe_files"]["outcome"].to_list() == [document["outcome"]] == ["ok"]
    assert tables["nccl_probe"].height == sum(len(env_set["measurements"]) for env_set in document["env_sets"]) == 140

    con = duckdb.connect(str(tmp_path / "x.duckdb"))
    con.execute((ROOT / "src/speclogs/store/schema.sql").read_text())
    # through the Arrow C stream, as the writer does (no pyarrow in the core install; DuckDB refuses all-null columns)
    con.register("probe_rows", tables["nccl_probe"].select(pl.exclude(pl.Null)).__arrow_c_stream__())
    con.execute("INSERT INTO nccl_probe BY NAME SELECT * FROM probe_rows")
    rows = con.execute("SELECT env_set, collective, bytes, tokens, latency_us, env->>'NCCL_PROTO', graph_latency_us "
                       "FROM nccl_probe WHERE env_set = 'tuned' ORDER BY collective DESC, bytes").fetchall()
    tuned = next(env_set for env_set in document["env_sets"] if env_set["name"] == "tuned")
    first = next(m for m in tuned["measurements"] if m["collective"] == "all_reduce" and m["bytes"] == rows[0][2])
    assert rows[0] == ("tuned", "all_reduce", first["bytes"], first["tokens"], first["latency_us"], "LL", first["graph_latency_us"])


def test_reader_refuses_files_that_are_not_probe_results():
    for text, reason in (('{"format": "speclogs.nccl_probe", ', "not JSON"), (json.dumps({"hello": 1}), "not a speclogs NCCL probe file")):
        tables, account = parse_nccl_probe(text, "a.nccl_probe.json")
        assert account.unparsed_lines == account.total_lines == 1 and reason in tables["unparsed_lines"]["reason"][0]
