"""Run identity and arm selection: a run's name comes from what it is, never from the order of ingests; arms select
by name, folder, cell or plan, and an arm that pools two experiments is an error naming them."""

from __future__ import annotations

import duckdb
import pytest

from conftest import ROOT
from speclogs.analysis.load import resolve_arms
from speclogs.errors import AnalysisError
from speclogs.store import ingest_paths

OVERHEAD, SIGNALS = ROOT / "fixtures" / "h200x2-overhead", ROOT / "fixtures" / "h200-signals"


def _names(db) -> list[tuple[str, str]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return sorted(con.execute("SELECT run_name, source_dir FROM runs").fetchall())


@pytest.fixture(scope="module")
def two_experiments(tmp_path_factory):
    """The same two fixtures ingested in both orders and together."""
    where = tmp_path_factory.mktemp("orders")
    dbs = {}
    for key, calls in (("overhead first", [[OVERHEAD], [SIGNALS]]), ("signals first", [[SIGNALS], [OVERHEAD]]),
                       ("together", [[OVERHEAD, SIGNALS]])):
        dbs[key] = where / f"{key.replace(' ', '_')}.duckdb"
        for paths in calls:
            ingest_paths(paths, dbs[key])
    return dbs


def test_the_same_logs_ingested_in_any_order_get_the_same_names(two_experiments):
    names = {key: _names(db) for key, db in two_experiments.items()}
    assert names["overhead first"] == names["signals first"] == names["together"]
    assert ("eagle3_prof_1", str(OVERHEAD / "eagle3_prof" / "1")) in names["together"]
    assert ("eagle3_prof_1", str(SIGNALS / "eagle3_prof" / "1")) in names["together"]


def _arms(db, *selectors, allow_mixed=False):
    with duckdb.connect(str(db), read_only=True) as con:
        arms = resolve_arms(con, list(selectors), allow_mixed=allow_mixed)
        names = dict(con.execute("SELECT run_id, run_name FROM runs").fetchall())
    return {label: sorted(names[r] for r in ids) for label, ids in arms.items()}


def test_arms_select_by_folder_cell_and_plan(two_experiments):
    db = two_experiments["signals first"]
    four = [f"eagle3_prof_{i}" for i in range(1, 5)]
    assert _arms(db, "h200x2-overhead/eagle3_prof_*")["h200x2-overhead/eagle3_prof_*"] == four
    assert _arms(db, "folder:h200x2-overhead cell:eagle3_prof")["folder:h200x2-overhead cell:eagle3_prof"] == four
    assert _arms(db, "p=plan:h200-signals cell:eagle3_prof")["p"] == ["eagle3_prof_1", "eagle3_prof_2"]
    assert _arms(db, "cell:eagle3_unprof")["cell:eagle3_unprof"] == [f"eagle3_unprof_{i}" for i in range(1, 5)]


def test_an_arm_pooling_two_experiments_is_an_error_naming_them(two_experiments):
    db = two_experiments["together"]
    with pytest.raises(AnalysisError) as caught:
        _arms(db, "eagle3_prof_*")
    message = str(caught.value)
    assert "mixes launches from 2" in message and "h200-signals" in message and "h200x2-profile-overhead" in message
    assert "--mixed-arms" in caught.value.hint
    assert len(_arms(db, "eagle3_prof_*", allow_mixed=True)["eagle3_prof_*"]) == 6
