"""Parsing inputs into table frames: logs (grammars), benchmark JSON, run.json, NCCL probes, Prometheus snapshots.

This package never touches DuckDB (speclogs.store writes what it parses). pipeline.py reads top to bottom:
discover (sources.py) → read (sources.py) → split (lines.py) → classify (classify.py) → assemble (records.py) → the
store's writer; summary.py holds the account of an ingest (FileAccount, IngestSummary)..
"""
