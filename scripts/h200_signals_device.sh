#!/usr/bin/env bash
# Issue 16, item 6: stock SGLang signals (metrics + device timer + request export + --log-requests) next to speclogs'
# profiler, on the nvidia-h200 device (1 × H200, TP 1), SGLang 0.5.14 from the bundle of ../shared/gpu (staged and
# unpacked first: `bash .gpu/device-install.sh stage 1..4` then `unpack`, see shared/gpu/README.md).
# Run from the repo root on the device:
#   bash scripts/h200_signals_device.sh            # synthetic pairs + plans/h200-signals.toml (--resume: rerun to finish)
# Writes $OUT/h200-signals.tgz = h200-signals/{README.md, <cell>/<launch>/…, *.console, gpus.nvidia-smi}; unpack it
# into fixtures/ (tar xzf h200-signals.tgz -C fixtures) and tests/test_signals_device_fixture.py and
# reports/make_reports.sh pick it up.
# fixtures/h200-signals was recorded with the older synth-pair construction (orthogonal embeddings, the noisy draft
# from `--noise 0.93`, since deleted); this script now makes the lower-acceptance draft with --accept-profile 0.4,0.25
# (accept len 1 + 0.4 + 0.4·0.25 = 1.50 at steps 5, varying per request with the prompt's tokens).
set -uo pipefail
export PYTHONPATH=/tmp/sglang-site/site:$PWD/src PATH=/tmp/sglang-site/site/bin:$PATH
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; RUNS=/root/signals; PACK=/root/pack/h200-signals
mkdir -p "$OUT" "$RUNS" "$PACK"
started=$(date -Iseconds)
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$PACK/gpus.nvidia-smi"
[ -f /tmp/t3/config.json ] || python3 scripts/synth_pair.py /tmp/t3 /tmp/d3 2>&1 | tail -2
[ -f /tmp/t3n/config.json ] || python3 scripts/synth_pair.py /tmp/t3n /tmp/d3n --accept-profile 0.4,0.25 2>&1 | tail -2
cp /tmp/d3/speclogs_synth.json "$PACK/draft_clean.speclogs_synth.json.console" 2>/dev/null
cp /tmp/d3n/speclogs_synth.json "$PACK/draft_noisy.speclogs_synth.json.console" 2>/dev/null
python3 -m speclogs launch plans/h200-signals.toml --out "$RUNS" --no-ingest --resume --max-minutes "${MINUTES:-7}" 2>&1 \
  | grep -v -e SyntaxWarning -e 'Configuration class' | tee -a "$PACK/launch.console" | tail -25
echo "launch rc=${PIPESTATUS[0]}"
for d in "$RUNS"/*/*/; do
  [ -f "$d/run.json" ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); w=r.get('windows') or [{}];
print(r['run_name'], r['outcome'], r.get('ready_s'), [(s['phase'], s['status']) for s in w[0].get('scrapes', [])], r['files'].get('request_export'))" "$d/run.json"
done
sglang_version=$(python3 -c 'import sglang; print(sglang.__version__)' 2>/dev/null)
cat > "$PACK/README.md" <<EOF
# fixtures/h200-signals — stock SGLang signals next to speclogs' profiler, one H200, TP 1

Made by \`scripts/h200_signals_device.sh\` on the nvidia-h200 device (started $started, host $(hostname)): SGLang
$sglang_version from the shared/gpu bundle, $(head -1 "$PACK/gpus.nvidia-smi"), torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null).

    python3 scripts/synth_pair.py /tmp/t3 /tmp/d3                  # clean pair: accept len 2.00 by construction
    python3 scripts/synth_pair.py /tmp/t3n /tmp/d3n --accept-profile 0.4,0.25   # lower-acceptance draft (draft_noisy.speclogs_synth.json.console)
    python3 -m speclogs launch plans/h200-signals.toml --out /root/signals --no-ingest --resume --max-minutes 7

| path | what |
|---|---|
| \`eagle3_prof/<n>/\` | clean pair under \`python -m speclogs.profile --every 16\`; \`--enable-metrics\`, \`SGLANG_ENABLE_METRICS_DEVICE_TIMER=1\`, \`--export-metrics-to-file\`, \`--log-requests --log-requests-level 1\` (text) |
| \`eagle3_noisy/<n>/\` | noisy draft, not profiled; the same signals, \`--log-requests-format json\` |
| each launch | \`run.json\` (windows with their scrapes), \`server.log\`, \`bench.jsonl\` (11 single-stream requests, 500 new tokens, the first a warm-up before the window), \`metrics-single_stream-{before,during-NNN,after}.prom\`, \`sglang-request-metrics-*.log\` |
| \`*.console\`, \`gpus.nvidia-smi\` | console output and the synthetic drafts' records (not ingested) |

Figures: \`speclogs ingest fixtures/h200-signals --db s.duckdb && speclogs report -c 'eagle3_prof_[0-9]' -c 'eagle3_noisy_[0-9]' --db s.duckdb\`
(table "Accept length: SGLang's counters (exact) vs the log lines").
EOF
cp -r "$RUNS"/*/ "$PACK"/ 2>/dev/null
tar czf "$OUT/h200-signals.tgz" -C /root/pack h200-signals
ls -la "$OUT"; du -sh "$PACK"
