"""run.json: the launcher's record of one launch — the one module that writes it and reads it. Standard library
only (the launcher writes it on a GPU box). Fields: docs/launcher.md ("What each launch leaves").

A missing or mistyped field reads as None (or empty), so an older, hand-edited or newer run.json is read for what it
holds; a change that breaks readers gets the next schema number.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speclogs import __version__
from speclogs.redact import redact_json

SCHEMA = "speclogs.run/1"
FILE_NAME = "run.json"

# Outcomes (docs/launcher.md "Outcomes"): after these `--resume` runs the launch again …
RETRY_OUTCOMES = frozenset({"running", "interrupted", "port_in_use", "disk_full", "spawn_failed"})
# … and after these only with --retry-failed.
FAILED_OUTCOMES = frozenset({"failed_start", "health_timeout", "bench_failed"})


class RunRecordError(ValueError):
    """The text is not a run.json (not JSON, or not a JSON object)."""


# The fields read as their type (a non-empty str, an int that is not a bool, a dict, a list) or else None …
_FIELDS = {"schema": str, "run_uid": str, "cell": str, "hostname": str, "outcome": str, "launch": int, "server_pid": int,
           "factors": dict, "env": dict, "adaptive": dict, "server_identity": dict, "argv": list}
# … and those read as empty when missing or mistyped.
_EMPTY = {"versions": dict, "timestamps": dict, "windows": list, "previous_attempts": list, "outcome_detail": str}


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class RunRecord:
    """One run.json as read: `document` is the decoded object; the attributes are its fields, typed."""

    document: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_document(cls, document: object) -> RunRecord:
        return cls(document if isinstance(document, dict) else {})

    def __getattr__(self, name: str) -> Any:
        kind = _FIELDS.get(name) or _EMPTY.get(name)
        if kind is None:
            raise AttributeError(name)
        value = self.document.get(name)
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) and (kind is not str or value or name in _EMPTY):
            return [item for item in value if isinstance(item, dict)] if name == "windows" else value
        return kind() if name in _EMPTY else None

    @property
    def schema_note(self) -> str | None:
        """Why this record may not be read in full (another schema than this reader's), or None."""
        schema = self.document.get("schema")
        if schema is None or schema == SCHEMA:
            return None
        return f"run.json schema {schema!r} is not {SCHEMA!r}; read what matched"

    @property
    def run_name(self) -> str | None:
        """`run_name`, else `<cell>_<launch>`; None when the record names neither."""
        name = self.document.get("run_name")
        if isinstance(name, str) and name:
            return name
        return f"{self.cell}_{self.launch}" if self.cell is not None and self.launch is not None else None

    @property
    def sglang_version(self) -> str | None:
        version = self.versions.get("sglang")
        return version if isinstance(version, str) and version else None

    @property
    def gpu_names(self) -> tuple[str, ...]:
        gpus = self.document.get("gpus")
        return tuple(sorted({str(g["name"]) for g in gpus if isinstance(g, dict) and g.get("name")})) if isinstance(gpus, list) else ()

    @property
    def profile(self) -> bool | None:
        """Whether the server ran under `python -m speclogs.profile` (None: not recorded)."""
        return bool(self.document["profile"]) if "profile" in self.document else None

    @property
    def models(self) -> dict:
        """role ('target', 'draft') → what the launcher recorded about that model directory."""
        models = self.document.get("models")
        return {role: model for role, model in models.items() if isinstance(model, dict)} if isinstance(models, dict) else {}

    def is_complete(self, retry_failed: bool = False) -> bool:
        """Whether `--resume` skips this launch (with `retry_failed`, failed launches are redone too)."""
        if self.outcome is None or self.outcome in RETRY_OUTCOMES:
            return False
        return not (retry_failed and self.outcome in FAILED_OUTCOMES)

    @property
    def ready_s(self) -> float | None:
        return _number(self.document.get("ready_s"))

    @property
    def median_tok_s(self) -> float | None:
        summary = self.document.get("bench_summary")
        return _number(summary.get("median_tok_s")) if isinstance(summary, dict) else None


# What identifies a launch: every run.json of it (the launch's and each node's) carries these.
IDENTITY = ("run_uid", "run_name", "plan_name", "plan_file", "cell", "launch", "factors", "order_index")


def launch_record(*, run_name: str, plan_name: str | None, plan_file: str, cell: str, launch: int, factors: dict,
                  order_index: int, previous: RunRecord | None, stamps: tuple[str, ...], **fields: Any) -> dict[str, Any]:
    """A new launch's document, outcome `running` until finish_record; `previous`: the record this launch left last
    time (its attempt is kept); `fields`: what the writer records besides (docs/launcher.md)."""
    attempts = list(previous.previous_attempts) if previous is not None else []
    if previous is not None:
        attempts.append({key: previous.document.get(key) for key in ("run_uid", "outcome", "outcome_detail", "timestamps")})
    return {
        "speclogs_version": __version__, "run_uid": uuid.uuid4().hex, "run_name": run_name, "plan_name": plan_name,
        "plan_file": plan_file, "cell": cell, "launch": launch, "factors": dict(factors), "order_index": order_index,
        "timestamps": dict.fromkeys(stamps), "ready_s": None, "outcome": "running", "outcome_detail": "",
        "complete": False, "bench_summary": None, "previous_attempts": attempts, **fields,
    }


def node_record(launch: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The document of one node of a multi-node launch."""
    return {"speclogs_version": __version__, **{key: launch[key] for key in IDENTITY}, "outcome": "running",
            "outcome_detail": "", "complete": False, **fields}


def finish_record(record: dict[str, Any], outcome: str, detail: str) -> None:
    """Set a launch's (or node's) outcome; it is complete (skipped by --resume) unless the outcome is retried."""
    record.update(outcome=outcome, outcome_detail=detail, complete=outcome not in RETRY_OUTCOMES)


def parse_run_record(text: str) -> RunRecord:
    try:
        document = json.loads(text)
    except ValueError as error:
        raise RunRecordError(f"run.json is not JSON ({error})") from None
    if not isinstance(document, dict):
        raise RunRecordError("run.json is not a JSON object")
    return RunRecord(document)


def read_run_json(run_dir: str | Path) -> RunRecord | None:
    """None when there is none or it cannot be read as one."""
    try:
        return parse_run_record((Path(run_dir) / FILE_NAME).read_text(encoding="utf-8", errors="replace"))
    except (OSError, RunRecordError):
        return None


def write_run_json(run_dir: str | Path, record: dict[str, Any]) -> Path:
    """Write run_dir/run.json, secrets redacted, through a temporary file renamed over the old one (no reader sees
    half a file). OSError (ENOSPC …) propagates."""
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
