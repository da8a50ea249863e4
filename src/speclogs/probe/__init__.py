"""`speclogs probe nccl`: time NCCL all_reduce / all_gather at TP decode/verify sizes under NCCL env sets.

Runs on the GPU box: imports only the standard library here; torch is imported by the rank processes
(`speclogs.probe.worker`). `speclogs.ingest.jsonfiles.parse_nccl_probe` reads the JSON it writes.
"""

from speclogs.probe.envsets import SEEDS_TUNED_ENV, EnvSet, env_sets_from_plan, parse_env_set, parse_env_sets
from speclogs.probe.runner import (
    DEFAULT_TOKENS,
    EnvSetResult,
    Measurement,
    ProbeRequest,
    ProbeResult,
    default_output_path,
    run_probe,
    write_probe_json,
)

__all__ = [
    "DEFAULT_TOKENS", "SEEDS_TUNED_ENV", "EnvSet", "EnvSetResult", "Measurement", "ProbeRequest", "ProbeResult",
    "default_output_path", "env_sets_from_plan", "parse_env_set", "parse_env_sets", "run_probe", "write_probe_json",
]
