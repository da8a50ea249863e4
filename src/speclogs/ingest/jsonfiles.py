"""JSON inputs: benchmark files (→ bench_requests), launcher run.json (→ runs), NCCL probe results (→ nccl_probe).

Benchmark shapes (source_kind column): bench_jsonl, one object per request (`*.bench.jsonl`, the launcher's
`bench.jsonl`: i, warmup, latency_s, tok_per_s, meta_info{…}); bench_json, the older `*.bench.json`, one array of
{latency_s, tok_s, meta}, element 0 the warm-up; bench_serving_jsonl, `sglang.bench_serving` output, one summary object
per benchmark run. A line that is not JSON, or JSON of an unknown shape, becomes an unparsed_lines row.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from json.encoder import c_make_encoder, encode_basestring_ascii

import polars as pl

from speclogs.errors import InputError
from speclogs.ingest.summary import FileAccount
from speclogs.runrecord import RunRecordError, parse_run_record

BENCH_COLUMNS = {
    "line_no": pl.Int64, "request_index": pl.Int32, "warmup": pl.Boolean, "latency_s": pl.Float64, "prompt_tokens": pl.Int32,
    "completion_tokens": pl.Int32, "output_tok_s": pl.Float64, "spec_accept_length": pl.Float64, "spec_accept_rate": pl.Float64,
    "spec_verify_ct": pl.Int32, "e2e_latency_s": pl.Float64, "source_kind": pl.Utf8, "extra": pl.Utf8,
}


def json_line_rows(text: str, row_of, unknown: str, cut_hint: str = "") -> tuple[list, list[tuple[int, str, str]]]:
    """A JSONL text → the rows `row_of(document, line_no, rows_so_far)` makes of its lines, and an unparsed row
    (line_no, reason, raw) of each other line: empty, not JSON, or a document row_of gives None for (`unknown`)."""
    rows: list = []
    unparsed: list[tuple[int, str, str]] = []
    lines = text.split("\n")
    for line_no, line in enumerate(lines[:-1] if lines[-1] == "" else lines, start=1):
        if not line.strip():
            unparsed.append((line_no, "empty line", line))
            continue
        try:
            document = json.loads(line)
        except ValueError as error:
            unparsed.append((line_no, f"not JSON ({error}{cut_hint})", line))
            continue
        row = row_of(document, line_no, len(rows))
        if row is None:
            unparsed.append((line_no, unknown, line))
        else:
            rows.append(row)
    return rows, unparsed


def accounted(text: str, tables: dict[str, pl.DataFrame], unparsed: list[tuple[int, str, str]], *,
              all_unparsed: bool = False, warnings: list[str] | tuple[str, ...] = (),
              run_facts: dict | None = None) -> tuple[dict[str, pl.DataFrame], FileAccount]:
    """A JSON input's tables (with its unparsed rows) and its account."""
    if unparsed:
        tables["unparsed_lines"] = pl.DataFrame(unparsed, schema={"line_no": pl.Int64, "reason": pl.Utf8, "raw": pl.Utf8}, orient="row")
    total = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    unparsed_lines = total if all_unparsed else len({n for n, _, _ in unparsed})
    return tables, FileAccount(total, total - unparsed_lines, 0, unparsed_lines, warnings=tuple(warnings),
                               run_facts=run_facts or {})


def parse_bench_jsonl(text: str, *, kind: str) -> tuple[dict[str, pl.DataFrame], FileAccount]:
    """`*.bench.jsonl`, `bench.jsonl`, or any `*.jsonl` (shape detected per object: our requests or bench_serving)."""
    rows, unparsed = json_line_rows(text, lambda document, line_no, position: bench_row(document, line_no, position, kind),
                                    "JSON of an unknown shape (not a bench request nor a bench_serving result)")
    return accounted(text, _bench_tables(rows), unparsed)


def parse_bench_json(text: str) -> tuple[dict[str, pl.DataFrame], FileAccount]:
    """The older `*.bench.json`: one JSON array; element 0 is the warm-up."""
    try:
        elements = json_array_elements(text)
    except ValueError as error:
        return accounted(text, {}, [(1, f"not a JSON array ({error})", text.split("\n", 1)[0])], all_unparsed=True)
    rows = [(line_no, bench_row(document, line_no, position, "bench_json"), document)
            for position, (line_no, document) in enumerate(elements)]
    unparsed = [(line_no, "array element of an unknown shape", json.dumps(document)) for line_no, row, document in rows if row is None]
    return accounted(text, _bench_tables([row for _, row, _ in rows if row is not None]), unparsed)


def _bench_tables(rows: list[tuple]) -> dict[str, pl.DataFrame]:
    return {"bench_requests": pl.DataFrame(rows, schema=BENCH_COLUMNS, orient="row")} if rows else {}


