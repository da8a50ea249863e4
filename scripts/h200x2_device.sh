#!/usr/bin/env bash
# How fixtures/h200x2/ was made: run on the nvidia-h200-x2 device from the repo root, after the
# SGLang 0.5.14 bundle was staged and unpacked (../shared/gpu/README.md, device-install.sh).
#   bash scripts/h200x2_device.sh first    # synthetic pair, profiler self-check, NCCL probe, first launches
#   bash scripts/h200x2_device.sh more     # more launches of the plan (--resume), one device call each
# Outputs go to /root/runs on the device and come back as $OUT/runs.tgz (+ probe JSON, logs).
set -uo pipefail
export PYTHONPATH=/tmp/sglang-site/site:$PWD/src PATH=/tmp/sglang-site/site/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /root/runs
minutes=${MINUTES:-8}
t0=$(date +%s)
if [ "${1:-more}" = first ]; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
  nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
  python3 -m speclogs synth-pair /tmp/t3 /tmp/d3 2>&1 | tail -5
  python3 -m speclogs.profile.selfcheck > "$OUT/profile_selfcheck.log" 2>&1; echo "selfcheck rc=$?"; tail -3 "$OUT/profile_selfcheck.log"
  timeout 150 python3 -m speclogs probe nccl --plan plans/h200x2.toml --gpus 2 --sweep --iters 50 \
      --out "$OUT/nccl_probe.nccl_probe.json" > "$OUT/probe.log" 2>&1; echo "probe rc=$?"; tail -15 "$OUT/probe.log"
  used=$(( ($(date +%s) - t0) / 60 )); minutes=$(( minutes - used ))
fi
python3 -m speclogs launch plans/h200x2.toml --out /root/runs --no-ingest --resume --max-minutes "$minutes" 2>&1 \
  | grep -v -e SyntaxWarning -e 'Configuration class' | tail -40
echo "launch rc=${PIPESTATUS[0]}"
for d in /root/runs/*/*/; do [ -f "$d/run.json" ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['run_name'], r['outcome'], r.get('ready_s'))" "$d/run.json"; done
tar czf "$OUT/runs.tgz" -C /root runs
ls -la "$OUT"
