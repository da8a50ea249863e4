"""`--format json`: the Comparison as a JSON document (schema 'speclogs.report/1', documented in docs/report.md);
non-finite numbers become null."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from typing import Any

from speclogs.analysis.results import Comparison, Term
from speclogs.redact import redact_json

SCHEMA = "speclogs.report/1"


def _clean(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = _fields(value)
    elif hasattr(value, "to_dicts"):  # a polars frame inside third-party evidence
        value = value.to_dicts()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):  # e.g. a benchmark window's bounds
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return value


def _term(term: Term) -> dict:
    return {"name": term.name, "log_ratio": term.log_ratio, "log_ci_low": term.ci_low, "log_ci_high": term.ci_high,
            "ratio": math.exp(term.log_ratio), "ci_low": math.exp(term.ci_low), "ci_high": math.exp(term.ci_high)}


def _fields(obj, **renamed: str) -> dict:
    """A dataclass' fields in order, some under their JSON names."""
    return {renamed.get(f.name, f.name): getattr(obj, f.name) for f in dataclasses.fields(obj)}


def comparison_to_dict(comparison: Comparison) -> dict:
    """The JSON document as a dict (see docs/report.md for every field)."""
    arms = [_fields(arm, cycle_ms="step_ms") for arm in comparison.arms]
    attribution = [{**_fields(a, cycle_ms_a="step_ms_a", cycle_ms_b="step_ms_b"), "total": _term(a.total),
                    "terms": [_term(t) for t in a.terms], "phase_terms": [_term(t) for t in a.phase_terms]}
                   for a in comparison.attributions]
    # the Comparison's fields as they are, but the frames behind the charts (timeline, accept_hist, warmup_spans)
    plain = ("reference", "confidence", "min_effect", "warnings", "ranking", "comparisons", "phases", "factors", "effects",
             "methods", "nccl", "signals", "startup", "whatif", "draft_positions")
    document = {"schema": SCHEMA, "arms": arms, "attribution": attribution, **{name: getattr(comparison, name) for name in plain}}
    return redact_json(_clean(document))


def to_json(value: Any) -> str:
    """Any result (a dataclass, dict, list …) as a JSON document: non-finite numbers null, secrets redacted."""
    return json.dumps(redact_json(_clean(value)), indent=2, allow_nan=False)


def render_json(comparison: Comparison) -> str:
    return json.dumps(comparison_to_dict(comparison), indent=2, allow_nan=False) + "\n"
