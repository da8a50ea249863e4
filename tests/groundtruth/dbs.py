"""DuckDB files built through the REAL ingest (speclogs.store.ingest_paths) from generated ground-truth logs and from
the real fixtures; built once per test session and shared by the report/analysis tests."""

from __future__ import annotations

from pathlib import Path

from groundtruth.sglang_logs import write_seeds_story

ROOT = Path(__file__).resolve().parents[2]
REAL_FIXTURES = ROOT / "fixtures" / "h200x2-sglang-0.5.14"
_built: dict[str, tuple[Path, dict]] = {}


def _ingest(paths: list[Path], db: Path) -> None:
    from speclogs.store import ingest_paths

    ingest_paths(paths, db)


def seeds_db(base: Path) -> tuple[Path, dict]:
    """The seeds' 2×2 story in launcher layout, 3 launches per cell (factors spec × nccl in run.json)."""
    if "seeds" not in _built:
        logs = base / "seeds-logs"
        truth = write_seeds_story(logs, launches=3, layout="launcher")
        db = base / "seeds.duckdb"
        _ingest([logs], db)
        _built["seeds"] = (db, truth)
    return _built["seeds"]


def seeds_plain_db(base: Path) -> tuple[Path, dict]:
    """The seeds' story as plain log files (no run.json, no factors), one launch per cell: what the seeds had."""
    if "plain" not in _built:
        logs = base / "plain-logs"
        truth = write_seeds_story(logs, launches=1, layout="plain", seed=11)
        db = base / "plain.duckdb"
        _ingest([logs], db)
        _built["plain"] = (db, truth)
    return _built["plain"]


def real_db(base: Path) -> Path:
    """The real H200 fixtures (matrix + probes)."""
    if "real" not in _built:
        db = base / "real.duckdb"
        _ingest([REAL_FIXTURES], db)
        _built["real"] = (db, {})
    return _built["real"][0]
