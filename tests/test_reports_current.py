"""reports/ is what `bash reports/make_reports.sh` (README's guides table) makes from the fixtures today: the script
runs as written, and every committed report says what its output says (the statistics draw no random numbers), so a
change to what a report says shows in the diff that makes it. Run ids are left out of the JSON comparison: a log
without a launcher's run.json is a run of its directory, so its id depends on where the checkout is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT


def _without_run_ids(value):
    if isinstance(value, dict):
        return {key: _without_run_ids(item) for key, item in value.items() if key not in ("run_id", "run_ids")}
    return [_without_run_ids(item) for item in value] if isinstance(value, list) else value


def test_make_reports_regenerates_the_committed_reports(tmp_path):
    done = subprocess.run(["bash", "reports/make_reports.sh"], cwd=ROOT, capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "PYTHON": sys.executable, "REPORTS_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    def reports(folder):
        return sorted(p.name for p in folder.iterdir() if p.suffix in (".json", ".md") and p.name != "README.md")

    def same(name):
        made, kept = (tmp_path / name).read_text(), (ROOT / "reports" / name).read_text()
        return made == kept if name.endswith(".md") else _without_run_ids(json.loads(made)) == _without_run_ids(json.loads(kept))

    assert reports(tmp_path) == reports(ROOT / "reports")
    stale = [name for name in reports(tmp_path) if not same(name)]
    assert stale == [], f"reports/ is stale: run `bash reports/make_reports.sh` ({stale})"
