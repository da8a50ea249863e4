#!/usr/bin/env bash
# The speed table's figures on a quiet device machine (16 cores, no network), this tree alternating with another.
# The device image has numpy, scipy, pyarrow, pyparsing, typer, rich and psutil; polars, duckdb and orjson travel as
# wheels cut into parts of <= 26 MB (the tracked tree is ~30 MB of the 64 MiB that travels), the other tree's src/ +
# grammars/ beside them:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 -d W polars \
#     polars-runtime-32 duckdb orjson && tar cf - -C W . | split -b 26M -d - whl.tar. && one part per .bench/pN
#   git archive REV src grammars | tar x -C .bench/before
# There (each a `run` call carrying what it names, back to back: a machine is kept only 30 s between calls):
#   bash scripts/bench_device.sh stage N        # N = 0..2, carry .bench/pN
#   bash scripts/bench_device.sh install
#   bash scripts/bench_device.sh run [ARGS]     # carry .bench/before; figures in $OUT/bench_*.txt
set -euo pipefail
case "$1" in
  stage) mkdir -p /root/stash && cp .bench/p"$2"/* /root/stash/ && ls -la /root/stash ;;
  install)
    cat /root/stash/*.tar.* | (mkdir -p /root/wheels && tar x -C /root/wheels)
    python3 -m venv --system-site-packages /root/bv && /root/bv/bin/pip install -q --no-index --no-deps /root/wheels/*.whl
    /root/bv/bin/python -c 'import polars, duckdb, pyparsing, typer; print("ready", polars.__version__, duckdb.__version__)' ;;
  run)
    shift
    OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
    nproc; free -g | head -2
    PYTHONPATH=src /root/bv/bin/python benchmarks/bench_scale.py --against .bench/before/src --work /root/scale "$@" \
      2>&1 | tee "$OUT/bench_scale.txt" | tail -40 ;;
  ingest)
    shift
    OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
    PYTHONPATH=src /root/bv/bin/python benchmarks/bench_ingest.py --log /root/sglang_2m.log --against .bench/before/src \
      --no-stages "$@" 2>&1 | tee "$OUT/bench_ingest.txt" | tail -30 ;;
  *) echo "usage: $0 stage N | install | run [ARGS] | ingest [ARGS]" >&2; exit 2 ;;
esac
