"""The ingest pipeline: discover → read → split → classify → assemble → (the store) write.

Small files go in batches, their logs' lines parsed as ONE chunk, a batch parsed on a thread while the sink writes the
one before (`sink.write_batch(batch, tally)`). A big log streams, two chunks parsed at once on threads
(`sink.write_stream(parsed, produce, tally)`: `produce(emit)` hands `emit(table, frame)` each table frame).
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import mmap
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace as replace_field

import polars as pl

from speclogs.errors import InputError, SpeclogsError
from speclogs.ingest import sources
from speclogs.ingest.classify import NEW_PREFIX, Engine, classify
from speclogs.ingest.jsonfiles import parse_bench_json, parse_bench_jsonl, parse_nccl_probe, parse_run_json
from speclogs.ingest.lines import Lines, build_lines, count_lines
from speclogs.ingest.prometheus import parse_prometheus_file
from speclogs.ingest.records import ChunkFiles, ChunkResult, assemble, number_launches
from speclogs.ingest.requests import RequestLog, add_bench_serving_requests, parse_request_export, read_request_lines
from speclogs.ingest.sources import Discovery, InputFile, LogStream, RawInput, read_input
from speclogs.ingest.summary import UNCHANGED, FileAccount, IngestSummary, ProgressEvent

DEFAULT_CHUNK_BYTES = 16 << 20  # two chunks are parsed at once; larger chunks raise peak RSS and buy no speed
BATCH_BYTES = 16 << 20  # small files parsed together, at most this much text (or BATCH_FILES of them) at a time
BATCH_FILES = 4000
PARSE_THREADS = 2
CHUNKS_AHEAD = PARSE_THREADS + 1  # chunks in flight: one more than threads, so a thread never waits for the next chunk
PROGRESS_MIN_BYTES = 8 << 20
NO_SGLANG_WARNING = "no SGLang lines: is this an SGLang log?"
FAILURES = (SpeclogsError, ValueError, OSError, pl.exceptions.PolarsError)  # what parsing a bad input may raise
# Kinds whose identical content in two places is expected, not a copy: a /metrics snapshot taken before a window of
# two fresh launches has the same counters (zero) and so the same text.
SAME_CONTENT_EXPECTED = frozenset({"prometheus"})
# Why read_input could not read a file at all: for a file named on the command line, a failure (exit 1).
UNREADABLE_REASONS = ("permission denied", "read error", "disappeared", "is a directory")


@dataclass
class ParsedFile:
    """One file on its way into the database: its account (the rows themselves travel in a Batch or a stream)."""

    item: InputFile
    source_file: str
    raw: RawInput
    replaces: bool
    account: FileAccount = FileAccount()  # what its lines came to so far (its `files` row)
    launch_rows: list = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Batch:
    """Files parsed together: every row of `tables` has `file`, its file's index in `files`."""

    files: list[ParsedFile]
    tables: dict[str, pl.DataFrame]

    def of(self, index: int) -> Batch:
        """The batch of file `index` alone (to write it on its own when the batch as a whole fails)."""
        tables = {table: frame.filter(pl.col("file") == index).with_columns(pl.lit(0, dtype=pl.Int32).alias("file"))
                  for table, frame in self.tables.items()}
        return Batch([self.files[index]], {table: frame for table, frame in tables.items() if frame.height})


