#!/usr/bin/env bash
# The adaptive run of issue 17 on ONE H200 (device kind nvidia-h200, TP 1), from the repo root, after the SGLang
# 0.5.14 bundle was staged and unpacked (../shared/gpu/README.md §5: the same four staging calls with kind
# nvidia-h200). Makes the two drafts, runs plans/h200-adaptive.toml until it stops by itself, and packs the
# launches (+ adaptive.json) as $OUT/runs-adaptive.tgz. Run it again if a call ends first: --resume continues.
#   MINUTES=7 bash scripts/h200_adaptive_device.sh
# fixtures/h200-adaptive was recorded with the older synth-pair construction (its noisy draft from `--noise 0.97`,
# since deleted); --accept-profile 0.02 makes a draft of the same accept len (≈ 1.02) with the current one.
set -uo pipefail
export PYTHONPATH=/tmp/sglang-site/site:$PWD/src PATH=/tmp/sglang-site/site/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /root/runs-adaptive
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
[ -f /tmp/d3/config.json ] || python3 scripts/synth_pair.py /tmp/t3 /tmp/d3 2>&1 | tail -2
[ -f /tmp/d3n/config.json ] || python3 scripts/synth_pair.py /tmp/t3 /tmp/d3n --accept-profile 0.02 2>&1 | tail -2
python3 -m speclogs launch plans/h200-adaptive.toml --out /root/runs-adaptive --no-ingest --resume \
  --max-minutes "${MINUTES:-7}" 2>&1 | grep -v -e SyntaxWarning -e 'Configuration class' | tail -40
echo "launch rc=${PIPESTATUS[0]}"
python3 -c "import json; a = json.load(open('/root/runs-adaptive/adaptive.json')); print('adaptive:', a['stopped'], '-', a['reason'])"
tar czf "$OUT/runs-adaptive.tgz" -C /root runs-adaptive
ls -la "$OUT"
