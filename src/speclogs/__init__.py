"""speclogs: forensics for SGLang speculative-decoding runs.

Top-level API (imported lazily: `import speclogs` stays cheap and works on a GPU box without duckdb/polars):

    speclogs.ingest_paths(paths, db_path, replace=False, run_name=None) -> IngestSummary
    speclogs.connect(db_path, read_only=False) -> duckdb connection with the speclogs schema
    speclogs.run_query(db_path, sql) -> QueryResult
"""

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
