"""Per-request records → the `requests` table, one row per request and source (`source_kind`): `request_export`
(`--export-metrics-to-file`: one JSON object per finished request), `log_requests_text` / `log_requests_json`
(`--log-requests` lines, a request's Receive and Finish lines paired by rid within a launch) and `bench_serving`
(`--output-details` arrays). meta_info keys SGLang renamed across versions fill one column; the rest stays in `extra`.
"""

from __future__ import annotations

import json

import polars as pl

from speclogs.ingest.jsonfiles import accounted, as_int, as_number, json_line_rows, json_text
from speclogs.ingest.reprs import parse_request_repr
from speclogs.ingest.summary import FileAccount

HEALTH_CHECK_PREFIX = "HEALTH_CHECK"
REQUEST_KINDS = ("request_received", "request_finished")

REQUEST_COLUMNS = {
    "line_no": pl.Int64, "launch_no": pl.Int32, "ts": pl.Datetime("us"), "received_line_no": pl.Int64,
    "source_kind": pl.Utf8, "rid": pl.Utf8, "health_check": pl.Boolean, "finish_reason": pl.Utf8,
    "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "cached_tokens": pl.Int64,
    "e2e_latency_s": pl.Float64, "queue_time_s": pl.Float64, "ttft_s": pl.Float64, "itl_mean_ms": pl.Float64,
    "received_unix_s": pl.Float64, "finished_unix_s": pl.Float64,
    "spec_accept_length": pl.Float64, "spec_accept_rate": pl.Float64, "spec_verify_ct": pl.Int64,
    "spec_accept_token_num": pl.Int64, "spec_draft_token_num": pl.Int64, "spec_accept_histogram": pl.Utf8,
    "request_index": pl.Int64, "error": pl.Utf8, "request": pl.Utf8, "extra": pl.Utf8,
}
# meta_info key(s) → column; of a column's keys the first that holds a number wins
_META_COLUMNS = {column: (column,) for column in ("prompt_tokens", "completion_tokens", "cached_tokens", "spec_accept_length",
                                                  "spec_accept_rate", "spec_verify_ct")} | {
    "e2e_latency_s": ("e2e_latency",), "queue_time_s": ("queue_time",), "received_unix_s": ("request_received_ts",),
    "finished_unix_s": ("request_finished_ts",),
    "spec_accept_token_num": ("spec_accept_token_num", "spec_num_correct_drafts", "spec_accepted_drafts"),
    "spec_draft_token_num": ("spec_draft_token_num", "spec_num_proposed_drafts", "spec_proposed_drafts"),
}
_INT_COLUMNS = {name for name, dtype in REQUEST_COLUMNS.items() if dtype == pl.Int64}
_EMPTY_ROW = dict.fromkeys(REQUEST_COLUMNS)


def request_row(meta: dict, *, source_kind: str, line_no: int | None = None, request: object = None, rid: object = None,
                extra: dict | None = None) -> dict:
    """A requests row from a meta_info-shaped dict (typed fields out of it; the rest → extra)."""
    row = _EMPTY_ROW | {"line_no": line_no, "source_kind": source_kind}
    rest = dict(meta)
    for column, keys in _META_COLUMNS.items():
        for key in keys:
            value = as_int(meta.get(key), 2**63) if column in _INT_COLUMNS else as_number(meta.get(key))
            if value is not None:  # typed, or an alias of the column's value; not a number: it stays in extra
                del rest[key]
                row[column] = value if row[column] is None else row[column]
    histogram = meta.get("spec_accept_histogram")
    if isinstance(histogram, list):
        row["spec_accept_histogram"] = json_text(histogram)
        rest.pop("spec_accept_histogram")
    rid = rid if isinstance(rid, str) else meta.get("id")
    if isinstance(rid, str):
        row["rid"] = rid
        row["health_check"] = rid.startswith(HEALTH_CHECK_PREFIX)
        if rest.get("id") == rid:
            rest.pop("id")
    reason = meta.get("finish_reason")
    row["finish_reason"] = reason.get("type") if isinstance(reason, dict) else reason if isinstance(reason, str) else None
    if request is not None:
        row["request"] = json_text(request)
    if extra:
        rest.update(extra)
    row["extra"] = json_text(rest) if rest else None
    return row


