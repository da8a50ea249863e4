"""The benchmark scripts measure what they say: bench_ingest imports before its clock starts every module an ingest
loads (its LOADED_BEFORE), so a module found missing from that list is not timed in one tree and not in another."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import MATRIX

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import importlib, json, sys, tempfile
from pathlib import Path
sys.path.insert(0, {benchmarks!r})
from bench_ingest import LOADED_BEFORE
for module in LOADED_BEFORE:
    importlib.import_module(module)
from speclogs.ingest import sources
from speclogs.store import ingest_paths
sources.STREAM_MIN_BYTES = 1024  # the big-log path, chunk by chunk, as the benchmark's 2M-line log takes
before = set(sys.modules)
with tempfile.TemporaryDirectory() as tmp:
    summary = ingest_paths([{log!r}], Path(tmp) / "x.duckdb", chunk_bytes=65536)
print(json.dumps({{"ingested": summary.files_ingested, "new": sorted(set(sys.modules) - before)}}))
"""


def test_bench_ingest_loads_every_module_an_ingest_imports_before_its_clock() -> None:
    script = PROBE.format(benchmarks=str(ROOT / "benchmarks"), log=str(MATRIX / "eagle3_nccl.log"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["ingested"] == 1
    # importlib's resource readers (schema.sql is read through them) are all an ingest may still import: a few ms
    assert [name for name in found["new"] if not name.startswith("importlib.")] == []
