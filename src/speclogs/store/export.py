"""A query result written out as CSV, JSON, NDJSON or Parquet, batch by batch (constant memory, whatever the row count).

- CSV: a header, then the rows, each value as DuckDB prints it (`true`, `nan`, `[1, 2]`, `{'x': 1}`); quoting only
  where needed; NULL is an empty field.
- JSON: one array of objects; valid JSON — NaN and ±Infinity are null, a JSON column is its JSON, not a string.
- NDJSON: the same objects, one per line, no array around them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from contextlib import nullcontext
from pathlib import Path
from typing import IO

from speclogs.store.query import StatementResult, quoted

# One CSV field in SQL: a value's text, quoted where it holds a comma, a quote or a line break; NULL is empty.
_CSV_FIELD = ("CASE WHEN {v} IS NULL THEN '' WHEN contains({v}, ',') OR contains({v}, '\"') OR contains({v}, chr(10)) "
              "OR contains({v}, chr(13)) THEN '\"' || replace({v}, '\"', '\"\"') || '\"' ELSE {v} END")


def write_csv(result: StatementResult, out: IO[bytes]) -> int:
    """The result as CSV on the binary stream `out` (each row's line made by DuckDB); returns the rows written."""
    import csv
    import io

    line = " || ',' || ".join(_CSV_FIELD.format(v=f"CAST(#{i} AS VARCHAR)") for i in range(1, len(result.columns) + 1))
    batches = result.projected(line).batches()   # (an error binding the statement comes before anything is written)
    header = io.StringIO()
    csv.writer(header, lineterminator="\n").writerow(result.columns)
    out.write(header.getvalue().encode())
    rows = 0
    for batch in batches:
        out.write("".join(row[0] + "\n" for row in batch).encode())
        rows += len(batch)
    return rows


def write_json(result: StatementResult, out: IO[bytes], *, ndjson: bool = False) -> int:
    """The result as JSON (or NDJSON) on the binary stream `out`, one object per line; returns the rows. DuckDB writes
    each row's JSON, with NaN and ±Infinity made null in SQL (float columns and lists); a row that still has one (in
    a struct) is fixed here."""
    batches = _json_rows(result)   # (an error binding the statement comes before anything is written)
    rows = 0
    separator = "\n" if ndjson else ",\n"
    if not ndjson:
        out.write(b"[")
    for batch in batches:
        texts = [row[0] for row in batch]
        joined = separator.join(texts)
        if "NaN" in joined or "Infinity" in joined:   # maybe inside a struct: re-read those rows (strings may say NaN)
            joined = separator.join(_finite(text) if ("NaN" in text or "Infinity" in text) else text for text in texts)
        if texts:
            out.write(((separator if rows else ("" if ndjson else "\n")) + joined).encode())
        rows += len(texts)
    out.write((b"\n" if rows else b"") if ndjson else (b"\n]\n" if rows else b"]\n"))
    return rows


def write_results(results: Iterable[StatementResult], output_format: str, output: Path | None) -> None:
    """Each statement's result as csv, json, ndjson (one after another) or parquet (one), into `output` or on stdout."""
    if output_format == "parquet":
        for result in results:
            result.write_parquet(output)
        return
    sys.stdout.flush()
    with open(output, "wb") if output is not None else nullcontext(sys.stdout.buffer) as sink:
        try:
            for index, result in enumerate(results):
                if index and output_format != "ndjson":
                    sink.write(b"\n")
                if output_format == "csv":
                    write_csv(result, sink)
                else:
                    write_json(result, sink, ndjson=output_format == "ndjson")
                sink.flush()
        except BrokenPipeError:   # `speclogs sql … | head`: the reader has what it wanted
            devnull = os.open(os.devnull, os.O_WRONLY)   # no second error when Python flushes stdout at exit
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


def _json_rows(result: StatementResult):
    """Batches of one column: each row as JSON text, made by DuckDB (a repeated column name gets _1, _2 …)."""
    fields = []
    seen: dict[str, int] = {}
    for position, (name, type_name) in enumerate(zip(result.columns, result.types), start=1):
        column = f"#{position}"
        if type_name in ("DOUBLE", "FLOAT"):
            column = f"CASE WHEN isfinite({column}) THEN {column} END"
        elif type_name in ("DOUBLE[]", "FLOAT[]"):
            column = f"list_transform({column}, lambda x: CASE WHEN isfinite(x) THEN x END)"
        key = name if name not in seen else f"{name}_{seen[name]}"
        seen[name] = seen.get(name, 0) + 1
        fields.append(f"{quoted(key)} := {column}")
    return result.projected(f"to_json(struct_pack({', '.join(fields)}))").batches()


def _finite(text: str) -> str:
    """A row's JSON with NaN and ±Infinity as null."""
    return json.dumps(json.loads(text, parse_constant=lambda _: None), ensure_ascii=False, separators=(",", ":"))