@dataclass
class Tally:
    """The account of one pipeline run, for IngestSummary; the sink adds what it wrote or failed to write."""

    files_total: int
    bytes_total: int
    ingested: int = 0
    unchanged: int = 0
    bytes_done: int = 0
    account: FileAccount = FileAccount()  # of the files ingested, added up
    warnings: list = field(default_factory=list)
    runs: set = field(default_factory=set)
    source_files: list = field(default_factory=list)
    skipped_files: list = field(default_factory=list)  # (file, why), unchanged files excepted
    replaced: list = field(default_factory=list)  # (file, why)
    restat: list = field(default_factory=list)  # (file, size, mtime_ns, inode) of stored content found again
    failed: list = field(default_factory=list)  # "source_file: why", for the summary and the exit code
    writing: tuple = ()  # the files being written now (what an interrupt rolls back)
    files_left_out: int = 0  # files of this call skipped or failed (read, not stored)

    @classmethod
    def of(cls, discovery: Discovery) -> Tally:
        return cls(len(discovery.files), sum(f.size_bytes for f in discovery.files), skipped_files=list(discovery.skipped_files),
                   warnings=list(discovery.notes))

    def skip(self, reason: str, where: str) -> None:
        if reason == UNCHANGED:
            self.unchanged += 1
        else:
            self.skipped_files.append((where, reason))
        self.files_left_out += 1

    def fail(self, reason: str, where: str) -> None:
        """A file that should have been stored and is not: skipped with `reason`, and listed as failed."""
        self.skip(reason, where)
        self.failed.append(f"{where}: {reason}")

    def interrupted(self) -> IngestInterrupted:
        rolled_back = f"rolled back: {', '.join(self.writing)}" if self.writing else "nothing was being written"
        files_left = self.files_total - self.ingested - self.files_left_out - len(self.writing)
        left = f"; {files_left:,} file(s) not ingested" if files_left > 0 else ""
        return IngestInterrupted(f"interrupted: {self.ingested:,} file(s) ingested before it are kept; {rolled_back}{left}")

    def absorb(self, other: Tally) -> None:  # another run's account (not its totals)
        self.ingested += other.ingested
        self.unchanged += other.unchanged
        self.bytes_done += other.bytes_done
        self.account += other.account
        self.runs |= other.runs
        for name in ("warnings", "source_files", "skipped_files", "replaced", "failed"):
            getattr(self, name).extend(getattr(other, name))

    def add(self, parsed: ParsedFile) -> None:
        self.ingested += 1
        self.runs.add(parsed.item.run.run_name)
        self.source_files.append(parsed.source_file)
        self.account += parsed.account.counts()
        self.warnings.extend(f"{parsed.source_file}: {warning}" for warning in parsed.account.warnings)

    def summary(self, db_path: str, seconds: float) -> IngestSummary:
        return IngestSummary(
            db_path=db_path, files_found=self.files_total, files_ingested=self.ingested, files_unchanged=self.unchanged,
            bytes_read=self.bytes_done, seconds=seconds, account=self.account, warnings=tuple(self.warnings),
            runs=tuple(sorted(self.runs)), source_files=tuple(self.source_files), skipped_files=tuple(self.skipped_files),
            replaced=tuple(self.replaced), failed=tuple(self.failed))


class IngestInterrupted(KeyboardInterrupt):
    """Ctrl-C during an ingest; the message says what was kept and what was rolled back (the CLI: exit 130)."""


