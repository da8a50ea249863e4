"""A query result written out as CSV or JSON, batch by batch (constant memory, whatever the row count).

- CSV: a header, then the rows, each value as DuckDB prints it (`true`, `nan`, `[1, 2]`, `{'x': 1}`); quoting only
  where needed; NULL is an empty field.
- JSON: one array of objects; valid JSON — NaN and ±Infinity are null, a JSON column is its JSON, not a string.
- NDJSON: the same objects, one per line, no array around them.
"""

from __future__ import annotations

import json
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


def write_json(result: StatementResult, out: IO[str], *, ndjson: bool = False) -> int:
    """The result as JSON (or NDJSON) on the text stream `out`, one object per line; returns the rows. DuckDB writes
    each row's JSON, with NaN and ±Infinity made null in SQL (float columns and lists); a row that still has one (in
    a struct) is fixed here."""
    batches = _json_rows(result)   # (an error binding the statement comes before anything is written)
    rows = 0
    separator = "\n" if ndjson else ",\n"
    if not ndjson:
        out.write("[")
    for batch in batches:
        texts = [row[0] for row in batch]
        joined = separator.join(texts)
        if "NaN" in joined or "Infinity" in joined:   # maybe inside a struct: re-read those rows (strings may say NaN)
            joined = separator.join(_finite(text) if ("NaN" in text or "Infinity" in text) else text for text in texts)
        if texts:
            out.write((separator if rows else ("" if ndjson else "\n")) + joined)
        rows += len(texts)
    if ndjson:
        out.write("\n" if rows else "")
    else:
        out.write("\n]\n" if rows else "]\n")
    return rows


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
