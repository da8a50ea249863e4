"""What run.json (speclogs.runrecord) records of the machine: versions, GPUs, env (secrets redacted), models, times."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import speclogs
from speclogs.doctor import arg_value, config_facts
from speclogs.launcher.process import nvidia_smi
from speclogs.redact import redact_value

# Proxy variables: a server never inherits them unless the plan's inherit_env names them (any case), since they
# carry credentials (http://user:pw@proxy) and reroute traffic; "*" and PREFIX* entries do not name them.
PROXY_NAMES = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy"})

_VERSIONS_SCRIPT = r"""
import json, sys, importlib.metadata as md
found = {(d.metadata["Name"] or "").lower(): d.version for d in md.distributions()}
out = {"python": sys.version.split()[0], "sglang": found.get("sglang"), "torch": found.get("torch")}
try:
    import torch
    v = torch.cuda.nccl.version()
    out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
except (ImportError, AttributeError, RuntimeError, OSError):  # torch absent, no CUDA build, no libnccl
    out["nccl"] = None
print(json.dumps(out))
"""


def now_iso() -> str:   # local time without zone, like SGLang's log timestamps
    return _dt.datetime.now().isoformat(timespec="microseconds")


def utc_offset() -> str:
    return _dt.datetime.now().astimezone().isoformat()[-6:]


# Inherited variables whose values run.json records: the families speclogs and the server's libraries read. Any other
# inherited variable is recorded by name only, unless the plan names it (a plan's or cell's env, or an inherit_env
# entry without '*'): a value nobody asked for is where an unlabelled credential hides.
RECORDED_ENV_FAMILIES = (
    "CUDA_", "NVIDIA_", "NCCL_", "NVSHMEM_", "GLOO_", "TORCH_", "PYTORCH_", "TRITON_", "SGLANG_", "FLASHINFER_", "HF_",
    "HUGGING_FACE_", "TRANSFORMERS_", "TOKENIZERS_", "OMP_", "MKL_", "SPECLOGS_",
)
NOT_RECORDED = "<not recorded>"


def recorded_env(env: dict[str, str], inherit: tuple[str, ...], *layers: dict[str, str]) -> dict[str, str]:
    """`env` as run.json records it: sorted, secrets redacted, NOT_RECORDED for what no one named (see above)."""
    asked = {name for layer in layers for name in layer} | {entry for entry in inherit if not entry.endswith("*")}
    return {name: redact_value(name, value) if name in asked or name.startswith(RECORDED_ENV_FAMILIES) else NOT_RECORDED
            for name, value in sorted(env.items())}


def build_env(base: dict[str, str], inherit: tuple[str, ...], drop_prefixes: tuple[str, ...],
              *layers: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The names of `base` that `inherit` allows (NAME, PREFIX*, or *; proxies only by name) and no `drop_prefixes`
    starts, plus each layer in order. Returns (env, names of base not passed on)."""
    named = {entry.lower() for entry in inherit}

    def allowed(name: str) -> bool:
        if name.lower() in PROXY_NAMES:
            return name.lower() in named
        return any(name == entry or (entry.endswith("*") and name.startswith(entry[:-1])) for entry in inherit)

    dropped = sorted(name for name in base if not allowed(name) or name.startswith(tuple(drop_prefixes)))
    env = {name: value for name, value in base.items() if name not in dropped}
    for layer in layers:
        env.update(layer)
    return env, dropped


def python_of(argv: list[str]) -> str:
    """The interpreter that runs the server: argv[0] when it is a python, else ours."""
    head = Path(argv[0]).name if argv else ""
    if head.startswith("python"):
        return shutil.which(argv[0]) or argv[0]
    return sys.executable