def run_pipeline(discovery: Discovery, sink, engine_for: Callable[[], Engine], stored: list[tuple], *, replace: bool = False,
                 on_progress: Callable[[ProgressEvent], None] | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Tally:
    """Read, parse and hand to `sink` the inputs of `discovery` whose content is not `stored` ((source_file, sha256,
    size_bytes[, run_id]) each). `engine_for()` compiles the grammars, when there is a log. InputError: no input named."""
    if not discovery.files and not discovery.skipped_files:
        raise InputError("nothing to ingest", hint="pass log files, directories, .gz files or '-' for stdin")
    tally = Tally.of(discovery)
    engine = engine_for() if any(f.kind == "log" for f in discovery.files) else None
    contents = Contents(stored)
    show = tally.bytes_total >= PROGRESS_MIN_BYTES or tally.files_total > 50

    def progress(item: InputFile, index: int, fraction: float = 0.0) -> None:
        if on_progress is not None:
            name = item.source_file if len(item.source_file) <= 60 else "…" + item.source_file[-59:]
            on_progress(ProgressEvent(name, tally.bytes_done + int(fraction * item.size_bytes), tally.bytes_total, index,
                                      tally.files_total, show))

    batch: list[ParsedFile] = []
    batch_bytes = 0
    parsing: Future | None = None

    def flush() -> None:
        """Hand the batch to the parser thread and write the one parsed before (called twice: write this one too)."""
        nonlocal batch, batch_bytes, parsing
        submitted = pool.submit(_parse_files, batch, engine) if batch else None
        for done in parsing.result() if parsing is not None else ():  # a Batch, or a file that failed and its error
            if isinstance(done, Batch):
                tally.writing = tuple(parsed.source_file for parsed in done.files)
                sink.write_batch(done, tally)
                tally.writing = ()
            else:
                tally.fail(f"failed ({type(done[1]).__name__}: {first_line(done[1])})", done[0].source_file)
        parsing, batch, batch_bytes = submitted, [], 0

    # the cyclic GC off: it walks every live object each time, and an ingest holds many frames (freed by reference
    # counting; collect_cycles collects the few cycles once a chunk)
    gc_enabled = gc.isenabled()
    gc.disable()
    # a batch is parsed on a thread while the one before is written: polars and DuckDB release the GIL
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="speclogs-batch") as pool:
            for index, item in enumerate(discovery.files):
                progress(item, index)
                parsed = _read(item, contents, tally, replace=replace, named=discovery.named)
                big = parsed is not None and (parsed.raw.stream is not None or len(parsed.raw.data) >= sources.STREAM_MIN_BYTES)
                if big and item.kind == "log":
                    flush()
                    flush()
                    tally.writing = (parsed.source_file,)
                    sink.write_stream(parsed, lambda emit, parsed=parsed, index=index: _parse_stream(
                        parsed, engine, emit, chunk_bytes, lambda fraction: progress(parsed.item, index, fraction)), tally)
                    tally.writing = ()
                elif parsed is not None:
                    batch.append(parsed)
                    batch_bytes += len(parsed.raw.data)
                    if batch_bytes >= BATCH_BYTES or len(batch) >= BATCH_FILES:
                        flush()
                tally.bytes_done += item.size_bytes
            flush()
            flush()
    except KeyboardInterrupt:
        # a second Ctrl-C while the interrupted ingest closes the database would land in the middle of the cleanup
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise tally.interrupted() from None
    finally:
        if gc_enabled:
            gc.enable()
    if on_progress is not None:
        on_progress(ProgressEvent("done", tally.bytes_total, tally.bytes_total, tally.files_total, tally.files_total, show))
    return tally


class Contents:
    """Which content is where (stored, or read earlier in this call), to ingest the same content once. A sha256 is
    asked for only when another file has the same size: a big log is hashed as it is streamed."""

    def __init__(self, stored: list[tuple]) -> None:
        self._by_size: dict[int, list[tuple[str, RawInput]]] = {}
        self._sources: dict[str, list[RawInput]] = {}
        self.sizes: dict[str, int] = {}  # source → its stored size (the last one added)
        self.run_ids: dict[str, str | None] = {}  # source → the run its stored rows belong to
        for source_file, sha256, size_bytes, *run_id in stored:
            self.add(source_file, RawInput(data=b"", digest=sha256, size_bytes=size_bytes))
            self.run_ids[source_file] = run_id[0] if run_id else None

    def known(self, source_file: str) -> set[str]:  # the sha256 of each content stored (or read) under it
        return {raw.sha256 for raw in self._sources.get(source_file, ())}

    def twin(self, source_file: str, raw: RawInput) -> str | None:  # another source of the same (non-empty) content
        same_size = self._by_size.get(raw.size_bytes, ()) if raw.size_bytes else ()
        return next((source for source, other in same_size if source != source_file and other.sha256 == raw.sha256), None)

    def add(self, source_file: str, raw: RawInput) -> None:
        self._by_size.setdefault(raw.size_bytes, []).append((source_file, raw))
        self._sources.setdefault(source_file, []).append(raw)
        self.sizes[source_file] = raw.size_bytes


