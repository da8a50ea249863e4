"""Prometheus text snapshots (`*.prom`: what `GET /metrics` answered) → `metrics` and `metric_types` rows.

One `metrics` row per sample line (counters, gauges, histogram/summary series alike, any metric name): the sample
name as printed, its family and type (from the `# TYPE` line before it), labels as JSON, the value (and its text as
printed: `2.0955e+06`, `+Inf`, `NaN`), the optional exposition timestamp. One `metric_types` row per comment line
(`# HELP` / `# TYPE` / `# UNIT` / any other `#` line) with its text. A blank or malformed line is an
`unparsed_lines` row with its raw text, so every line of the file is accounted for.

Every row also carries the scrape it came from: `ts` (when the launcher scraped), `window_name` and `phase`
(before / during / after a benchmark window). The launcher records them in the launch's run.json (`windows[].scrapes[]`,
keyed by file name); a .prom file without such a record gets its phase from its name (`metrics_before.prom` →
before) and NULL ts and window.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
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
_COMMENT = re.compile(rf"#[ \t]*(?P<directive>HELP|TYPE|UNIT)[ \t]+(?P<family>{_NAME})(?:[ \t]+(?P<text>.*))?")
_PHASE_IN_NAME = re.compile(r"(?:^|[-_.])(before|during|after)(?:[-_.]?[0-9]+)?$")

METRIC_COLUMNS = {
    "line_no": pl.Int64, "ts": pl.Datetime("us"), "window_name": pl.Utf8, "phase": pl.Utf8, "name": pl.Utf8,
    "family": pl.Utf8, "metric_type": pl.Utf8, "labels": pl.Utf8, "value": pl.Float64, "value_text": pl.Utf8,
    "sample_ts_ms": pl.Int64,
}
TYPE_COLUMNS = {
    "line_no": pl.Int64, "ts": pl.Datetime("us"), "window_name": pl.Utf8, "phase": pl.Utf8, "family": pl.Utf8,
    "directive": pl.Utf8, "text": pl.Utf8,
}


@dataclass(frozen=True)
class Scrape:
    """Which scrape a .prom file is: when (local time, like SGLang's log), in which benchmark window, which phase."""

    ts: datetime | None = None
    window_name: str | None = None
    phase: str | None = None


def parse_prometheus_file(text: str, path: Path | None) -> tuple[dict[str, pl.DataFrame], FileAccount]:
    """A .prom file on disk: its scrape from the launch's run.json (or its name), then `parse_prometheus`."""
    return parse_prometheus(text, scrape_for(path) if path is not None else Scrape())


def parse_prometheus(text: str, scrape: Scrape = Scrape()) -> tuple[dict[str, pl.DataFrame], FileAccount]:
    """Prometheus exposition text → metrics / metric_types / unparsed_lines frames (no run_id / source_file)."""
    samples: list[tuple] = []
    comments: list[tuple] = []
    unparsed: list[tuple[int, str, str]] = []
    types: dict[str, str] = {}
    family: str | None = None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    head = (scrape.ts, scrape.window_name, scrape.phase)
    for line_no, raw in enumerate(lines, start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line.strip():
            unparsed.append((line_no, "empty line", raw))
            continue
        if line.lstrip().startswith("#"):
            found = _COMMENT.fullmatch(line.strip())
            if found is None:
                comments.append((line_no, *head, None, "comment", line.strip().lstrip("#").strip()))
                continue
            directive, name, rest = found.group("directive"), found.group("family"), found.group("text") or ""
            if directive == "TYPE":
                types[name] = rest.strip()
                family = name
            comments.append((line_no, *head, name, directive, rest))
            continue
        sample = _SAMPLE.fullmatch(line)
        if sample is None:
            unparsed.append((line_no, "not a Prometheus sample line (name{labels} value [timestamp])", raw))
            continue
        labels = _labels(sample.group("labels"))
        value = _value(sample.group("value"))
        if labels is None or value is None:
            what = "labels" if labels is None else f"value {sample.group('value')!r}"
            unparsed.append((line_no, f"Prometheus sample line with unreadable {what}", raw))
            continue
        name = sample.group("name")
        owner = family if family is not None and _belongs(name, family) else name
        timestamp = sample.group("timestamp")
        samples.append((line_no, *head, name, owner, types.get(owner, "untyped"), json.dumps(labels), value,
                        sample.group("value"), int(timestamp) if timestamp is not None else None))
    tables: dict[str, pl.DataFrame] = {}
    if samples:
        tables["metrics"] = pl.DataFrame(samples, schema=METRIC_COLUMNS, orient="row")
    if comments:
        tables["metric_types"] = pl.DataFrame(comments, schema=TYPE_COLUMNS, orient="row")
    warnings = [] if samples else ["no Prometheus samples: is this what /metrics answered (was --enable-metrics on)?"]
    return accounted(text, tables, unparsed, warnings=warnings)


def _belongs(name: str, family: str) -> bool:
    return name == family or (name.startswith(family) and name[len(family):] in _SERIES_SUFFIXES)


def _labels(text: str | None) -> dict[str, str] | None:
    """'a="x",b="y\\"z"' → {'a': 'x', 'b': 'y"z'}; None when the text is not a label list."""
    if text is None or not text.strip():
        return {}
    labels: dict[str, str] = {}
    position = 0
    while position < len(text):
        found = _LABEL.match(text, position)
        if found is None or found.end() == position:
            return None
        labels[found.group("key")] = _unescape(found.group("value"))
        position = found.end()
    return labels


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _value(text: str) -> float | None:
    """A sample value: a float, or +Inf / -Inf / NaN as Prometheus writes them."""
    special = {"+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if text in special:
        return special[text]
    try:
        return float(text)
    except ValueError:
        return None


def scrape_for(path: Path) -> Scrape:
    """The scrape a .prom file records: the launch's run.json entry for its file name (`windows[].scrapes[]`), else
    the phase its name says (`…before.prom`, `…_after.prom`, `…-during-003.prom`)."""
    record = _run_json_scrape(path)
    if record is not None:
        return record
    stem = path.name[: -len(PROM_SUFFIX)] if path.name.endswith(PROM_SUFFIX) else path.stem
    found = _PHASE_IN_NAME.search(stem)
    return Scrape(phase=found.group(1) if found else None)


def _run_json_scrape(path: Path) -> Scrape | None:
    record = read_run_json(path.parent)
    for window in record.windows if record is not None else ():
        scrapes = window.get("scrapes") if isinstance(window, dict) else None
        for entry in scrapes if isinstance(scrapes, list) else ():
            if isinstance(entry, dict) and entry.get("file") == path.name:
                return Scrape(ts=_timestamp(entry.get("ts")), window_name=_text(window.get("name")),
                              phase=entry.get("phase") if entry.get("phase") in PHASES else None)
    return None


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