def json_array_elements(text: str) -> list[tuple[int, object]]:
    """Elements of a top-level JSON array with the (1-based) line each starts on."""
    decoder, skip = json.JSONDecoder(), json.decoder.WHITESPACE.match
    position = skip(text, 0).end()
    if not text.startswith("[", position):
        raise ValueError("expected '[' at the start")
    position = skip(text, position + 1).end()
    elements: list[tuple[int, object]] = []
    if text.startswith("]", position):
        return elements
    while True:
        value, end = decoder.raw_decode(text, position)
        elements.append((text.count("\n", 0, position) + 1, value))
        position = skip(text, end).end()
        if text.startswith("]", position):
            return elements
        if not text.startswith(",", position):
            raise ValueError(f"expected ',' or ']' at character {position}")
        position = skip(text, position + 1).end()


def bench_row(document: object, line_no: int, position: int, hint_kind: str) -> tuple | None:
    """One benchmark object → a bench_requests row, in BENCH_COLUMNS order (None when the shape is unknown)."""
    if not isinstance(document, dict):
        return None
    if "latency_s" in document and ("meta_info" in document or "meta" in document or "completion_tokens" in document):
        meta = document.get("meta_info") if isinstance(document.get("meta_info"), dict) else document.get("meta")
        meta = meta if isinstance(meta, dict) else {}
        is_array_shape = hint_kind == "bench_json" or "tok_s" in document and "tok_per_s" not in document
        warmup = document.get("warmup")
        if not isinstance(warmup, bool):
            warmup = position == 0 if is_array_shape else None
        request_index = document.get("i")
        if not isinstance(request_index, int) or isinstance(request_index, bool):
            request_index = position
        known = {"run", "i", "warmup", "latency_s", "completion_tokens", "tok_per_s", "tok_s", "meta_info", "meta"}
        extra = {key: value for key, value in document.items() if key not in known} | {"meta": meta}
        return (line_no, request_index, warmup, as_number(document.get("latency_s")), as_int(meta.get("prompt_tokens")),
                as_int(document.get("completion_tokens", meta.get("completion_tokens"))),
                as_number(document.get("tok_per_s", document.get("tok_s"))), as_number(meta.get("spec_accept_length")),
                as_number(meta.get("spec_accept_rate")), as_int(meta.get("spec_verify_ct")), as_number(meta.get("e2e_latency")),
                "bench_json" if is_array_shape else "bench_jsonl", json_text(extra))
    if "output_throughput" in document or ("backend" in document and "completed" in document):
        mean_e2e_ms = as_number(document.get("mean_e2e_latency_ms"))
        return (line_no, position, False, as_number(document.get("duration")), as_int(document.get("total_input_tokens")),
                as_int(document.get("total_output_tokens")), as_number(document.get("output_throughput")),
                as_number(document.get("accept_length")), None, None, None if mean_e2e_ms is None else mean_e2e_ms / 1000.0,
                "bench_serving_jsonl", json_text(document))
    return None


def as_number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def as_int(value: object, limit: int = 2**31) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -limit <= value < limit else None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


_ENCODE = json.JSONEncoder(allow_nan=False, default=str).encode
# The same encoder's C part, made once: JSONEncoder.encode makes it anew each call, in Python (most of its time for
# a --log-requests line's request). The values come from parsed text, which makes no cycles: no markers to check them.
_C_ENCODER = None if c_make_encoder is None else c_make_encoder(
    None, str, encode_basestring_ascii, None, ": ", ", ", False, False, False)


