#!/usr/bin/env bash
# How fixtures/h200x2/ was made: run on the nvidia-h200-x2 device from the repo root, after the
# SGLang 0.5.14 bundle was staged and unpacked (../shared/gpu/README.md, device-install.sh).
#   bash scripts/h200x2_device.sh first    # synthetic pair, profiler self-check, first launches
#   bash scripts/h200x2_device.sh more     # more launches of the plan (--resume), one device call each
#   SECONDS_LEFT=500 [LAUNCHES_MAX=6] bash scripts/h200x2_device.sh overhead   # profiler overhead plan (plans/h200x2-profile.toml)
# Outputs go to /root/runs on the device and come back as $OUT/runs.tgz (+ logs).
set -uo pipefail
export PYTHONPATH=/tmp/sglang-site/site:$PWD/src PATH=/tmp/sglang-site/site/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /root/runs
minutes=${MINUTES:-8}
t0=$(date +%s)
if [ "${1:-more}" = first ]; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
  nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
  python3 scripts/synth_pair.py /tmp/t3 /tmp/d3 2>&1 | tail -5
  python3 -m speclogs.profile.selfcheck > "$OUT/profile_selfcheck.log" 2>&1; echo "selfcheck rc=$?"; tail -3 "$OUT/profile_selfcheck.log"
  used=$(( ($(date +%s) - t0) / 60 )); minutes=$(( minutes - used ))
fi
if [ "${1:-more}" = overhead ]; then
  python3 scripts/synth_pair.py /tmp/t3 /tmp/d3 2>&1 | tail -2
  python3 -m speclogs.profile.selfcheck > "$OUT/profile_selfcheck_gap.console" 2>&1; echo "selfcheck rc=$?"; tail -4 "$OUT/profile_selfcheck_gap.console"
  timeout 60 python3 benchmarks/bench_profile_overhead.py --cuda --cycles 5000 > "$OUT/bench_profile_overhead.console" 2>&1; tail -8 "$OUT/bench_profile_overhead.console"
  deadline=$(( t0 + ${SECONDS_LEFT:-500} )); need=200
  while [ $(( deadline - $(date +%s) )) -gt $need ]; do
    python3 -m speclogs launch plans/h200x2-profile.toml --out /root/runs2 --no-ingest --resume --max-launches 1 2>&1 | grep -E ': (ready|ok|failed)|pending|outcome' | tail -4
    tar czf "$OUT/runs2.tgz" -C /root runs2; need=110
    ls /root/runs2/*/*/run.json | wc -l | xargs echo launches:; [ "$(ls /root/runs2/*/*/run.json | wc -l)" -ge "${LAUNCHES_MAX:-6}" ] && break
  done
  exit 0
fi
python3 -m speclogs launch plans/h200x2.toml --out /root/runs --no-ingest --resume --max-minutes "$minutes" 2>&1 \
  | grep -v -e SyntaxWarning -e 'Configuration class' | tail -40
echo "launch rc=${PIPESTATUS[0]}"
for d in /root/runs/*/*/; do [ -f "$d/run.json" ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['run_name'], r['outcome'], r.get('ready_s'))" "$d/run.json"; done
tar czf "$OUT/runs.tgz" -C /root runs
ls -la "$OUT"
