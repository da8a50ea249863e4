"""reports/ is what `bash reports/make_reports.sh` (README's guides table) makes from the fixtures today: the script
runs as written, and every committed JSON and Markdown report is byte-identical to its output (the statistics draw no
random numbers), so a change to what a report says shows in the diff that makes it."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def test_make_reports_regenerates_the_committed_reports(tmp_path):
    done = subprocess.run(["bash", "reports/make_reports.sh"], cwd=ROOT, capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "PYTHON": sys.executable, "REPORTS_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    def reports(folder):
        return sorted(p.name for p in folder.iterdir() if p.suffix in (".json", ".md") and p.name != "README.md")

    assert reports(tmp_path) == reports(ROOT / "reports")
    stale = [name for name in reports(tmp_path) if (tmp_path / name).read_bytes() != (ROOT / "reports" / name).read_bytes()]
    assert stale == [], f"reports/ is stale: run `bash reports/make_reports.sh` ({stale})"