def json_text(value: object) -> str:
    """JSON text DuckDB's JSON type accepts: Infinity/NaN become strings, and so do keys JSON has no form for (a
    tuple); other keys as json.dumps writes them."""
    try:  # the usual case: nothing to replace (the C encoder, one pass)
        return "".join(_C_ENCODER(value, 0)) if _C_ENCODER is not None and not isinstance(value, str) else _ENCODE(value)
    except (ValueError, TypeError):
        return _ENCODE(_finite(value))


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {_key(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _key(key: object) -> object:  # as JSON writes it where it can (str, int, finite float, True/False/None), else str()
    return key if isinstance(key, (str, int)) or key is None or (isinstance(key, float) and math.isfinite(key)) else str(key)


# ----------------------------------------------------------------------------------------------------------------
# run.json (launcher) and NCCL probe results


def parse_run_json(text: str) -> tuple[dict[str, pl.DataFrame], FileAccount]:
    """Launcher run.json → the run's facts (cell, factors, env, argv, versions, outcome …); no table rows."""
    try:
        record = parse_run_record(text)
    except RunRecordError as error:
        return accounted(text, {}, [(1, str(error), text)], all_unparsed=True,
                         warnings=[f"{error}; the run keeps its directory name"])
    facts = {"cell": record.cell, "launch_index": as_int(record.launch), "sglang_version": record.sglang_version,
             "hostname": record.hostname, "gpu_name": ", ".join(record.gpu_names) or None, "run_json": json_text(record.document),
             "outcome": record.outcome, **{name: json_text(value) for name, value in
                                           (("factors", record.factors), ("env", record.env), ("argv", record.argv)) if value is not None}}
    warnings = [record.schema_note] if record.schema_note else []
    return accounted(text, {}, [], warnings=warnings, run_facts={k: v for k, v in facts.items() if v is not None})


NCCL_PROBE_FORMAT = ("speclogs.nccl_probe", 1)  # the "format" and "format_version" of an NCCL probe result file


def parse_nccl_probe(text: str, source: str) -> tuple[dict[str, pl.DataFrame], FileAccount]:
    """`*.nccl_probe.json` (an NCCL probe result, docs/nccl.md §3) → its nccl_probe_files row and one nccl_probe row per
    (env set, collective, message size) measured; an env set that failed has no rows, and a warning."""
    try:
        document = json.loads(text)
        if not isinstance(document, dict) or (document.get("format"), document.get("format_version")) != NCCL_PROBE_FORMAT:
            raise InputError(f"not a speclogs NCCL probe file of format {NCCL_PROBE_FORMAT}",
                             hint="a file named *.nccl_probe.json must hold an NCCL probe result (docs/nccl.md §3)")
        rows, warnings = _nccl_probe_rows(document)
    except (KeyError, TypeError, ValueError, InputError) as error:
        reason = (str(error) if isinstance(error, InputError) else f"not JSON ({error})" if isinstance(error, json.JSONDecodeError)
                  else f"malformed probe file ({type(error).__name__}: {error})")
        return accounted(text, {}, [(1, reason, text)], all_unparsed=True, warnings=[reason])
    outcome, message = str(document.get("outcome")), str(document.get("message", ""))
    tables = {"nccl_probe_files": pl.DataFrame(
        [(str(document["probe_id"]), outcome, message, json_text(document))],
        schema={"probe_id": pl.Utf8, "outcome": pl.Utf8, "message": pl.Utf8, "document": pl.Utf8}, orient="row",
    )}
    if rows:
        tables["nccl_probe"] = pl.DataFrame(rows, infer_schema_length=None)
    if outcome != "ok":
        warnings.append(f"probe outcome {outcome}: {message}")
    return accounted(text, tables, [], warnings=warnings)


def _nccl_probe_rows(document: dict) -> tuple[list[dict], list[str]]:
    gpu_names = [str(name) for name in document.get("gpu_names") or []]
    world_size = int(document.get("world_size") or 0)
    common = {
        "probe_id": str(document["probe_id"]),
        "gpu_name": ", ".join(dict.fromkeys(gpu_names[:world_size] or gpu_names)) or None,
        "topology": json_text(topology) if isinstance(topology := document.get("topology"), (dict, list)) else topology,
        "torch_version": document.get("torch_version"),
        "nccl_version": document.get("nccl_version"),
        "hostname": document.get("hostname"),
        "measured_at": datetime.fromisoformat(str(document["measured_at"])).replace(tzinfo=None),  # UTC, stored naive
    }
    rows: list[dict] = []
    warnings = [str(warning) for warning in document.get("warnings") or []]
    for env_set in document.get("env_sets") or []:
        name = str(env_set["name"])
        if env_set["outcome"] != "ok":
            warnings.append(f"env set {name}: {env_set['outcome']}: {env_set.get('message', '')}")
        env = json.dumps(env_set.get("env") or {}, sort_keys=True)
        for measurement in env_set.get("measurements") or []:
            rows.append({
                **common, "env_set": name, "env": env, "collective": str(measurement["collective"]),
                "dtype": str(measurement["dtype"]), "world_size": int(env_set.get("world_size") or world_size),
                "bytes": int(measurement["bytes"]), "tokens": _or_none(measurement.get("tokens"), int),
                "iters": int(measurement["iters"]), "latency_us": float(measurement["latency_us"]),
                "latency_us_p10": float(measurement["latency_us_p10"]), "latency_us_p90": float(measurement["latency_us_p90"]),
                **{key: _or_none(measurement.get(key)) for key in ("algbw_gb_s", "busbw_gb_s", "graph_latency_us")},
                "graph_error": measurement.get("graph_error"),
            })
    return rows, warnings


def _or_none(value: object, kind: type = float) -> object:
    return None if value is None else kind(value)
