"""speclogs: forensics for SGLang speculative-decoding runs. The top-level API (ingest_paths, connect, run_query,
QueryResult, IngestSummary) loads on first use, so `import speclogs` works on a GPU box without duckdb or polars."""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "ingest_paths": "speclogs.store",
    "connect": "speclogs.store",
    "run_query": "speclogs.store",
    "QueryResult": "speclogs.store",
    "IngestSummary": "speclogs.ingest.summary",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'speclogs' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