def parse_request_export(text: str) -> tuple[dict[str, pl.DataFrame], FileAccount]:
    """An --export-metrics-to-file file: one JSON object per line → requests rows; other lines → unparsed."""
    rows, unparsed = json_line_rows(text, _export_row, "JSON of an unknown shape (not an --export-metrics-to-file record)",
                                    "; a record cut off?")
    return accounted(text, {"requests": pl.DataFrame(rows, schema=REQUEST_COLUMNS, orient="row")} if rows else {}, unparsed)


def _export_row(document: object, line_no: int, _position: int) -> dict | None:
    if not isinstance(document, dict) or "request_parameters" not in document:
        return None
    meta = dict(document)
    request = _json_or_text(meta.pop("request_parameters"))
    rid = request.get("rid") if isinstance(request, dict) else None
    return request_row(meta, line_no=line_no, source_kind="request_export", request=request, rid=rid)


def _json_or_text(value: object) -> object:  # a JSON text's value, or the text
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


def read_request_lines(events: pl.DataFrame | None) -> pl.DataFrame | None:
    """The request lines of a server_events frame, read: its requests row, `finished`, `pair_key` and `file`."""
    if events is None or not {"kind", "message", *_LINE_COLUMNS} <= set(events.columns):
        return None  # a user's grammar may fill server_events without a message: no request line among its rows
    # the columns a request line's row takes, before the filter (a frame of server_events has ~40)
    found = events.select(*_LINE_COLUMNS, *(["file"] if "file" in events.columns else []), "kind", "message").filter(
        pl.col("kind").is_in(REQUEST_KINDS))
    if not found.height:
        return None
    if "file" not in found.columns:  # (no sort: RequestLog.frame orders the lines itself)
        found = found.with_columns(file=pl.lit(0, pl.Int32))
    readable, rows, keys = [], [], []
    for kind, message in zip(found.get_column("kind").to_list(), found.get_column("message").to_list()):
        read = _read_request_line(message or "", kind == "request_finished")
        readable.append(read is not None)
        if read is not None:
            rows.append(read[0])  # (its line_no, launch_no and ts are the frame's: _LINE_COLUMNS)
            keys.append(read[1])
    if not rows:
        return None
    read = {name: values for name, values in zip(REQUEST_COLUMNS, zip(*rows)) if name not in _LINE_COLUMNS}
    found = found.filter(pl.Series(readable, dtype=pl.Boolean))
    columns = [pl.Series(name, values, dtype=REQUEST_COLUMNS[name]) for name, values in read.items()]
    return found.select(*_LINE_COLUMNS, "file", finished=pl.col("kind") == "request_finished").with_columns(
        pl.Series("pair_key", keys, dtype=pl.Utf8), *columns)


_LINE_COLUMNS = ("line_no", "launch_no", "ts")  # a requests row's columns that the server_events row holds


class RequestLog:
    """Pairs a log's request lines (read_request_lines' frames, in line order) into rows: a request's Finish line, with
    the line number of the Receive line of its rid just before it in its file and launch; a request that never finished
    is its Receive line (a Receive line followed by another of its rid gives no row: the later one waits)."""

    def __init__(self) -> None:
        self._frames: list[pl.DataFrame] = []

    def add(self, lines: pl.DataFrame | None) -> None:
        if lines is not None:
            self._frames.append(lines)

    def frame(self) -> pl.DataFrame | None:  # one row per request, in (file, line) order, with `file`
        if not self._frames:
            return None
        # each request's lines next to each other, in line order: a line's neighbours are the lines of its rid before
        # and after it (cheaper than a window over the same keys)
        request = ("file", "launch_no", "pair_key")
        lines = pl.concat(self._frames).sort(*request, "line_no", maintain_order=True)
        same_before = pl.all_horizontal(pl.col(key).eq_missing(pl.col(key).shift(1)) for key in request)
        same_after = pl.all_horizontal(pl.col(key).eq_missing(pl.col(key).shift(-1)) for key in request)
        return lines.with_columns(
            received_line_no=pl.when(pl.col("finished").not_()).then("line_no")
            .when(same_before & pl.col("finished").shift(1).not_()).then(pl.col("line_no").shift(1)),
            waits=pl.col("finished").not_() & same_after.not_(),
        ).filter(pl.col("finished") | pl.col("waits")).sort("file", "line_no", maintain_order=True).select(
            pl.col(name).cast(dtype) for name, dtype in _SCHEMA.items())


_SCHEMA = REQUEST_COLUMNS | {"file": pl.Int32}


def _read_request_line(message: str, finished: bool) -> tuple[tuple, str | None] | None:
    """A --log-requests line → (its requests row's values, the key RequestLog pairs it by); None when it is not one."""
    text = message.strip()
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except ValueError:
            return None
        if not isinstance(document, dict):
            return None
        source_kind, rid, request = "log_requests_json", document.get("rid"), document.get("obj")
        out = document.get("out") if isinstance(document.get("out"), dict) else {}
        extra = {key: value for key, value in document.items() if key not in ("timestamp", "event", "rid", "obj", "out")}
    else:
        head = next((head for head in ("Receive: obj=", "Finish: obj=") if text.startswith(head)), None)
        if head is None:
            return None
        source_kind, (request, extra) = "log_requests_text", parse_request_repr(text[len(head):])
        out = extra.pop("out", None)
        out = out if isinstance(out, dict) else {}
        rid = request.get("rid") if isinstance(request.get("rid"), str) else _meta(out).get("id")
    meta, extra = (_meta(out), extra | {f"out.{k}": v for k, v in out.items() if k != "meta_info"}) if finished else ({}, {})
    row = request_row(meta, source_kind=source_kind, request=request, rid=rid, extra=extra)
    # a rid that is not a str (a batch's list in a JSON line) pairs by its JSON; no str rid holds a NUL (the text is made
    # valid before it is read)
    return tuple(row.values()), rid if isinstance(rid, str) else None if rid is None else "\0" + json_text(rid)


def _meta(out: dict) -> dict:
    meta = out.get("meta_info")
    return meta if isinstance(meta, dict) else {}


def add_bench_serving_requests(tables: dict[str, pl.DataFrame]) -> None:
    """A requests table (a row per request) for the bench_serving results in `tables` that carry `--output-details`."""
    bench = tables.get("bench_requests")
    if bench is None or "source_kind" not in bench.columns:
        return
    rows: list[dict] = []
    for line_no, extra in bench.filter(pl.col("source_kind") == "bench_serving_jsonl").select("line_no", "extra").iter_rows():
        document = _json_or_text(extra)
        if not isinstance(document, dict) or not isinstance(document.get("output_lens"), list):
            continue
        arrays = {key: value for key, value in document.items() if isinstance(value, list) and len(value) == len(document["output_lens"])}
        for index in range(len(document["output_lens"])):
            item = {key: value[index] for key, value in arrays.items()}
            itls = item.get("itls")
            meta = {"prompt_tokens": item.get("input_lens"), "completion_tokens": item.get("output_lens"),
                    "cached_tokens": item.get("cached_tokens")}
            rest = {key: value for key, value in item.items()
                    if key not in ("input_lens", "output_lens", "ttfts", "errors", "cached_tokens") and value not in (None, "")}
            row = request_row({k: v for k, v in meta.items() if v is not None}, line_no=line_no,
                              source_kind="bench_serving", extra=rest)
            row["request_index"] = index
            row["ttft_s"] = as_number(item.get("ttfts"))
            if isinstance(itls, list) and itls and all(as_number(v) is not None for v in itls):
                row["itl_mean_ms"] = 1000.0 * sum(itls) / len(itls)
            error = item.get("errors")
            row["error"] = error if isinstance(error, str) and error else None
            rows.append(row)
    if rows:
        tables["requests"] = pl.DataFrame(rows, schema=REQUEST_COLUMNS, orient="row")

