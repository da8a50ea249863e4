"""Parsing inputs into table frames: logs (grammars), benchmark JSON, run.json, NCCL probes.

This package never touches DuckDB (speclogs.store writes what it parses). pipeline.py reads top to bottom:
discover (sources.py) → read (sources.py) → split (lines.py) → classify (classify.py) → assemble
(records.py) → the store's writer. Public API:
    run_pipeline(paths, sink, engine_for, …) -> Tally        the whole ingest, into a sink (speclogs.store.writer)
    discover_inputs(paths, run_name=None) -> Discovery       which files, which runs, what was skipped
    read_input(InputFile) -> RawInput                        bytes made safe (gzip, binary, NUL, UTF-8)
    parse_log_chunks(data, engine) -> ChunkResult…           one log, chunk by chunk
    parse_bench_jsonl / parse_bench_json / parse_run_json / parse_nccl_probe -> JsonFileResult
    parse_prometheus_file (*.prom → metrics) / parse_request_export (→ requests) -> JsonFileResult
    read_request_lines + RequestLog (a log's --log-requests lines read, then paired → requests),
    with_bench_serving_requests (bench_serving arrays → requests)
    parse_server_args (reprs.py: the server_args dump)
    IngestSummary, ProgressEvent

Names are imported lazily: `speclogs.ingest.nccl_probe` is also imported on GPU boxes without polars.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "JsonFileResult": "speclogs.ingest.jsonfiles",
    "parse_bench_json": "speclogs.ingest.jsonfiles",
    "parse_bench_jsonl": "speclogs.ingest.jsonfiles",
    "parse_nccl_probe": "speclogs.ingest.jsonfiles",
    "parse_run_json": "speclogs.ingest.jsonfiles",
    "DEFAULT_CHUNK_BYTES": "speclogs.ingest.pipeline",
    "parse_log_chunks": "speclogs.ingest.pipeline",
    "run_pipeline": "speclogs.ingest.pipeline",
    "ChunkResult": "speclogs.ingest.records",
    "Discovery": "speclogs.ingest.sources",
    "InputFile": "speclogs.ingest.sources",
    "RawInput": "speclogs.ingest.sources",
    "RunRef": "speclogs.ingest.sources",
    "discover_inputs": "speclogs.ingest.sources",
    "read_input": "speclogs.ingest.sources",
    "IngestSummary": "speclogs.ingest.summary",
    "parse_prometheus_file": "speclogs.ingest.prometheus",
    "RequestLog": "speclogs.ingest.requests",
    "read_request_lines": "speclogs.ingest.requests",
    "parse_server_args": "speclogs.ingest.reprs",
    "parse_request_export": "speclogs.ingest.requests",
    "with_bench_serving_requests": "speclogs.ingest.requests",
    "ProgressEvent": "speclogs.ingest.summary",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'speclogs.ingest' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