def server_versions(python: str, env: dict[str, str], timeout_s: float = 120.0) -> dict[str, str | None]:
    """python/sglang/torch/NCCL versions as the server's interpreter with the server's env sees them."""
    fallback: dict[str, str | None] = dict.fromkeys(("python", "sglang", "torch", "nccl"))
    try:
        result = subprocess.run([python, "-c", _VERSIONS_SCRIPT], env=env, capture_output=True, text=True,
                                timeout=timeout_s, stdin=subprocess.DEVNULL)
        if result.returncode == 0 and (lines := result.stdout.strip().splitlines()):
            return json.loads(lines[-1])
        fallback["error"] = (result.stderr.strip().splitlines() or ["no output"])[-1][:300]
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        fallback["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return fallback


def gpu_inventory() -> list[dict]:
    rows = [[part.strip() for part in line.split(",")] for line in nvidia_smi("--query-gpu=index,name,driver_version,memory.total") or []]
    return [{"index": int(row[0]) if row[0].isdigit() else row[0], "name": row[1], "driver": row[2],
             "memory_mib": int(row[3]) if row[3].isdigit() else None} for row in rows if len(row) >= 4]


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
FULL_HASH_LIMIT_BYTES = 4 << 30    # weights up to 4 GiB are hashed whole (an EAGLE-3 draft is tens to hundreds of MB)
SAMPLE_BYTES = 1 << 20
SAMPLES_PER_FILE = 16


def _hash_weights(files: list[Path]) -> tuple[str, str, int]:
    """(sha256 hex, how, total bytes) over the weight files in name order: every byte up to FULL_HASH_LIMIT_BYTES in
    all, else each file's size and SAMPLES_PER_FILE evenly spaced 1 MiB samples."""
    total = sum(f.stat().st_size for f in files)
    digest = hashlib.sha256()
    full = total <= FULL_HASH_LIMIT_BYTES
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.name}\0{size}\0".encode())
        with open(path, "rb") as handle:
            if full:
                for block in iter(lambda: handle.read(16 << 20), b""):
                    digest.update(block)
                continue
            for k in range(SAMPLES_PER_FILE):
                handle.seek(max(0, (size - SAMPLE_BYTES) * k // (SAMPLES_PER_FILE - 1)))
                digest.update(handle.read(SAMPLE_BYTES))
    how = "sha256 of every weight byte" if full else (
        f"sha256 of each weight file's size and {SAMPLES_PER_FILE} × 1 MiB samples (over {FULL_HASH_LIMIT_BYTES >> 30} GiB in all)")
    return digest.hexdigest(), how, total


def model_record(path: str) -> dict:
    """run.json's record of a model directory: config.json's identifying fields, EAGLE-3 aux layer ids, sha256 of
    config.json and of the weights, so that two drafts (or one retrained at the same path) are told apart."""
    record: dict = {"path": path}
    directory = Path(path).expanduser()
    if not directory.is_dir():
        record["error"] = "not a local directory (hub id or missing): config and weights not recorded"
        return record
    try:
        raw = (directory / "config.json").read_bytes()
        config = json.loads(raw)
    except (OSError, json.JSONDecodeError) as exc:
        record["error"] = f"config.json unreadable: {getattr(exc, 'strerror', None) or exc}"
        return record
    record["config_sha256"] = hashlib.sha256(raw).hexdigest()
    if isinstance(config, dict):   # config_facts: what `speclogs doctor` reads again from the ingested run
        record.update({key: config[key] for key in ("model_type", "torch_dtype") if key in config}, **config_facts(directory, config))
        eagle = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
        layers = eagle.get("eagle_aux_hidden_state_layer_ids", config.get("eagle_aux_hidden_state_layer_ids"))
        if layers is not None:
            record["eagle3_layer_ids"] = layers
    weights = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if weights:
        try:
            record["weights_sha256"], record["weights_hash"], record["weights_bytes"] = _hash_weights(weights)
        except OSError as exc:
            record["error"] = f"weights unreadable: {exc.strerror}"
        record["weight_files"] = [p.name for p in weights]
    return record


class Machine:
    """Facts gathered once per plan run on this machine: GPUs, hostname, versions per (python, PYTHONPATH), models."""

    def __init__(self, design: dict | None = None):
        self.design = design   # the adaptive design run.json records, if any
        self.gpus = gpu_inventory()
        self.hostname = socket.gethostname()
        self._versions: dict[tuple[str, str], dict] = {}
        self._models: dict[str, dict] = {}

    def models(self, argv: list[str]) -> dict:
        """run.json `models`: what --model-path and --speculative-draft-model-path point at."""
        paths = {"target": arg_value(argv, "--model-path"), "draft": arg_value(argv, "--speculative-draft-model-path")}
        for path in paths.values():
            if path is not None and path not in self._models:
                self._models[path] = model_record(path)
        return {role: dict(self._models[path]) for role, path in paths.items() if path is not None}

    def versions(self, python: str, env: dict[str, str]) -> dict:
        key = (python, env.get("PYTHONPATH", ""))
        if key not in self._versions:
            self._versions[key] = {**server_versions(python, env), "speclogs": speclogs.__version__}
        return dict(self._versions[key])
