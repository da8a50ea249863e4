"""Read a `speclogs probe nccl` result file (`*.nccl_probe.json`) into rows of table nccl_probe.

The ingest dispatches `*.nccl_probe.json` here: `read_nccl_probe(path)` returns a NcclProbeFile whose
`rows` are dicts keyed exactly by NCCL_PROBE_COLUMNS (schema.sql, table nccl_probe). One row per
(env set, collective, message size) that was measured; env sets that failed have no rows, and the
file's outcome and message are in `outcome` / `message`, each env set's in `env_set_outcomes`, and `warnings`
holds the probe's own warnings plus one line per failed env set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from speclogs.errors import InputError

FORMAT_NAME = "speclogs.nccl_probe"
SUPPORTED_FORMAT_VERSIONS = (1,)
NCCL_PROBE_COLUMNS: tuple[str, ...] = (
    "probe_id", "env_set", "env", "collective", "dtype", "world_size", "bytes", "tokens", "iters",
    "latency_us", "latency_us_p10", "latency_us_p90", "algbw_gb_s", "busbw_gb_s", "gpu_name", "topology",
    "torch_version", "nccl_version", "hostname", "measured_at", "graph_latency_us", "graph_error",
)


@dataclass(frozen=True)
class EnvSetOutcome:
    """How one env set of the probe ended: ok, or why it has no rows."""

    env_set: str
    outcome: str
    message: str
    measurements: int


@dataclass(frozen=True)
class NcclProbeFile:
    """A probe file read into nccl_probe rows, with the probe's outcome (ok | partial | failed | no_torch |
    no_cuda | no_nccl | not_enough_gpus | single_gpu | preflight_failed) and warnings as text."""

    source_file: str
    probe_id: str
    outcome: str
    message: str
    rows: tuple[dict, ...]
    env_set_outcomes: tuple[EnvSetOutcome, ...]
    warnings: tuple[str, ...]


def read_nccl_probe(path: Path) -> NcclProbeFile:
    """Parse one probe JSON file. Raises InputError naming the file and what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})", hint="check the path and permissions") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: not JSON ({err.msg})",
                         hint="was the probe interrupted while writing? run `speclogs probe nccl` again") from err
    return nccl_probe_rows_from_dict(data, source=str(path))


def nccl_probe_rows_from_dict(data: object, *, source: str = "<probe>") -> NcclProbeFile:
    """The rows of an already-parsed probe document (see read_nccl_probe)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise InputError(f"{source}: not a speclogs NCCL probe file (no \"format\": \"{FORMAT_NAME}\")",
                         hint="files named *.nccl_probe.json are written by `speclogs probe nccl`")
    version = data.get("format_version")
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise InputError(f"{source}: probe format_version {version!r} is not one of {SUPPORTED_FORMAT_VERSIONS}",
                         hint="upgrade speclogs to read this file")
    try:
        measured_at = datetime.fromisoformat(str(data["measured_at"]))
        gpu_names = [str(name) for name in data.get("gpu_names") or []]
        world_size = int(data.get("world_size") or 0)
        common = {
            "probe_id": str(data["probe_id"]),
            "world_size": world_size,
            "gpu_name": ", ".join(dict.fromkeys(gpu_names[:world_size] or gpu_names)) or None,
            "topology": data.get("topology"),
            "torch_version": data.get("torch_version"),
            "nccl_version": data.get("nccl_version"),
            "hostname": data.get("hostname"),
            "measured_at": measured_at.replace(tzinfo=None),     # UTC, stored as a naive TIMESTAMP
        }
        rows: list[dict] = []
        outcomes: list[EnvSetOutcome] = []
        warnings = [str(warning) for warning in data.get("warnings") or []]
        for env_set in data.get("env_sets") or []:
            name = str(env_set["name"])
            measurements = env_set.get("measurements") or []
            outcomes.append(EnvSetOutcome(env_set=name, outcome=str(env_set["outcome"]),
                                          message=str(env_set.get("message", "")), measurements=len(measurements)))
            if env_set["outcome"] != "ok":
                warnings.append(f"env set {name}: {env_set['outcome']}: {env_set.get('message', '')}")
            env_json = json.dumps(env_set.get("env") or {}, sort_keys=True)
            for measurement in measurements:
                rows.append({
                    **common,
                    "env_set": name,
                    "env": env_json,
                    "collective": str(measurement["collective"]),
                    "dtype": str(measurement["dtype"]),
                    "world_size": int(env_set.get("world_size") or world_size),
                    "bytes": int(measurement["bytes"]),
                    "tokens": None if measurement.get("tokens") is None else int(measurement["tokens"]),
                    "iters": int(measurement["iters"]),
                    "latency_us": float(measurement["latency_us"]),
                    "latency_us_p10": float(measurement["latency_us_p10"]),
                    "latency_us_p90": float(measurement["latency_us_p90"]),
                    "algbw_gb_s": _float_or_none(measurement.get("algbw_gb_s")),
                    "busbw_gb_s": _float_or_none(measurement.get("busbw_gb_s")),
                    "graph_latency_us": _float_or_none(measurement.get("graph_latency_us")),  # absent in older files
                    "graph_error": measurement.get("graph_error"),
                })
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"{source}: malformed probe file ({type(err).__name__}: {err})",
                         hint="the file does not match the probe's format; was it edited by hand?") from err
    return NcclProbeFile(
        source_file=source, probe_id=common["probe_id"], outcome=str(data.get("outcome")),
        message=str(data.get("message", "")), rows=tuple({column: row[column] for column in NCCL_PROBE_COLUMNS} for row in rows),
        env_set_outcomes=tuple(outcomes), warnings=tuple(warnings),
    )


def _float_or_none(value: object) -> float | None:
    return None if value is None else float(value)