def _read(item: InputFile, contents: Contents, tally: Tally, *, replace: bool,
          named: frozenset[str] = frozenset()) -> ParsedFile | None:
    """Read one input, or say why it is left out (a stored file that grew, or one of a launch directory, replaces its rows)."""
    raw = read_input(item)
    source_file = item.source_file
    if item.path is None and raw.sha256:
        source_file = f"{sources.STDIN_NAME[:-1]}:{raw.sha256[:12]}>"
        if item.run.run_name == sources.STDIN_RUN:  # no --run-name: each text piped in is a run of its own
            name = f"{sources.STDIN_RUN}-{raw.sha256[:8]}"
            item = replace_field(item, run=replace_field(item.run, run_id=sources.run_id_for(f"stdin:{name}"), run_name=name))
    tally.warnings.extend(f"{source_file}: {warning}" for warning in raw.warnings)
    if raw.skipped_reason is not None:
        fail = source_file in named and raw.skipped_reason.startswith(UNREADABLE_REASONS)
        (tally.fail if fail else tally.skip)(raw.skipped_reason, source_file)
        return None
    digests = contents.known(source_file)
    if digests and not replace:
        rerun = item.run.cell is not None and contents.run_ids.get(source_file) not in (None, item.run.run_id)
        if raw.sha256 in digests and not rerun:
            tally.skip(UNCHANGED, source_file)
            if item.stat is not None:  # touched or copied: the next ingest then skips it unread
                tally.restat.append((source_file, item.stat.st_size, item.stat.st_mtime_ns, item.stat.st_ino))
            return None
        if rerun:
            tally.replaced.append((source_file, "its launch ran again (a new run.json): read again, its rows replaced"))
        elif _appended(item, contents.sizes.get(source_file, 0), digests):
            tally.replaced.append((source_file, "lines appended since it was ingested: read again, its rows replaced"))
        elif item.run.cell is not None or item.kind == "run_json":
            tally.replaced.append((source_file, "changed in its launch directory: read again, its rows replaced"))
        else:
            tally.skip("content changed since it was ingested (use --replace to re-ingest)", source_file)
            return None
    twin = contents.twin(source_file, raw) if item.kind not in SAME_CONTENT_EXPECTED else None
    if twin is not None:
        tally.skip("the same content as a file already ingested, skipped", source_file)
        tally.warnings.append(f"{source_file}: the same content as {twin}: ingested once, as {twin}")
        return None
    contents.add(source_file, raw)
    return ParsedFile(item=item, source_file=source_file, raw=raw, replaces=bool(digests))


def _appended(item: InputFile, stored_size: int, digests: set[str]) -> bool:
    """Whether a plain file's first `stored_size` bytes are what was stored (lines were appended since)."""
    if item.path is None or item.path.suffix == ".gz" or not 0 < stored_size < item.size_bytes:
        return False
    try:  # (mapped, not read: the pages stay the OS's cache, however big the log)
        with open(item.path, "rb") as handle, mmap.mmap(handle.fileno(), stored_size, access=mmap.ACCESS_READ) as head:
            return hashlib.sha256(head).hexdigest() in digests
    except (OSError, ValueError):  # (ValueError: the file shrank below stored_size since it was found)
        return False


def _parse_files(files: list[ParsedFile], engine: Engine | None) -> list[Batch | tuple[ParsedFile, BaseException]]:
    """Small files parsed as one batch; when that fails, file by file (a file that fails comes back with its error)."""
    started = time.perf_counter()
    try:
        batch = parse_batch(files, engine)
        collect_cycles()
    except FAILURES:
        out: list[Batch | tuple[ParsedFile, BaseException]] = []
        for parsed in files:
            try:
                out.append(parse_batch([parsed], engine))
            except FAILURES as error:
                out.append((parsed, error))
        return out
    share = (time.perf_counter() - started) / len(files)
    for parsed in files:
        parsed.seconds = share
    return [batch]


def collect_cycles() -> None:
    # run_pipeline turns the cyclic GC off, and ast.literal_eval (server_args, --log-requests values) leaves a cycle a value
    gc.collect(0)


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else ""


