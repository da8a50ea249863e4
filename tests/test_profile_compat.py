"""The committed compatibility table says what the hook's own check decides, for every SGLang release.

docs/profile_compat.json holds, per release from 0.5.0 on, the facts scripts/profile_compat.py read
from that release's sources; docs/profiling.md shows the table made from it. Here the hook's check
(`speclogs.profile.targets`) is re-run on those facts, with no network and no SGLang installed.
"""

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from speclogs.profile import hook, targets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import profile_compat as compat  # noqa: E402  (the script that owns docs/profile_compat.json)

RESULTS = json.loads((ROOT / "docs/profile_compat.json").read_text())
RELEASES = {release["version"]: release for release in RESULTS["releases"]}
REGENERATE = "regenerate with scripts/profile_compat.py (see docs/profiling.md)"


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))  # 0.5.3 < 0.5.3.post2 < 0.5.4


def docs_table() -> dict[str, dict[str, str]]:
    """version -> {column header: cell} for the rows between the profile-compat markers."""
    doc = (ROOT / "docs/profiling.md").read_text()
    block = doc.split("<!-- profile-compat:begin", 1)[1].split("<!-- profile-compat:end -->", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("|")]
    split = lambda line: [cell.strip() for cell in line.strip("|").split(" | ")]  # noqa: E731
    header = split(rows[0])
    return {cells[0]: dict(zip(header, cells)) for cells in map(split, rows[2:])}


def test_the_results_were_made_with_the_current_targets():
    assert RESULTS["targets_digest"] == compat.targets_digest(), REGENERATE


def test_every_release_listed_from_0_5_0_on_has_one_row_in_release_order():
    listed = RESULTS["listed_versions"]

    assert [release["version"] for release in RESULTS["releases"]] == listed
    assert listed == sorted(listed, key=version_key)
    assert all(version_key(v) >= (0, 5, 0) for v in listed)
    assert listed[0] == "0.5.1"  # PyPI never had a 0.5.0 (pip index versions lists 0.4.10.post2, then 0.5.1)
    assert set(hook.VERIFIED_SGLANG_VERSIONS) <= set(listed)


@pytest.mark.parametrize("target", targets.WORKER_TARGETS, ids=lambda t: t.key)
@pytest.mark.parametrize("version", list(RELEASES))
def test_each_recorded_verdict_is_what_the_hooks_check_decides_on_the_recorded_facts(version, target):
    recorded = RELEASES[version]["workers"][target.key]
    facts = compat.facts_from_json(targets.WorkerFacts, recorded)

    assert recorded["verdict"] == compat.verdict(target, facts), REGENERATE


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_scheduler_column_is_what_the_hooks_check_decides(version):
    recorded = RELEASES[version]["scheduler"]
    facts = compat.facts_from_json(targets.SchedulerFacts, recorded)

    assert recorded["problems"] == targets.check_scheduler(targets.SCHEDULER_TARGET, facts), REGENERATE


def test_the_table_in_the_docs_shows_every_release_with_its_recorded_verdicts():
    table = docs_table()

    assert list(table) == list(RELEASES), REGENERATE
    for version, row in table.items():
        for target in targets.WORKER_TARGETS:
            column = next(header for header in row if header.startswith(f"`{target.worker_class}`"))
            assert row[column] == RELEASES[version]["workers"][target.key]["verdict"], (version, column)
        problems = RELEASES[version]["scheduler"]["problems"]
        assert row["scheduler hook"] == ("ok" if not problems else "no: " + "; ".join(problems))


def test_the_default_eagle_worker_is_supported_on_every_release_users_run():
    # issue 16: users run 0.5.9 … newest; 0.5.14 is the release run on a GPU.
    users_run = [v for v in RELEASES if version_key(v) >= (0, 5, 9)]

    assert "0.5.14" in users_run
    assert {v: RELEASES[v]["workers"]["eagle_v2"]["verdict"] for v in users_run} == {
        v: "supported" for v in users_run
    }


def fake_wheel(folder: Path, version: str, worker_source: str | None) -> None:
    with zipfile.ZipFile(folder / f"sglang-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr("sglang/version.py", f'__version__ = "{version}"\n')
        if worker_source is not None:
            wheel.writestr("sglang/srt/speculative/eagle_worker_v2.py", worker_source)


def run_script(tmp_path: Path, listed: str) -> subprocess.CompletedProcess:
    (tmp_path / "listed.txt").write_text(f"sglang (0.5.2)\nAvailable versions: {listed}\n")
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/profile_compat.py"), str(tmp_path / "dists"),
         "--listed", str(tmp_path / "listed.txt"), "--out", str(tmp_path / "compat.json"),
         "--docs", str(tmp_path / "doc.md")],
        capture_output=True, text=True, timeout=60,
    )


def test_the_script_writes_a_row_per_release_from_0_5_0_and_rewrites_only_the_table(tmp_path):
    (tmp_path / "dists").mkdir()
    fake_wheel(tmp_path / "dists", "0.5.1", None)
    fake_wheel(tmp_path / "dists", "0.5.2", "class EAGLEWorkerV2:\n    pass\n")
    (tmp_path / "doc.md").write_text(
        "before\n<!-- profile-compat:begin (scripts/profile_compat.py writes this table) -->\nold\n"
        "<!-- profile-compat:end -->\nafter\n"
    )
    completed = run_script(tmp_path, "0.5.2, 0.5.1, 0.4.10.post2")

    assert completed.returncode == 0, completed.stderr
    results = json.loads((tmp_path / "compat.json").read_text())
    assert results["listed_versions"] == ["0.5.1", "0.5.2"]
    assert [r["workers"]["eagle_v2"]["verdict"] for r in results["releases"]] == [
        "absent",
        "disabled: class EagleDraftWorker not found in sglang.srt.speculative.eagle_worker_v2",
    ]
    doc = (tmp_path / "doc.md").read_text()
    assert doc.startswith("before\n<!-- profile-compat:begin") and doc.endswith("<!-- profile-compat:end -->\nafter\n")
    assert "old" not in doc
    assert "| 0.5.2 | `EAGLEWorkerV2` | disabled: class EagleDraftWorker not found" in doc


def test_the_script_refuses_to_write_a_table_that_misses_a_listed_release(tmp_path):
    (tmp_path / "dists").mkdir()
    fake_wheel(tmp_path / "dists", "0.5.1", None)
    completed = run_script(tmp_path, "0.5.2, 0.5.1")

    assert completed.returncode == 1
    assert completed.stderr.startswith(f"Error: no dist in {tmp_path / 'dists'} for 0.5.2: pip download")
    assert not (tmp_path / "compat.json").exists()
