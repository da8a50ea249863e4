"""Test scaffolding ONLY, used while the real ingest (`speclogs.ingest_paths`) is not available: reads the log
families the analysis needs from generated/real SGLang 0.5.14 logs with plain regexes into the schema.sql tables.
Tests prefer the real ingest whenever it imports (see tests/conftest_report.py: `build_db`)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path

SCHEMA = Path(__file__).resolve().parents[2] / "src" / "speclogs" / "schema.sql"
PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: TP(\d+))?\] (.*)$")
DECODE = re.compile(
    r"Decode batch, #running-req: (\d+), #token: (\d+), token usage: [0-9.]+, (?:accept len: ([0-9.]+), accept rate: "
    r"[0-9.]+, )?cuda graph: (True|False), gen throughput \(token/s\): ([0-9.a-z]+), #queue-req: (\d+)")
PREFILL = re.compile(r"Prefill batch, #new-seq: (\d+), #new-token: (\d+), .*#running-req: (\d+),")
CYCLE = re.compile(r"speclogs spec_cycle cycle=(\d+) bs=(\d+) draft_ms=([0-9.]+) verify_ms=([0-9.]+) extend_ms=([0-9.]+) "
                   r"other_ms=([0-9.]+) cycle_ms=([0-9.]+) accepted=(\d+) proposed=(\d+)")
NCCL_ENV = re.compile(r"NCCL INFO (NCCL_[A-Z_0-9]+) set by environment to ([^ ]+?)\.?$")
NCCL_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")
HEALTH = re.compile(r'"GET /health HTTP/1.1" (\d+)')


def _ts(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")


def ingest_scaffold(paths: list[Path], db: Path):
    import duckdb

    con = duckdb.connect(str(db))
    con.execute(SCHEMA.read_text())
    for root in paths:
        logs = sorted(root.rglob("*.log")) if root.is_dir() else [root]
        logs = logs + sorted(root.rglob("server.log")) if root.is_dir() else logs
        for log in dict.fromkeys(logs):
            _ingest_log(con, log)
    return con


def _ingest_log(con, log: Path) -> None:
    run_json_path = log.parent / "run.json"
    run_json = json.loads(run_json_path.read_text()) if log.name == "server.log" and run_json_path.exists() else None
    name = run_json["run_name"] if run_json else log.stem
    bench_path = log.parent / "bench.jsonl" if run_json else log.with_name(log.stem + ".bench.jsonl")
    run_id = hashlib.sha1(str(log.resolve()).encode()).hexdigest()[:12]
    src = str(log)
    spec_algo = None
    tp_size = None
    start = ready = health = graph_end = None
    for line_no, raw in enumerate(log.read_text(errors="replace").splitlines(), 1):
        if "NCCL INFO" in raw:
            m = NCCL_ENV.search(raw)
            if m:
                con.execute("INSERT INTO nccl_events (run_id, source_file, line_no, launch_no, kind, name, value) "
                            "VALUES (?, ?, ?, 1, 'env', ?, ?)", [run_id, src, line_no, m.group(1), m.group(2)])
            m = NCCL_VERSION.search(raw)
            if m:
                con.execute("INSERT INTO nccl_events (run_id, source_file, line_no, launch_no, kind, name, value) "
                            "VALUES (?, ?, ?, 1, 'version', 'nccl', ?)", [run_id, src, line_no, m.group(1)])
            continue
        m = PREFIX.match(raw)
        if not m:
            continue
        ts, rank, msg = _ts(m.group(1)), m.group(2), m.group(3)
        rank = int(rank) if rank is not None else None
        if msg.startswith("server_args="):
            start = ts
            sa = re.search(r"speculative_algorithm=('?\w+'?)", msg)
            spec_algo = None if not sa or sa.group(1) == "None" else sa.group(1).strip("'")
            tp = re.search(r"tp_size=(\d+)", msg)
            tp_size = int(tp.group(1)) if tp else None
            for key in ("speculative_algorithm", "speculative_num_steps", "max_running_requests", "cuda_graph_max_bs"):
                v = re.search(rf"\b{key}=([^,]+)", msg)
                if v:
                    con.execute("INSERT INTO server_args (run_id, source_file, line_no, launch_no, ts, name, value) "
                                "VALUES (?, ?, ?, 1, ?, ?, ?)", [run_id, src, line_no, ts, key, v.group(1)])
        elif "CUDA graph end" in msg:
            graph_end = ts
        elif "fired up and ready to roll" in msg and ready is None:
            ready = ts
        elif (h := HEALTH.search(msg)) and h.group(1) == "200" and health is None:
            health = ts
        elif (d := DECODE.search(msg)):
            con.execute(
                "INSERT INTO decode_batches (run_id, source_file, line_no, launch_no, ts, tp_rank, running_req, num_tokens, "
                "accept_len, cuda_graph, gen_throughput_tok_s, queue_req, graph_kind) VALUES (?,?,?,1,?,?,?,?,?,?,?,?, 'cuda graph')",
                [run_id, src, line_no, ts, rank, int(d.group(1)), int(d.group(2)),
                 float(d.group(3)) if d.group(3) else None, d.group(4) == "True", float(d.group(5)), int(d.group(6))])
        elif (p := PREFILL.search(msg)):
            con.execute("INSERT INTO prefill_batches (run_id, source_file, line_no, launch_no, ts, tp_rank, new_seq, new_tokens, "
                        "running_req) VALUES (?,?,?,1,?,?,?,?,?)",
                        [run_id, src, line_no, ts, rank, int(p.group(1)), int(p.group(2)), int(p.group(3))])
        elif (c := CYCLE.search(msg)):
            g = c.groups()
            con.execute("INSERT INTO spec_cycles VALUES (?,?,?,1,?,?,?,?,?,?,?,?,?,?,?)",
                        [run_id, src, line_no, ts, rank, int(g[0]), int(g[1]), *map(float, g[2:7]), int(g[7]), int(g[8])])
    con.execute("INSERT INTO launches VALUES (?, ?, 1, 1, 0, ?, ?, ?, ?, NULL)", [run_id, src, start, ready, health, graph_end])
    env = run_json["env"] if run_json else None
    con.execute(
        "INSERT INTO runs (run_id, run_name, cell, factors, launch_index, source_dir, sglang_version, model_path, "
        "speculative_algorithm, tp_size, hostname, gpu_name, env, argv, run_json, outcome) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, '/tmp/t3', ?, ?, ?, ?, ?, ?, ?, ?)",
        [run_id, name, run_json and run_json["cell"], json.dumps(run_json["factors"]) if run_json else None,
         run_json and run_json["launch"], str(log.parent), "0.5.14", spec_algo, tp_size,
         run_json and run_json["hostname"], run_json and run_json["gpus"][0]["name"],
         json.dumps(env) if env else None, json.dumps(run_json["argv"]) if run_json else None,
         json.dumps(run_json) if run_json else None, run_json and run_json["outcome"]])
    if bench_path.exists():
        for line_no, raw in enumerate(bench_path.read_text().splitlines(), 1):
            b = json.loads(raw)
            meta = b.get("meta_info", {})
            con.execute(
                "INSERT INTO bench_requests (run_id, source_file, line_no, request_index, warmup, latency_s, prompt_tokens, "
                "completion_tokens, output_tok_s, spec_accept_length, e2e_latency_s, source_kind) VALUES (?,?,?,?,?,?,?,?,?,?,?, 'bench_jsonl')",
                [run_id, str(bench_path), line_no, b["i"], b["warmup"], b["latency_s"], meta.get("prompt_tokens"),
                 b["completion_tokens"], b["tok_per_s"], meta.get("spec_accept_length"), meta.get("e2e_latency")])
