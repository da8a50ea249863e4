"""A query result written out as CSV, JSON or Parquet, batch by batch (constant memory, whatever the row count).

- CSV: a header, then the rows (pyarrow's writer; quoting only where needed; NULL is an empty field). Lists,
  structs, maps and intervals are written as DuckDB prints them (`[1, 2]`, `{'x': 1}`).
- JSON: one array of objects; valid JSON — NaN and ±Infinity are null, a JSON column is its JSON, not a string.
- NDJSON: the same objects, one per line, no array around them.
- Parquet: the Arrow batches as they come (one file; Parquet holds one result).
"""

from __future__ import annotations

import json
from typing import IO, Any

from speclogs.store.query import StatementResult, json_value

# Column types CSV cannot hold as such: DuckDB writes them as text first (its own notation).
_NESTED_PREFIXES = ("STRUCT(", "MAP(", "UNION(", "INTERVAL")


def _needs_text(type_name: str) -> bool:
    return type_name.startswith(_NESTED_PREFIXES) or type_name.endswith("]")


def write_csv(result: StatementResult, out: IO[bytes]) -> int:
    """The result as CSV on the binary stream `out` (quotes only where a value needs them); returns the rows written.

    Batches go through pyarrow's CSV writer; one holding a comma, quote or line break in some value goes through
    Python's csv module instead, from the same text pyarrow makes of each value (so both write `true`, `nan`,
    `2026-11-30 10:19:01.000000` alike)."""
    import csv
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pa_csv

    batches = result.batches(text_columns=tuple(c for c, t in zip(result.columns, result.types) if _needs_text(t)))
    header = io.StringIO()
    csv.writer(header, lineterminator="\n").writerow(result.columns)
    out.write(header.getvalue().encode())
    plain = pa_csv.WriteOptions(include_header=False, quoting_style="none")
    rows = 0
    for batch in batches:
        chunk = io.BytesIO()   # one batch at a time, whole: a batch that fails half-way writes nothing of itself
        try:
            pa_csv.write_csv(batch, chunk, write_options=plain)
            out.write(chunk.getvalue())
        except pa.ArrowInvalid:   # a value needs quotes
            text = io.StringIO()
            columns = [pc.cast(column, pa.string()).to_pylist() for column in batch.columns]
            csv.writer(text, lineterminator="\n").writerows(
                ["" if value is None else value for value in row] for row in zip(*columns))
            out.write(text.getvalue().encode())
        rows += batch.num_rows
    return rows


def write_json(result: StatementResult, out: IO[str], *, ndjson: bool = False) -> int:
    """The result as one JSON array of objects on the text stream `out`, one object per line (`ndjson`: the objects
    alone, one per line); returns the rows.

    DuckDB writes each row's JSON (`to_json`), with NaN and ±Infinity made null before (float columns and lists of
    floats in SQL; any other row that still has one is fixed here)."""
    batches = _json_rows(result)   # (an error binding the statement comes before anything is written)
    rows = 0
    separator = "\n" if ndjson else ",\n"
    if not ndjson:
        out.write("[")
    for batch in batches:
        texts = batch.column(0).to_pylist()
        joined = separator.join(texts)
        if "NaN" in joined or "Infinity" in joined:   # maybe inside a struct: re-read those rows (strings may say NaN)
            joined = separator.join(_dumps(json_value(json.loads(text))) if ("NaN" in text or "Infinity" in text) else text
                                 for text in texts)
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
        fields.append(f"{_quoted_name(key)} := {column}")
    return result.projected(f"to_json(struct_pack({', '.join(fields)}))").batches()


def _quoted_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _dumps(record: Any) -> str:
    return json.dumps(record, default=str, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def write_parquet(result: StatementResult, path) -> int:  # noqa: ANN001 - str or Path
    """The result as a Parquet file at `path`; returns the rows written."""
    import pyarrow.parquet as pq

    batches = result.batches()
    rows = 0
    with pq.ParquetWriter(str(path), batches.schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows
