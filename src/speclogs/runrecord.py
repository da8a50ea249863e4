"""run.json: the launcher's record of one launch — the one module that writes it and reads it.

Standard library only: the launcher writes it on a GPU box without duckdb or polars; the ingest (runs table), the
launcher's `--resume` and adaptive looks, and the report's confounder check read it through `RunRecord`.

    launch_record(…) / node_record(…)  a new launch's document (the launcher's and each multi-node node's)
    finish_record(record, outcome, …)  its outcome, and whether --resume skips it
    write_run_json(run_dir, record)   atomic (a reader never sees half a file), secrets redacted, schema stamped
    read_run_json(run_dir)            RunRecord | None (missing or unreadable file)
    parse_run_record(text)            RunRecord, or RunRecordError saying why the text is not a run.json
    RunRecord.from_document(obj)      typed accessors over an already decoded document (e.g. runs.run_json)

The document's fields are listed in docs/launcher.md ("What each launch leaves"). The accessors never raise: a
field that is missing or of the wrong type reads as None (or an empty dict/list), so an older or hand-edited
run.json is read for what it holds.

Versions: `speclogs.run/1` is the only one so far. A reader meets a newer one (`speclogs.run/2`) by reading what
it recognises and saying so (`RunRecord.schema_note`); a change that breaks readers gets the next number.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_NAME = "speclogs.run"
VERSION = 1
SCHEMA = f"{SCHEMA_NAME}/{VERSION}"
FILE_NAME = "run.json"

# Outcomes (docs/launcher.md "Outcomes"): after these `--resume` runs the launch again …
RETRY_OUTCOMES = frozenset({"running", "interrupted", "port_in_use", "disk_full", "spawn_failed"})
# … and after these only with --retry-failed.
FAILED_OUTCOMES = frozenset({"failed_start", "health_timeout", "bench_failed"})


class RunRecordError(ValueError):
    """The text is not a run.json (not JSON, or not a JSON object); the message says which."""


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(value: object) -> dict | None:
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class RunRecord:
    """One run.json as read: `document` is the decoded object; the properties are its fields, typed."""

    document: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_document(cls, document: object) -> RunRecord:
        """A record over an already decoded JSON value (anything but an object reads as an empty record)."""
        return cls(document if isinstance(document, dict) else {})

    # --- identity -------------------------------------------------------------------------------------------
    @property
    def schema(self) -> str | None:
        return _text(self.document.get("schema"))

    @property
    def schema_note(self) -> str | None:
        """Why this record may not be read in full (another schema than this reader's), or None."""
        schema = self.document.get("schema")
        if schema is None or schema == SCHEMA:
            return None
        return f"run.json schema {schema!r} is not {SCHEMA!r}; read what matched"

    @property
    def run_uid(self) -> str | None:
        return _text(self.document.get("run_uid"))

    @property
    def cell(self) -> str | None:
        return _text(self.document.get("cell"))

    @property
    def launch(self) -> int | None:
        return _integer(self.document.get("launch"))

    @property
    def run_name(self) -> str | None:
        """`run_name`, else `<cell>_<launch>`; None when the record names neither."""
        name = _text(self.document.get("run_name"))
        if name is None and self.cell is not None and self.launch is not None:
            name = f"{self.cell}_{self.launch}"
        return name

    @property
    def factors(self) -> dict | None:
        return _mapping(self.document.get("factors"))

    # --- what the server ran with ------------------------------------------------------------------------------
    @property
    def env(self) -> dict | None:
        return _mapping(self.document.get("env"))

    @property
    def argv(self) -> list | None:
        argv = self.document.get("argv")
        return argv if isinstance(argv, list) else None

    @property
    def versions(self) -> dict:
        return _mapping(self.document.get("versions")) or {}

    @property
    def sglang_version(self) -> str | None:
        return _text(self.versions.get("sglang"))

    @property
    def gpu_names(self) -> tuple[str, ...]:
        """Distinct GPU names from `gpus`, sorted."""
        gpus = self.document.get("gpus")
        if not isinstance(gpus, list):
            return ()
        return tuple(sorted({str(g["name"]) for g in gpus if isinstance(g, dict) and g.get("name")}))

    @property
    def hostname(self) -> str | None:
        return _text(self.document.get("hostname"))

    @property
    def profile(self) -> bool | None:
        """Whether the server ran under `python -m speclogs.profile` (None: not recorded)."""
        return bool(self.document["profile"]) if "profile" in self.document else None

    @property
    def models(self) -> dict:
        """`models`: role ('target', 'draft') → what run.json recorded about that model directory."""
        models = _mapping(self.document.get("models")) or {}
        return {role: model for role, model in models.items() if isinstance(model, dict)}

    @property
    def doctor(self) -> list[dict]:
        """The doctor's findings on this launch's setup before it started (speclogs.doctor: code, severity, message,
        fix, source); empty when none were found or the launcher predates the doctor."""
        found = self.document.get("doctor")
        return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []

    @property
    def adaptive(self) -> dict | None:
        return _mapping(self.document.get("adaptive"))

    @property
    def windows(self) -> list[dict]:
        """The benchmark windows with their /metrics scrapes ([metrics] plans): name, start, end, scrapes[]."""
        windows = self.document.get("windows")
        return [window for window in windows if isinstance(window, dict)] if isinstance(windows, list) else []

    # --- how the launch went ----------------------------------------------------------------------------------
    @property
    def outcome(self) -> str | None:
        return _text(self.document.get("outcome"))

    @property
    def outcome_detail(self) -> str:
        return self.document.get("outcome_detail") if isinstance(self.document.get("outcome_detail"), str) else ""

    def is_complete(self, retry_failed: bool = False) -> bool:
        """Whether `--resume` skips this launch (with `retry_failed`, failed launches are redone too)."""
        outcome = self.outcome
        if outcome is None or outcome in RETRY_OUTCOMES:
            return False
        return not (retry_failed and outcome in FAILED_OUTCOMES)

    @property
    def timestamps(self) -> dict:
        return _mapping(self.document.get("timestamps")) or {}

    @property
    def ready_s(self) -> float | None:
        value = self.document.get("ready_s")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def median_tok_s(self) -> float | None:
        value = (_mapping(self.document.get("bench_summary")) or {}).get("median_tok_s")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def server_pid(self) -> int | None:
        return _integer(self.document.get("server_pid"))

    @property
    def server_identity(self) -> dict | None:
        return _mapping(self.document.get("server_identity"))

    @property
    def previous_attempts(self) -> list:
        attempts = self.document.get("previous_attempts")
        return list(attempts) if isinstance(attempts, list) else []


# What identifies a launch: every run.json of it (the launch's and each node's) carries these.
IDENTITY = ("run_uid", "run_name", "plan_name", "plan_file", "cell", "launch", "factors", "order_index")


def launch_record(*, run_name: str, plan_name: str | None, plan_file: str, cell: str, launch: int, factors: dict,
                  order_index: int, previous: RunRecord | None, stamps: tuple[str, ...], **fields: Any) -> dict[str, Any]:
    """A new launch's document: its identity (a new run_uid), the attempts before it (from `previous`, the record
    the launch left last time), its timestamps (`stamps`, unset), outcome `running` until finish_record; `fields`
    are what the writer records besides (docs/launcher.md)."""
    from speclogs import __version__

    attempts = previous.previous_attempts if previous is not None else []
    if previous is not None:
        attempts.append({key: previous.document.get(key) for key in ("run_uid", "outcome", "outcome_detail", "timestamps")})
    return {
        "speclogs_version": __version__, "run_uid": uuid.uuid4().hex, "run_name": run_name, "plan_name": plan_name,
        "plan_file": plan_file, "cell": cell, "launch": launch, "factors": dict(factors), "order_index": order_index,
        "timestamps": dict.fromkeys(stamps), "ready_s": None, "outcome": "running", "outcome_detail": "",
        "complete": False, "bench_summary": None, "previous_attempts": attempts, **fields,
    }


def node_record(launch: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The document of one node of a multi-node launch: the launch's identity, outcome `running`, and `fields`."""
    from speclogs import __version__

    return {"speclogs_version": __version__, **{key: launch[key] for key in IDENTITY}, "outcome": "running",
            "outcome_detail": "", "complete": False, **fields}


def finish_record(record: dict[str, Any], outcome: str, detail: str) -> None:
    """Set a launch's (or node's) outcome; it is complete (skipped by --resume) unless the outcome is retried."""
    record.update(outcome=outcome, outcome_detail=detail, complete=outcome not in RETRY_OUTCOMES)


def parse_run_record(text: str) -> RunRecord:
    """The record in a run.json's text. Raises RunRecordError when it is not JSON or not a JSON object."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise RunRecordError(f"run.json is not JSON ({error})") from None
    if not isinstance(document, dict):
        raise RunRecordError("run.json is not a JSON object")
    return RunRecord(document)


def read_run_json(run_dir: str | Path) -> RunRecord | None:
    """The record in run_dir/run.json; None when there is none or it cannot be read as one."""
    try:
        return parse_run_record((Path(run_dir) / FILE_NAME).read_text(encoding="utf-8", errors="replace"))
    except (OSError, RunRecordError):
        return None


def write_run_json(run_dir: str | Path, record: dict[str, Any]) -> Path:
    """Write run_dir/run.json: the schema first, then `record`, secrets redacted (names, values, flags —
    speclogs.redact); through a temporary file renamed over the old one, so that no reader sees half a file.
    OSError (ENOSPC …) propagates."""
    from speclogs.redact import redact_json

    path = Path(run_dir) / FILE_NAME
    document = {"schema": SCHEMA, **{key: value for key, value in record.items() if key != "schema"}}
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(redact_json(document), handle, indent=1)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path
