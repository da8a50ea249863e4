"""`speclogs ingest … --lake DIR --ray local|auto|ADDRESS`: the lake's ingest fanned out as Ray tasks (docs/fleet.md,
"How --ray works"). Round 1 hashes each task's files where they are, so that content repeated across tasks is ingested
once; round 2 runs the lake's ingest per task into a scratch database and hands its tables back to the driver, the one
writer, which appends them as tasks finish and commits at the end.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import speclogs
from speclogs.errors import StoreError
from speclogs.ingest.pipeline import DEFAULT_CHUNK_BYTES, Tally
from speclogs.ingest.sources import Discovery, InputFile
from speclogs.ingest.summary import ProgressEvent
from speclogs.store import compile_grammars, lake
from speclogs.store.database import SCHEMA_VERSION

TASK_BYTES = 64 << 20     # input per task at most: big enough that a task's fixed cost is noise
TASKS_PER_CPU = 2         # at least this many tasks per CPU, so that a slow task does not leave CPUs idle at the end


def parse_on_ray(discovery: Discovery, lake_dir: Path, stored: list[tuple[str, str, int]], address: str,
                 grammar_paths: Sequence[Path], *, on_progress: Callable[[ProgressEvent], None] | None = None,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, num_cpus: int | None = None) -> Iterator[tuple[Tally, dict]]:
    """The lake's parsing done by tasks on the Ray cluster at `address` ('local': a cluster of this machine started
    for the call, with `num_cpus` CPUs, default all; 'auto': the running one; else its address): yields the call's
    account, then each task's account and tables (Arrow) as it ends. Raises StoreError when Ray is missing or the
    cluster cannot be reached, or a task failed."""
    ray = lake.fleet_module("ray", "--ray")
    grammars = tuple(str(Path(p).resolve()) for p in grammar_paths)
    yield Tally.of(discovery), {}
    with _cluster(ray, address, num_cpus) as cpus:
        groups = plan_tasks(discovery.files, cpus)
        hashes = _get(ray, [ray.remote(num_cpus=1)(hash_files).remote(group) for group in groups])
        for version, schema in {tuple(found.pop("")) for found in hashes} - {_versions()}:
            raise StoreError(f"a Ray worker runs speclogs {version} (schema {schema}), this driver {speclogs.__version__} "
                             f"(schema {SCHEMA_VERSION})", hint="install the same speclogs on every node (or let --ray "
                                                                "ship it: leave it uninstalled there)")
        twins = _twins(groups, {k: v for found in hashes for k, v in found.items()}, stored)
        task = ray.remote(num_cpus=1)(parse_files)
        pending = {task.remote(group, lake_dir, stored + twins[i], grammars, chunk_bytes): i for i, group in enumerate(groups)}
        waiting, done_bytes, done_files = list(pending), 0, 0
        total_bytes = sum(item.size_bytes for item in discovery.files)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            index = pending[ready[0]]
            yield _get(ray, ready)[0]
            done_bytes += sum(item.size_bytes for item in groups[index])
            done_files += len(groups[index])
            if on_progress is not None:
                on_progress(ProgressEvent(f"{len(groups) - len(waiting)}/{len(groups)} Ray tasks", done_bytes, total_bytes,
                                          done_files, len(discovery.files), total_bytes >= (8 << 20) or len(discovery.files) > 50))


def plan_tasks(files: Sequence[InputFile], cpus: int) -> list[list[InputFile]]:
    """Cut the files, in discovery order, into tasks of about max(total / (cpus × TASKS_PER_CPU), 1 byte) and at most
    TASK_BYTES; a run's files (adjacent in discovery order) are never split between two tasks."""
    total = sum(max(1, item.size_bytes) for item in files)
    target = max(1, min(TASK_BYTES, total // max(1, cpus * TASKS_PER_CPU)))
    groups: list[list[InputFile]] = []
    size = 0
    for item in files:
        if not groups or (size >= target and item.run.run_id != groups[-1][-1].run.run_id):
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += max(1, item.size_bytes)
    return groups


@contextlib.contextmanager
def _cluster(ray, address: str, num_cpus: int | None) -> Iterator[int]:
    """Connected to the cluster for the block (a 'local' one started and stopped); yields its CPU count."""
    with tempfile.TemporaryDirectory(prefix="speclogs-ray-") as shipped:
        owned = not ray.is_initialized()
        if owned:
            options: dict = {"logging_level": "ERROR", "log_to_driver": False}
            if address == "local":
                options.update(address="local", num_cpus=num_cpus, include_dashboard=False)
            else:
                options.update(address=address, runtime_env={"py_modules": [_package(Path(shipped))]})
            try:
                ray.init(**options)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise StoreError(f"cannot reach the Ray cluster at {address!r}: {error}",
                                 hint="start one (ray start --head), pass its address, or use --ray local") from error
        try:
            yield max(1, int(ray.cluster_resources().get("CPU", 1)))
        finally:
            if owned:
                ray.shutdown()


def _package(folder: Path) -> str:
    """speclogs as Ray ships it to the nodes: the package with its grammars inside (a checkout keeps them beside it,
    in grammars/, where a node would not find them)."""
    from speclogs.grammar.model import bundled_grammar_dir

    package = Path(speclogs.__file__).resolve().parent
    if (package / "_grammars").is_dir():
        return str(package)
    shutil.copytree(package, folder / "speclogs", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(bundled_grammar_dir(), folder / "speclogs" / "_grammars")
    return str(folder / "speclogs")


def _twins(groups: list[list[InputFile]], hashes: dict[str, str], stored: list[tuple[str, str, int]]) -> list[list[tuple]]:
    """Per task: (source, sha256, size) of the files of earlier tasks whose content one of its files repeats, for the
    pipeline's own same-content rule. Empty files are never twins."""
    first: dict[str, tuple[int, str]] = {sha: (-1, source) for source, sha, _ in stored}
    extra: list[list[tuple]] = [[] for _ in groups]
    for index, group in enumerate(groups):
        for item in group:
            sha = hashes.get(item.source_file)
            if sha and item.size_bytes:
                owner = first.setdefault(sha, (index, item.source_file))
                if 0 <= owner[0] != index:
                    extra[index].append((owner[1], sha, item.size_bytes))
    return extra


def _get(ray, refs):
    try:
        return ray.get(refs)
    except ray.exceptions.RayError as error:
        text = str(error).strip().splitlines()
        raise StoreError(f"a Ray task failed: {text[-1] if text else type(error).__name__}",
                         hint="nothing was committed; see the task's error above, fix it and ingest again") from error


def _versions() -> tuple[str, int]:
    return speclogs.__version__, SCHEMA_VERSION


def hash_files(files: list[InputFile]) -> dict:
    """source_file → sha256 of the bytes on disk ('' when unreadable: the parse round says why); '' → versions."""
    found: dict = {"": _versions()}
    for item in files:
        try:
            with open(item.path, "rb") as handle:
                found[item.source_file] = hashlib.file_digest(handle, "sha256").hexdigest()
        except (OSError, TypeError):
            found[item.source_file] = ""
    return found


# the grammars compiled once per worker process, reused by its tasks
_worker_engine = functools.lru_cache(maxsize=2)(compile_grammars)


def parse_files(files: list[InputFile], lake_dir: Path, stored: list[tuple[str, str, int]], grammars: tuple[str, ...],
                chunk_bytes: int) -> tuple[Tally, dict]:
    """One task: the lake's ingest of `files` into a scratch database. Returns its account and its tables (Arrow)."""
    engine = _worker_engine(tuple(Path(p) for p in grammars))
    import pyarrow as pa

    with contextlib.closing(lake.scratch_ingest(lake_dir, Discovery(files=tuple(files)), lambda: engine, stored,
                                                chunk_bytes=chunk_bytes)) as parsed:
        tally, tables = next(parsed)
        return tally, {table: pa.table(rows) for table, rows in tables.items()}
