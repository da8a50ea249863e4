"""Parsing inputs into table frames (speclogs.store writes them): pipeline.py runs discover and read (sources.py) →
split (lines.py) → classify (classify.py) → assemble (records.py); JSON and Prometheus inputs have readers of their own.
"""
