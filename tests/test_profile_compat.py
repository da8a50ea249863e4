"""The committed compatibility table says what the hook's own check decides, for every SGLang release.

docs/profile_compat.json holds, per release from 0.5.0 on, the facts scripts/profile_compat.py read
from that release's sources; docs/profiling.md shows the table made from it. Here the hook's check
(`speclogs.profile.targets`) is re-run on those facts, with no network and no SGLang installed.
"""

import json
import re
from pathlib import Path

import pytest

from speclogs.profile import hook, targets

ROOT = Path(__file__).resolve().parents[1]
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
    assert RESULTS["targets_digest"] == targets.targets_digest(), REGENERATE


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
    facts = targets.WorkerFacts.from_json(recorded)

    assert recorded["verdict"] == targets.verdict(target, facts), REGENERATE


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_scheduler_column_is_what_the_hooks_check_decides(version):
    recorded = RELEASES[version]["scheduler"]
    facts = targets.SchedulerFacts.from_json(recorded)

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
