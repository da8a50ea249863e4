"""Prometheus text snapshots (`*.prom`: what `GET /metrics` answered) → a `metrics` row per sample line (its family and
type from the `# TYPE` line before it, labels as JSON, the value and its text as printed), a `metric_types` row per
comment line, an `unparsed_lines` row per other line: every line is accounted for. Every row carries its scrape (ts,
window_name, phase) from the launch's run.json, else the phase its file name says.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import polars as pl

from speclogs.ingest.jsonfiles import accounted
from speclogs.ingest.sources import PROM_SUFFIX
from speclogs.ingest.summary import FileAccount
from speclogs.runrecord import read_run_json

PHASES = ("before", "during", "after")
# Sample names of one family: the family itself, or its histogram / summary / counter series.
_SERIES_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total", "_gsum", "_gcount", "_info")
_NAME = r"[A-Za-z_:][A-Za-z0-9_:]*"
_SAMPLE = re.compile(rf"(?P<name>{_NAME})(?:\{{(?P<labels>.*)\}})?[ \t]+(?P<value>\S+)(?:[ \t]+(?P<timestamp>-?[0-9]+))?[ \t]*")
_LABEL = re.compile(r'[ \t]*(?P<key>[A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"(?P<value>(?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_LABELS = re.compile(f"(?:{_LABEL.pattern})*")
_COMMENT = re.compile(rf"#[ \t]*(?P<directive>HELP|TYPE|UNIT)[ \t]+(?P<family>{_NAME})(?:[ \t]+(?P<text>.*))?")
_PHASE_IN_NAME = re.compile(r"(?:^|[-_.])(before|during|after)(?:[-_.]?[0-9]+)?$")

_SCRAPE_COLUMNS = {"line_no": pl.Int64, "ts": pl.Datetime("us"), "window_name": pl.Utf8, "phase": pl.Utf8}
METRIC_COLUMNS = _SCRAPE_COLUMNS | {"name": pl.Utf8, "family": pl.Utf8, "metric_type": pl.Utf8, "labels": pl.Utf8,
                                    "value": pl.Float64, "value_text": pl.Utf8, "sample_ts_ms": pl.Int64}
TYPE_COLUMNS = _SCRAPE_COLUMNS | {"family": pl.Utf8, "directive": pl.Utf8, "text": pl.Utf8}


def parse_prometheus_file(text: str, path: Path | None) -> tuple[dict[str, pl.DataFrame], FileAccount]:
    samples: list[tuple] = []
    comments: list[tuple] = []
    unparsed: list[tuple[int, str, str]] = []
    types: dict[str, str] = {}
    family: str | None = None
    head = scrape_for(path) if path is not None else (None, None, None)
    lines = text.split("\n")
    for line_no, raw in enumerate(lines[:-1] if lines[-1] == "" else lines, start=1):
        line = raw.removesuffix("\r")
        if not line.strip():
            unparsed.append((line_no, "empty line", raw))
        elif line.lstrip().startswith("#"):
            found = _COMMENT.fullmatch(line.strip())
            if found is None:
                comments.append((line_no, *head, None, "comment", line.strip().lstrip("#").strip()))
                continue
            directive, name, rest = found.group("directive", "family", "text")
            rest = rest or ""
            if directive == "TYPE":
                types[name] = rest.strip()
                family = name
            comments.append((line_no, *head, name, directive, rest))
        elif (sample := _SAMPLE.fullmatch(line)) is None:
            unparsed.append((line_no, "not a Prometheus sample line (name{labels} value [timestamp])", raw))
        else:
            name, value_text, timestamp = sample.group("name", "value", "timestamp")
            labels = _labels(sample.group("labels"))
            try:
                value = float(value_text)  # (it reads +Inf, -Inf, NaN as written)
            except ValueError:
                value = None
            if labels is None or value is None:
                what = "labels" if labels is None else f"value {value_text!r}"
                unparsed.append((line_no, f"Prometheus sample line with unreadable {what}", raw))
                continue
            owner = family if family is not None and (name == family or name.removeprefix(family) in _SERIES_SUFFIXES) else name
            samples.append((line_no, *head, name, owner, types.get(owner, "untyped"), json.dumps(labels), value, value_text,
                            int(timestamp) if timestamp is not None else None))
    tables: dict[str, pl.DataFrame] = {}
    if samples:
        tables["metrics"] = pl.DataFrame(samples, schema=METRIC_COLUMNS, orient="row")
    if comments:
        tables["metric_types"] = pl.DataFrame(comments, schema=TYPE_COLUMNS, orient="row")
    warnings = [] if samples else ["no Prometheus samples: is this what /metrics answered (was --enable-metrics on)?"]
    return accounted(text, tables, unparsed, warnings=warnings)


def _labels(text: str | None) -> dict[str, str] | None:
    """'a="x",b="y\\"z"' → {'a': 'x', 'b': 'y"z'}; None when the text is not a label list."""
    if text is None or not text.strip():
        return {}
    if not _LABELS.fullmatch(text):
        return None
    return {found["key"]: re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], found["value"])
            for found in _LABEL.finditer(text)}


def scrape_for(path: Path) -> tuple[datetime | None, str | None, str | None]:
    """(ts, window_name, phase) of a .prom file's scrape: its run.json entry, else the phase its name says."""
    record = read_run_json(path.parent)
    for window in record.windows if record is not None else ():
        scrapes = window.get("scrapes") if isinstance(window, dict) else None
        for entry in scrapes if isinstance(scrapes, list) else ():
            if isinstance(entry, dict) and entry.get("file") == path.name:
                ts = entry.get("ts")
                try:
                    ts = datetime.fromisoformat(ts) if isinstance(ts, str) else None
                except ValueError:
                    ts = None
                name = window.get("name")
                return ts, name if isinstance(name, str) and name else None, entry.get("phase") if entry.get("phase") in PHASES else None
    found = _PHASE_IN_NAME.search(path.name.removesuffix(PROM_SUFFIX) if path.name.endswith(PROM_SUFFIX) else path.stem)
    return None, None, found.group(1) if found else None