def parse_batch(files: list[ParsedFile], engine: Engine | None) -> Batch:
    """Small files parsed together: every log's lines in one chunk, every JSON input on its own."""
    tables: dict[str, list[pl.DataFrame]] = {}
    logs = [index for index, parsed in enumerate(files) if parsed.item.kind == "log"]
    if logs:
        chunk = _parse_logs([files[index].raw.data for index in logs], engine)
        requests = RequestLog()  # --log-requests lines, paired within each file into requests rows
        requests.add(read_request_lines(chunk.tables.get("server_events")))
        frames = {**chunk.tables, "requests": requests.frame()}
        for table, frame in frames.items():
            if frame is not None:  # `file` is the position among the logs: made the index among the files
                frame = frame.with_columns(pl.col("file").replace_strict(range(len(logs)), logs, return_dtype=pl.Int32))
                tables.setdefault(table, []).append(frame)
        for position, index in enumerate(logs):
            files[index].account += chunk.files[position]
            _finish_log(files[index])
    for index, parsed in enumerate(files):
        if parsed.item.kind != "log":
            for table, frame in _parse_json(parsed).items():
                tables.setdefault(table, []).append(frame.with_columns(pl.lit(index, dtype=pl.Int32).alias("file")))
    merged = {table: pl.concat(frames, how="diagonal_relaxed") for table, frames in tables.items()}
    rows: dict[int, dict[str, int]] = {}
    for table, frame in merged.items():
        for index, count in frame.group_by("file").len().iter_rows():
            rows.setdefault(index, {})[table] = count
    for index, counts in rows.items():
        files[index].account = replace_field(files[index].account, rows=counts)  # (none counted before: one chunk)
    return Batch(files, merged)


def _parse_logs(texts: list[bytes], engine: Engine) -> ChunkResult:
    """Logs as one chunk: their text joined, each ending with a newline, one empty line between two (no file's
    record can reach into the next); the empty lines between them belong to no file."""
    counts = [count_lines(text) for text in texts]
    starts = list(itertools.accumulate((count + 1 for count in counts[:-1]), initial=1))
    parts = [text if not text or text.endswith(b"\n") else text + b"\n" for text in texts]
    lines = build_lines(b"\n".join(parts) + b"\n", engine.wrappers)
    gaps = {start + count for start, count in zip(starts, counts)}
    lines = replace_field(lines, blank=tuple(n for n in lines.blank if n not in gaps))
    return _assemble_chunk(engine, lines, classify(engine, lines.frame, tuple(starts)), ChunkFiles(tuple(starts), tuple(counts)))


def _parse_json(parsed: ParsedFile) -> dict[str, pl.DataFrame]:
    text, kind = parsed.raw.data.decode("utf-8"), parsed.item.kind
    readers = {"run_json": parse_run_json, "bench_json": parse_bench_json, "request_export": parse_request_export,
               "nccl_probe": lambda text: parse_nccl_probe(text, parsed.source_file),
               "prometheus": lambda text: parse_prometheus_file(text, parsed.item.path)}
    if kind in readers:
        tables, account = readers[kind](text)
    else:
        tables, account = parse_bench_jsonl(text, kind=kind)
        add_bench_serving_requests(tables)
    parsed.account += account
    return {table: frame for table, frame in tables.items() if frame.height}


def _finish_log(parsed: ParsedFile) -> None:  # its warnings and launches, once all its chunks are in
    account = parsed.account
    warnings = list(parsed.raw.stream.warnings()) if parsed.raw.stream is not None else []  # what reading found first
    for name, count in sorted(account.drift.items()):
        if name.startswith(NEW_PREFIX):
            warnings.append(f"{count:,} line(s) have a prefix no prefix grammar reads ({name.removeprefix(NEW_PREFIX)!r}): "
                            "their messages were read after it (the drift view, kind new_prefix)")
        else:
            warnings.append(f"{count:,} line(s) look like '{name}' but do not match it (parse_drift has the first ones and why)")
    if account.total_lines and account.prefixed_pieces == 0:
        warnings.append(NO_SGLANG_WARNING)
    parsed.account = replace_field(account, warnings=tuple(warnings) + account.warnings)
    parsed.launch_rows = launch_rows(parsed.item.run.run_id, parsed.source_file, list(account.launch_starts),
                                     account.launch_facts, account.total_lines)


