#!/usr/bin/env bash
# Issues 32 (doctor evidence) and 33 (whatif sweep): plans/h200-doctor.toml and plans/h200-sweep.toml on one GPU
# (nvidia-h200 / nvidia-h100-x1, TP 1), SGLang 0.5.14 from the shared/gpu bundle (staged and unpacked first:
# `bash .gpu/device-install.sh stage N` for each part, then `unpack`, see shared/gpu/README.md; with a 21 MB checkout
# the bundle's 44 MB parts overflow a call's 64 MiB, so it was re-split into five parts of 31 MB). Run from the repo root on the
# device, twice if one call cannot hold every launch (each call's packs are usable alone; --resume continues):
#   PHASE=1 BUDGET_S=545 bash scripts/h200_doctor_sweep_device.sh   # doctor's launch 1 of each cell, then the sweep
#   PHASE=2 BUDGET_S=560 bash scripts/h200_doctor_sweep_device.sh   # the sweep's rest, then the doctor's rest
# SPECLOGS_SRC / PLANS point at a copy of the project when the device's checkout is not the one to run.
# Writes $OUT/h200-doctor.tgz and $OUT/h200-sweep.tgz (h200-<name>/{<cell>/<launch>/…, *.console, gpus.nvidia-smi});
# unpack them into fixtures/ (tar xzf h200-sweep.tgz -C fixtures).
set -uo pipefail
SRC=${SPECLOGS_SRC:-$PWD/src}; PLANS=${PLANS:-plans}
export PYTHONPATH=/tmp/sglang-site/site:$SRC PATH=/tmp/sglang-site/site/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; PACK=/root/pack
mkdir -p "$OUT" "$PACK/h200-doctor" "$PACK/h200-sweep"
END=$(( $(date +%s) + ${BUDGET_S:-540} ))
minutes_left() { python3 -c "print(round(max(0.1, ($END - $(date +%s) - ${PACK_S:-25}) / 60), 2))"; }
A=0.9,0.7,0.5,0.4,0.3; B=0.6,0.4,0.3,0.2,0.1
if [ ! -f /tmp/dA1/speclogs_synth.json ]; then
  python3 scripts/synth_pair.py /tmp/tl /tmp/dA --accept-profile $A --layer-shift 0.2 > /root/synth-A.console 2>&1 &
  python3 scripts/synth_pair.py /tmp/tl_b /tmp/dB --accept-profile $B --layer-shift 0.2 > /root/synth-B.console 2>&1 &
  python3 scripts/synth_pair.py /tmp/tl_o /tmp/dA1 --accept-profile $A --layer-shift 0.2 --aux-offset 1 \
    > /root/synth-A1.console 2>&1 &
  wait
  tail -n 3 /root/synth-*.console
  cmp /tmp/tl/model.safetensors /tmp/tl_b/model.safetensors && cmp /tmp/tl/model.safetensors /tmp/tl_o/model.safetensors \
    && echo "the three targets are byte-identical: every cell runs /tmp/tl"
  rm -rf /tmp/tl_b /tmp/tl_o
fi
for n in h200-doctor h200-sweep; do
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader > "$PACK/$n/gpus.nvidia-smi"
  cp /tmp/dA/speclogs_synth.json "$PACK/$n/draft_A.speclogs_synth.json.console"
done
cp /tmp/dA1/speclogs_synth.json "$PACK/h200-doctor/draft_A_aux_offset.speclogs_synth.json.console"
cp /tmp/dB/speclogs_synth.json "$PACK/h200-sweep/draft_B.speclogs_synth.json.console"

launch() {  # plan name, extra flags
  python3 -m speclogs launch "$PLANS/$1.toml" --out "/root/$1" --no-ingest --resume --max-minutes "$(minutes_left)" "${@:2}" 2>&1 \
    | grep -v -e SyntaxWarning -e 'Configuration class' | tee -a "$PACK/$1/launch.console" | tail -n 14
}
[ "${PHASE:-1}" = 1 ] && launch h200-doctor --max-launches 3 --force
launch h200-sweep
launch h200-doctor --force   # the eagle_flag cell is the bug on purpose: the doctor refuses it otherwise

sglang_version=$(python3 -c 'import sglang; print(sglang.__version__)' 2>/dev/null)
torch_version=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)
for n in h200-doctor h200-sweep; do
  echo "phase ${PHASE:-1} ended $(date -Iseconds) host $(hostname) sglang $sglang_version torch $torch_version" \
    >> "$PACK/$n/provenance.console"
  cp -r "/root/$n"/*/ "$PACK/$n"/ 2>/dev/null
  for d in "$PACK/$n"/*/*/; do
    [ -f "$d/run.json" ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['run_name'], r['outcome'], r.get('ready_s'))" "$d/run.json"
  done
  tar czf "$OUT/$n.tgz" -C "$PACK" "$n"
done
grep -h "profiler: runtime" /root/h200-*/*/*/server.log | sort | uniq -c | head -20
ls -la "$OUT"
