"""Test scaffolding: NcclFrames built straight from the real fixture logs with a few regexes.

Stands in for `speclogs ingest` + the NCCL grammar so the evidence functions can be
tested on the real lines; tests/test_nccl_evidence.py also runs them on the real ingest when it exists.
Rows follow schema.sql's nccl_events / server_events / server_args columns.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from speclogs.analysis.nccl import NcclFrames

NCCL = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<rank>\d+)\] NCCL INFO (?P<message>.*)$")
SGLANG = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: (?P<tags>[^\]]*))?\] (?P<message>.*)$")
GRAPHS = {"target verify": "target_verify", "draft decode": "draft_decode", "draft extend": "draft_extend",
          "target decode": "decode", "target prefill": "prefill"}


def nccl_event_rows(run_id: str, path: Path) -> list[dict]:
    rows = []
    launch_no = 0
    for line_no, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if "server_args=ServerArgs(" in line:
            launch_no += 1                      # a new server start (the ingest splits launches the same way)
        match = NCCL.search(line)
        if not match:
            continue
        message = match["message"]
        row = {"run_id": run_id, "source_file": str(path), "line_no": line_no, "launch_no": max(launch_no, 1), "host": match["host"],
               "pid": int(match["pid"]), "tid": int(match["tid"]), "nccl_rank": int(match["rank"]), "kind": "other",
               "name": None, "value": None, "collective": None, "bytes": None, "algo": None, "proto": None,
               "channel_lo": None, "channel_hi": None, "channel": None, "peer_from": None, "peer_to": None,
               "transport": None, "message": message}
        if m := re.fullmatch(r"NCCL version (\S+)", message):
            row.update(kind="version", name="nccl", value=m[1])
        elif m := re.fullmatch(r"(NCCL_\w+) set by environment to (.*?)\.?", message):
            row.update(kind="env", name=m[1], value=m[2])
        elif m := re.fullmatch(r"(\w+): (\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}", message):
            row.update(kind="tuning", collective=m[1], bytes=int(m[2]), algo=m[3], proto=m[4],
                       channel_lo=int(m[5]), channel_hi=int(m[6]))
        elif m := re.fullmatch(r"Channel (\d+)/\d+ : (\d+)\[\d+\] -> (\d+)\[\d+\] via (\S+)", message):
            row.update(kind="transport", channel=int(m[1]), peer_from=int(m[2]), peer_to=int(m[3]), transport=m[4])
        elif re.fullmatch(r"\d+ coll channels, .*", message) or re.fullmatch(r"Channel \d+/\d+ : [\d ]+", message):
            row.update(kind="channels")
        rows.append(row)
    return rows


def marker_rows(run_id: str, path: Path) -> list[dict]:
    rows = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        match = SGLANG.match(line)
        if not match:
            continue
        tags = match["tags"] or ""
        tp_rank = int(tags[2:]) if tags.startswith("TP") and tags[2:].isdigit() else None
        message = match["message"]
        kind = graph = None
        if m := re.match(r"Capture (.+?) CUDA graph (begin|end)\.", message):
            kind, graph = f"cuda_graph_{m[2]}", GRAPHS.get(m[1], m[1].replace(" ", "_"))
        elif message.startswith("The server is fired up and ready to roll!"):
            kind = "ready"
        elif message.startswith("Init torch distributed begin."):
            kind = "init_dist_begin"
        elif message.startswith("Init torch distributed ends."):
            kind = "init_dist_end"
        if kind:
            rows.append({"run_id": run_id, "source_file": str(path), "line_no": line_no, "tp_rank": tp_rank,
                         "kind": kind, "graph": graph})
    return rows


def server_arg_rows(run_id: str, path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8", errors="replace")
    rows = []
    for name in ("tp_size", "disable_custom_all_reduce", "speculative_num_draft_tokens", "speculative_algorithm"):
        match = re.search(rf"[(, ]{name}=([^,)]+)", text)
        if match:
            rows.append({"run_id": run_id, "name": name, "value": match[1].strip("'")})
    return rows


def frames_from_logs(paths: list[Path], *, envs: dict[str, dict] | None = None, spec_cycles: list[dict] | None = None,
                     probe: pl.DataFrame | None = None) -> NcclFrames:
    import json

    envs = envs or {}
    runs = pl.DataFrame([{"run_id": path.stem, "run_name": path.stem, "tp_size": 2,
                          "env": json.dumps(envs[path.stem]) if path.stem in envs else None} for path in paths],
                        schema={"run_id": pl.String, "run_name": pl.String, "tp_size": pl.Int32, "env": pl.String})
    events = [row for path in paths for row in nccl_event_rows(path.stem, path)]
    markers = [row for path in paths for row in marker_rows(path.stem, path)]
    args = [row for path in paths for row in server_arg_rows(path.stem, path)]
    return NcclFrames(
        runs=runs,
        nccl_events=pl.DataFrame(events, infer_schema_length=None) if events else pl.DataFrame(
            schema={"run_id": pl.String, "source_file": pl.String, "line_no": pl.Int64, "launch_no": pl.Int64, "pid": pl.Int64,
                    "nccl_rank": pl.Int64, "kind": pl.String, "name": pl.String, "value": pl.String,
                    "collective": pl.String, "bytes": pl.Int64, "algo": pl.String, "proto": pl.String,
                    "channel": pl.Int64, "peer_from": pl.Int64, "peer_to": pl.Int64, "transport": pl.String,
                    "message": pl.String}),
        markers=pl.DataFrame(markers, schema={"run_id": pl.String, "source_file": pl.String, "line_no": pl.Int64,
                                              "tp_rank": pl.Int64, "kind": pl.String, "graph": pl.String}),
        server_args=pl.DataFrame(args, schema={"run_id": pl.String, "name": pl.String, "value": pl.String}),
        spec_cycles=pl.DataFrame(spec_cycles or [], schema={"run_id": pl.String, "batch_size": pl.Int64, "verify_ms": pl.Float64}),
        probe=probe if probe is not None else pl.DataFrame(),
    )
