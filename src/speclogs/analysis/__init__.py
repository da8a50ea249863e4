"""Statistics over the DuckDB tables: `compare_runs(con, arms, factors, confidence=0.95) -> Comparison`; pure functions
over polars frames behind one loader (load.py), frozen results (results.py) with warnings as data."""

from speclogs.analysis.compare import compare_runs, compare_tables, parse_factor_options, parse_percent, parse_reference
from speclogs.analysis.results import Comparison

__all__ = ["Comparison", "compare_runs", "compare_tables", "parse_factor_options", "parse_percent", "parse_reference"]