def launch_rows(run_id: str, source_file: str, starts: list[int], facts, total_lines: int) -> list[tuple]:
    """One launches row per server start of a file: its line range and the timestamps of its milestones."""
    if total_lines == 0:
        return []
    bounds = [1, *sorted(starts)[1:], total_lines + 1]  # lines before the first server_args belong to launch 1
    first_ts: dict[tuple[int, str], object] = {}
    last_ts: dict[tuple[int, str], object] = {}
    for launch_no, fact, ts in facts:
        first_ts[launch_no, fact] = min(first_ts.get((launch_no, fact), ts), ts)
        last_ts[launch_no, fact] = max(last_ts.get((launch_no, fact), ts), ts)
    rows = []
    for launch_no, (first, after) in enumerate(zip(bounds, bounds[1:]), start=1):
        health = first_ts.get((launch_no, "health_200"))
        ready = first_ts.get((launch_no, "ready")) or health
        rows.append((run_id, source_file, launch_no, first, after - 1, first_ts.get((launch_no, "server_args")), ready, health,
                     last_ts.get((launch_no, "cuda_graph_end")), first_ts.get((launch_no, "sigterm"))))
    return rows


def _parse_stream(parsed: ParsedFile, engine: Engine, emit, chunk_bytes: int, on_progress: Callable[[float], None]) -> None:
    """Parse a big log chunk by chunk, handing every table frame to `emit(table, frame)`; then its account."""
    size = parsed.raw.size_bytes if parsed.raw.stream is not None else len(parsed.raw.data)
    requests = RequestLog()  # --log-requests lines, paired across chunks into requests rows
    for chunk in parse_log_chunks(parsed.raw.stream or parsed.raw.data, engine, chunk_bytes=chunk_bytes):
        rows = {table: frame.height for table, frame in chunk.tables.items() if frame.height}
        for table in rows:
            emit(table, chunk.tables[table])
        requests.add(chunk.request_lines)
        parsed.account += replace_field(chunk.files[0], rows=rows)
        collect_cycles()
        on_progress(chunk.byte_end / max(1, size))
    frame = requests.frame()
    if frame is not None:
        parsed.account += FileAccount(rows={"requests": frame.height})
        emit("requests", frame)
    _finish_log(parsed)


def parse_log_chunks(source: bytes | LogStream, engine: Engine, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[ChunkResult]:
    """Parse one log (valid UTF-8 bytes, or a LogStream), PARSE_THREADS chunks at once (polars releases the GIL)."""
    stream = source if isinstance(source, LogStream) else LogStream(bytes(source), len(source))
    launches_before, first_line_no = 0, 1
    pending: deque[tuple[int, Future]] = deque()  # (byte_end, the chunk's parse), in file order

    def next_result() -> ChunkResult:
        nonlocal launches_before
        byte_end, parsing = pending.popleft()
        result = number_launches(parsing.result(), launches_before)
        launches_before += len(result.files[0].launch_starts)
        result.byte_end = byte_end
        return result

    with ThreadPoolExecutor(max_workers=PARSE_THREADS, thread_name_prefix="speclogs-chunk") as pool:
        for view in stream.chunks(chunk_bytes):  # lines counted as chunks are handed out: the first parses at once
            chunk = bytes(view)  # (the one copy of it that splitting and counting need)
            pending.append((stream.bytes_read, pool.submit(_parse_chunk, chunk, engine, first_line_no)))
            first_line_no += count_lines(chunk)
            if len(pending) >= CHUNKS_AHEAD:
                yield next_result()
        while pending:
            yield next_result()


def _parse_chunk(chunk: bytes | memoryview, engine: Engine, first_line_no: int) -> ChunkResult:
    lines = build_lines(chunk, engine.wrappers, first_line_no)
    result = _assemble_chunk(engine, lines, classify(engine, lines.frame), ChunkFiles((1,), (lines.raw.height,), numbered=False))
    result.request_lines = read_request_lines(result.tables.get("server_events"))
    return result


def _assemble_chunk(engine: Engine, lines: Lines, claims, files: ChunkFiles) -> ChunkResult:
    return assemble(engine, claims, lines.raw, files, blank=lines.blank, too_long=lines.too_long, outer_prefixes=lines.outer_prefixes)
