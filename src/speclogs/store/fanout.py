"""`speclogs ingest … --lake DIR --ray local|auto|ADDRESS`: the ingest's parsing fanned out as Ray tasks.

Ray schedules, retries lost workers and carries the data; speclogs only says what a task is. The driver discovers the
inputs, opens the lake (speclogs.store.lake) and cuts the files, in discovery order, into tasks of about TASK_BYTES
(never splitting a run). Round 1 hashes each task's files where they are, so that the driver can tell each task which
earlier files have the same content (the first in discovery order is kept, as without Ray). Round 2 runs the ingest
pipeline per task into a LakeSink that keeps the rows; the driver, the one writer, appends them as tasks finish and
commits at the end. A failed task fails the ingest. The inputs must be at the same paths on every node; a cluster
other than 'local' gets speclogs shipped with the job (Ray's py_modules).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import speclogs
from speclogs.errors import StoreError
from speclogs.ingest.pipeline import DEFAULT_CHUNK_BYTES, Tally, run_pipeline
from speclogs.ingest.sources import Discovery, InputFile, discover_inputs
from speclogs.ingest.summary import IngestSummary, ProgressEvent
from speclogs.store import compile_grammars
from speclogs.store.database import SCHEMA_VERSION
from speclogs.store.lake import Collected, LakeSink, SinkResult, commit, open_for_writing, stored_files, stored_run_names

TASK_BYTES = 64 << 20     # input per task at most: big enough that a task's fixed cost is noise
TASKS_PER_CPU = 2         # at least this many tasks per CPU, so that a slow task does not leave CPUs idle at the end


def ingest_lake_ray(
    paths: Sequence[str | Path],
    lake_dir: str | Path,
    address: str,
    *,
    run_name: str | None = None,
    on_progress: Callable[[ProgressEvent], None] | None = None,
    grammar_paths: Sequence[Path] = (),
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    num_cpus: int | None = None,
) -> IngestSummary:
    """Ingest into the lake with the parsing done by tasks on the Ray cluster at `address` ('local': a cluster of
    this machine started for the call, with `num_cpus` CPUs, default all; 'auto': the running one; else its
    address). Raises StoreError when Ray is missing or the cluster cannot be reached, or a task failed."""
    started = time.perf_counter()
    lake_dir = Path(lake_dir).resolve()
    discovery = discover_inputs([str(p) for p in paths], run_name=run_name, known_runs=stored_run_names(lake_dir))
    ray = _ray()
    if not discovery.files:  # nothing to parse: no cluster needed (and the same messages as without --ray)
        from speclogs.store.lake import ingest_lake

        return ingest_lake(paths, lake_dir, run_name=run_name, on_progress=on_progress, grammar_paths=grammar_paths)
    grammars = tuple(str(Path(p).resolve()) for p in grammar_paths)
    out = open_for_writing(lake_dir)
    stored = stored_files(lake_dir)
    try:
        with _cluster(ray, address, num_cpus) as cpus:
            groups = plan_tasks(discovery.files, cpus)
            hashes = _hash_round(ray, groups)
            results = _parse_round(ray, groups, _twins(groups, hashes, stored), stored, grammars, chunk_bytes,
                                   discovery, on_progress, out)
        sink_results: list[SinkResult] = [result for _, result in results]
        commit(out, sink_results)
    except BaseException:
        out.rollback()
        raise
    tally = _account(discovery, [tally for tally, _ in results])
    for result in sink_results:
        tally.warnings.extend(note for note in result.notes if note not in tally.warnings)
    return tally.summary(str(lake_dir), time.perf_counter() - started)


def plan_tasks(files: Sequence[InputFile], cpus: int) -> list[list[InputFile]]:
    """Cut the files, in discovery order, into tasks of about max(total / (cpus × TASKS_PER_CPU), 1 byte) and at most
    TASK_BYTES; a run's files (adjacent in discovery order) are never split between two tasks."""
    total = sum(max(1, item.size_bytes) for item in files)
    target = max(1, min(TASK_BYTES, total // max(1, cpus * TASKS_PER_CPU)))
    groups: list[list[InputFile]] = []
    current: list[InputFile] = []
    size = 0
    for item in files:
        if current and size >= target and item.run.run_id != current[-1].run.run_id:
            groups.append(current)
            current, size = [], 0
        current.append(item)
        size += max(1, item.size_bytes)
    if current:
        groups.append(current)
    return groups


# ----------------------------------------------------------------------------------------------------------------
# the driver's side


def _ray():
    try:
        import ray
    except ImportError as error:
        raise StoreError("--ray needs Ray, which is not installed here",
                         hint="pip install 'speclogs[fleet]' (or pip install ray), or leave out --ray") from error
    return ray


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


def _hash_round(ray, groups: list[list[InputFile]]) -> dict[str, str]:
    task = ray.remote(num_cpus=1)(hash_files)
    hashes: dict[str, str] = {}
    for found in _get(ray, [task.remote(group) for group in groups]):
        versions = found.pop("")
        if versions != _versions():
            raise StoreError(f"a Ray worker runs speclogs {versions[0]} (schema {versions[1]}), this driver "
                             f"{speclogs.__version__} (schema {SCHEMA_VERSION})",
                             hint="install the same speclogs on every node (or let --ray ship it: leave it uninstalled there)")
        hashes.update(found)
    return hashes


def _twins(groups: list[list[InputFile]], hashes: dict[str, str],
           stored: dict[str, dict[str, int]]) -> list[dict[str, dict[str, int]]]:
    """Per task: the files of earlier tasks whose content one of its files repeats (source → {sha256: size}), for the
    pipeline's own same-content rule. Empty files are never twins."""
    first: dict[str, tuple[int, str]] = {}
    for sha_source, shas in stored.items():
        for sha in shas:
            first.setdefault(sha, (-1, sha_source))
    extra: list[dict[str, dict[str, int]]] = [{} for _ in groups]
    for index, group in enumerate(groups):
        for item in group:
            sha = hashes.get(item.source_file)
            if not sha or item.size_bytes == 0:
                continue
            owner = first.setdefault(sha, (index, item.source_file))
            if owner[0] != index and owner[1] != item.source_file and owner[0] >= 0:
                extra[index].setdefault(owner[1], {})[sha] = item.size_bytes
    return extra


def _parse_round(ray, groups, twins, stored, grammars: tuple[str, ...], chunk_bytes: int, discovery: Discovery,
                 on_progress, out) -> list[tuple[Tally, SinkResult]]:
    """The tasks' accounts and results in task order; each task's rows appended to `out` as it finishes."""
    task = ray.remote(num_cpus=1)(parse_files)
    pending = {}
    for index, group in enumerate(groups):
        own_stored = {source: shas for source, shas in stored.items()} | twins[index]
        pending[task.remote(group, own_stored, grammars, chunk_bytes)] = index
    results: list = [None] * len(groups)
    total_bytes = sum(item.size_bytes for item in discovery.files)
    done_bytes = done_files = 0
    show = total_bytes >= (8 << 20) or len(discovery.files) > 50
    waiting = list(pending)
    while waiting:
        ready, waiting = ray.wait(waiting, num_returns=1)
        index = pending[ready[0]]
        tally, result, rows = _get(ray, ready)[0]
        for table, frame in rows:
            out.append(table, frame)
        results[index] = (tally, result)
        done_files += len(groups[index])
        done_bytes += sum(item.size_bytes for item in groups[index])
        if on_progress is not None:
            on_progress(ProgressEvent(f"{len(groups) - len(waiting)}/{len(groups)} Ray tasks", done_bytes, total_bytes,
                                      done_files, len(discovery.files), show))
    return results


def _get(ray, refs):
    try:
        return ray.get(refs)
    except ray.exceptions.RayError as error:
        text = str(error).strip().splitlines()
        raise StoreError(f"a Ray task failed: {text[-1] if text else type(error).__name__}",
                         hint="nothing was committed; see the task's error above, fix it and ingest again") from error


def _account(discovery: Discovery, tallies: list[Tally]) -> Tally:
    """The tasks' accounts added up in task order, with what discovery skipped and noted first (as run_pipeline)."""
    total = Tally.of(discovery)
    for tally in tallies:
        total.absorb(tally)
    return total


# ----------------------------------------------------------------------------------------------------------------
# the tasks (run in Ray worker processes)


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


def parse_files(files: list[InputFile], stored: dict[str, dict[str, int]], grammars: tuple[str, ...],
                chunk_bytes: int) -> tuple[Tally, SinkResult, list]:
    """One task: the pipeline over `files`. Returns its account, what it took in and its rows [(table, frame)]."""
    engine = _worker_engine(tuple(Path(p) for p in grammars))
    rows = Collected()
    sink = LakeSink(rows, stored)
    tally = run_pipeline(Discovery(files=tuple(files)), sink, lambda: engine, chunk_bytes=chunk_bytes)
    return tally, sink.finish(), rows.frames
