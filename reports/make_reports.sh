#!/usr/bin/env bash
# Regenerate every example report in reports/ from the repository's fixtures, with the speclogs CLI only.
#   bash reports/make_reports.sh            (from anywhere; uses python3 unless PYTHON is set)
# Writes reports/<name>.{html,md,json} (or into $REPORTS_DIR: tests/test_reports_current.py compares the two).
# Deterministic: the statistics draw no random numbers.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3}"
out="${REPORTS_DIR:-reports}"
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
work="$(mktemp -d)"
trap 'rm -rf "$work" /tmp/speclogs-report-seeds' EXIT

report() {  # name db arms… [-- extra options]: one computation, three files
  local name="$1" db="$2"; shift 2
  "$py" -m speclogs report --db "$db" --format json -o "$out/$name.md" -o "$out/$name.html" "$@" \
    > "$out/$name.json" 2>/dev/null
  echo "$out/$name.{html,md,json}"
}

# 1. The real H200 2×2 matrix (SGLang 0.5.14, one launch per cell) as a declared 2×2 design.
"$py" -m speclogs ingest fixtures/h200x2-sglang-0.5.14 --db "$work/real.duckdb" 2>/dev/null
report h200-matrix "$work/real.duckdb" -c baseline_default -c baseline_nccl -c eagle3_default -c eagle3_nccl \
  --factor "nccl=*_nccl" --factor "spec=eagle3*"
# 2. The real probes: a draft that is never accepted, and the synthetic pair (accept len exactly 2.00).
report h200-probes "$work/real.duckdb" -c random-draft-baseline -c random-draft-eagle3 -c synth-eagle3-exact -c synth-eagle3-noise06

# 3. The launcher's H200 runs (≥ 2 launches per cell), when fixtures/h200x2/ is there.
if [ -d fixtures/h200x2 ]; then
  "$py" -m speclogs ingest fixtures/h200x2 --db "$work/launches.duckdb" 2>/dev/null
  cells=$("$py" -m speclogs sql "SELECT DISTINCT cell FROM runs WHERE cell IS NOT NULL ORDER BY 1" --db "$work/launches.duckdb" --format csv | tail -n +2)
  args=()
  for cell in $cells; do args+=(-c "${cell}_[0-9]*"); done
  # the synthetic pair's target: hidden 2048 (scripts/synth_pair.py), for the all-reduce size verdict
  [ ${#args[@]} -gt 0 ] && report h200x2-launches "$work/launches.duckdb" "${args[@]}" --hidden-size 2048
  # what the profiler costs: the same cell with and without `python -m speclogs.profile`
  report h200x2-profiler-overhead "$work/launches.duckdb" -c "eagle3_nccl_[0-9]*" -c "eagle3_nccl_prof_[0-9]*"
fi
# 3b. The second device session: the profiler with gap_ms (phases + gap = the time per cycle), and its overhead.
if [ -d fixtures/h200x2-profile ]; then
  "$py" -m speclogs ingest fixtures/h200x2-profile --db "$work/profile.duckdb" 2>/dev/null
  report h200x2-profile-gap "$work/profile.duckdb" -c "eagle3_unprof_[0-9]*" -c "eagle3_prof_[0-9]*"
fi
# 3c. The third device session: profiler overhead with 4 profiled and 4 unprofiled launches, interleaved.
if [ -d fixtures/h200x2-overhead ]; then
  "$py" -m speclogs ingest fixtures/h200x2-overhead --db "$work/overhead.duckdb" 2>/dev/null
  report h200x2-overhead-4v4 "$work/overhead.duckdb" -c "eagle3_unprof_[0-9]*" -c "eagle3_prof_[0-9]*"
fi
# 3d. The adaptive device run (issue 17): EAGLE-3 with an exact and a noisy draft, launched until decided.
if [ -d fixtures/h200-adaptive ]; then
  "$py" -m speclogs ingest fixtures/h200-adaptive --db "$work/adaptive.duckdb" 2>/dev/null
  report h200-adaptive-drafts "$work/adaptive.duckdb" -c "draft_noisy_[0-9]*" -c "draft_exact_[0-9]*"
fi

# 3d. Stock SGLang signals: counters, device timer, request export, --log-requests (one H200, TP 1). The real files of
#     fixtures/h200-sglang-0.5.14-metrics are plain files: one run by --run-name.
"$py" -m speclogs ingest fixtures/h200-sglang-0.5.14-metrics --run-name h200_metrics --db "$work/metrics.duckdb" 2>/dev/null
report h200-metrics "$work/metrics.duckdb" -c h200_metrics
# … and the device run of plans/h200-signals.toml (scripts/h200_signals_device.sh), when fixtures/h200-signals/ is there.
if [ -d fixtures/h200-signals ]; then
  "$py" -m speclogs ingest fixtures/h200-signals --db "$work/signals.duckdb" 2>/dev/null
  report h200-signals "$work/signals.duckdb" -c "eagle3_prof_[0-9]*" -c "eagle3_noisy_[0-9]*"
fi
# … and the doctor's evidence (plans/h200-doctor.toml): the EAGLE flag with an EAGLE-3 draft, the control, aux ids +1;
#     the reference is what the draft was built for (its design record: 3.02 at 5 steps), ±1 %.
if [ -d fixtures/h200-doctor ]; then
  "$py" -m speclogs ingest fixtures/h200-doctor --db "$work/doctor.duckdb" 2>/dev/null
  report h200-doctor "$work/doctor.duckdb" -c "eagle3_control_[0-9]*" -c "eagle_flag_[0-9]*" -c "eagle3_aux_offset_[0-9]*" \
    --trained-layers 1,7,13 --reference-acceptance '3.02±1%'
fi

# 4. Ground truth: the seeds' story generated with known effects (3 launches per cell, factors spec × nccl).
# (generated at a fixed path: run ids hash the logs' paths, and the JSON reports list them)
seeds=/tmp/speclogs-report-seeds
rm -rf "$seeds"
"$py" tests/groundtruth/sglang_logs.py "$seeds" > /dev/null
"$py" -m speclogs ingest "$seeds" --db "$work/seeds.duckdb" 2>/dev/null
report seeds-story "$work/seeds.duckdb" -c "baseline_default_*" -c "baseline_nccl_*" -c "eagle3_default_*" -c "eagle3_nccl_*"
report seeds-confounded "$work/seeds.duckdb" -c "baseline_nccl_*" -c "eagle3_default_*"
