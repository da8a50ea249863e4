"""Test scaffolding: NcclFrames of real fixture logs, read the way the report reads them — `speclogs ingest` (the NCCL
grammar fills nccl_events' typed columns) into a scratch DuckDB file, then `load_nccl_frames` — so the evidence tests
use no second parser of NCCL lines. What a test needs on top (a recorded env) is set here.

Runs are named and keyed by their log's stem (run_id = run_name = stem), with tp_size 2 unless a test says otherwise.
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import polars as pl

from speclogs.analysis.nccl import NcclFrames, load_nccl_frames


@functools.lru_cache(maxsize=16)
def _ingested(paths: tuple[Path, ...]) -> NcclFrames:
    from speclogs.store import connect, ingest_paths

    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "nccl.duckdb"
        ingest_paths([str(path) for path in paths], db)
        con = connect(db, read_only=True)
        try:
            names = dict(con.execute("SELECT run_id, run_name FROM runs").fetchall())
            frames = load_nccl_frames(con, sorted(names))
        finally:
            con.close()

    def by_stem(frame: pl.DataFrame) -> pl.DataFrame:
        if "run_id" not in frame.columns:
            return frame
        return frame.with_columns(pl.col("run_id").replace_strict(names, default=None))

    return NcclFrames(**{name: by_stem(getattr(frames, name)) for name in NcclFrames.__dataclass_fields__})


def frames_from_logs(paths: list[Path], *, envs: dict[str, dict] | None = None) -> NcclFrames:
    """The frames of `paths` (one run each) in the given order, with `envs` (stem → recorded env)."""
    ingested = _ingested(tuple(Path(path).resolve() for path in paths))
    envs = envs or {}
    order = [Path(path).stem for path in paths]
    runs = pl.DataFrame([{"run_id": stem, "run_name": stem, "tp_size": 2,
                          "env": json.dumps(envs[stem]) if stem in envs else None} for stem in order],
                        schema={"run_id": pl.String, "run_name": pl.String, "tp_size": pl.Int32, "env": pl.String})
    return NcclFrames(
        runs=runs,
        nccl_events=ingested.nccl_events,
        markers=ingested.markers,
        server_args=ingested.server_args,
    )
