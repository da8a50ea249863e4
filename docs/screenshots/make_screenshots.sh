#!/usr/bin/env bash
# Regenerate the whole-page screenshots of the HTML report in docs/screenshots/ (headless Chromium, ImageMagick, pngquant).
#   bash docs/screenshots/make_screenshots.sh          (uses python3 unless PYTHON is set)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
py="${PYTHON:-python3}"
export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$py" -m speclogs ingest fixtures/h200x2 --db "$work/2x2.duckdb" 2>/dev/null
"$py" -m speclogs report --db "$work/2x2.duckdb" -c 'baseline_default_[0-9]*' -c 'baseline_nccl_[0-9]*' \
  -c 'eagle3_default_[0-9]*' -c 'eagle3_nccl_[0-9]*' -c 'eagle3_nccl_prof_[0-9]*' --html "$work/2x2.html" -f json >/dev/null
"$py" -m speclogs ingest fixtures/h200-signals --db "$work/signals.duckdb" 2>/dev/null
"$py" -m speclogs report --db "$work/signals.duckdb" -c 'eagle3_noisy_*' -c 'eagle3_prof_*' --html "$work/signals.html" -f json >/dev/null

# A whole page is 9,000–15,000 px tall: drawn at a device scale below 1 (fonts hinted at that size, sharper than a
# resize) and cut to 32 colours, each file stays under 400 KB.
for page in 2x2 signals; do
  for width_scale in 1400:0.6 800:0.7; do
    width=${width_scale%:*} scale=${width_scale#*:}
    full="$work/$page-$width.png"
    chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars --window-size="$width,16000" \
      --force-device-scale-factor="$scale" --virtual-time-budget=20000 --screenshot="$full" "file://$work/$page.html" 2>/dev/null
    # the window is taller than the page: cut the blank bottom off, keep the margins
    size=$(convert "$full" -trim -format '%W %h %Y' info: | awk '{print $1 "x" ($2 + $3 + 16) "+0+0"}')
    convert "$full" -crop "$size" +repage "$work/cut.png"
    pngquant --force --speed 1 --nofs --output "docs/screenshots/$page-$width.png" 32 "$work/cut.png"
    echo "docs/screenshots/$page-$width.png: $(identify -format %wx%h "docs/screenshots/$page-$width.png"), $(stat -c %s "docs/screenshots/$page-$width.png") bytes"
  done
done
