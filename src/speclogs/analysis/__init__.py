"""Statistics over the DuckDB tables: `compare_runs(con, arms, factors, confidence=0.95) -> Comparison`.

Pure functions over polars frames (speclogs.analysis.stats / steady / lint / compare) behind one thin loader
(speclogs.analysis.load). Results are frozen dataclasses (speclogs.analysis.results) with warnings as data.
"""

from speclogs.analysis.compare import compare_runs, compare_tables, parse_factor_options, parse_percent, parse_reference
from speclogs.analysis.results import (
    Arm,
    Attribution,
    Comparison,
    Counterfactual,
    Effect,
    Estimate,
    Finding,
    PhaseStat,
    RatioComparison,
    Term,
)

__all__ = [
    "Arm", "Attribution", "Comparison", "Counterfactual", "Effect", "Estimate", "Finding", "PhaseStat",
    "RatioComparison", "Term", "compare_runs", "compare_tables", "parse_factor_options", "parse_percent", "parse_reference",
]
