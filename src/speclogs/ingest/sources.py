"""Which files to ingest and which run each belongs to (`discover_inputs`), and reading their bytes safely
(`read_input`: a bad file gives a skip reason or warnings, never an exception; a big log is a `LogStream`)."""

from __future__ import annotations

import codecs
import errno
import hashlib
import io
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from speclogs.errors import InputError
from speclogs.runrecord import FILE_NAME as RUN_JSON_NAME, read_run_json

STDIN_NAME = "<stdin>"
STDIN_RUN = "stdin"  # the run of text piped in without --run-name (named apart by its content once read)

# File kinds and the names that select them inside a directory (explicitly named files are always read).
LOG_SUFFIXES = (".log", ".txt", ".out", ".log.gz", ".txt.gz", ".out.gz")
PROM_SUFFIX = ".prom"  # a Prometheus text snapshot (GET /metrics)
# (kind, test of a file name), the first that passes wins; SGLang's --export-metrics-to-file writes
# sglang-request-metrics-YYYYMMDD_HH.log, and our own copies of one end in request_export.jsonl / .requests.jsonl
_KINDS = (
    ("run_json", lambda name: name == RUN_JSON_NAME),
    ("nccl_probe", lambda name: name.endswith(".nccl_probe.json")),
    ("prometheus", lambda name: name.endswith(PROM_SUFFIX)),
    ("request_export", lambda name: name.startswith("sglang-request-metrics-")
     or name.endswith(("request_export.jsonl", ".requests.jsonl"))),
    ("bench_jsonl", lambda name: name.endswith(".bench.jsonl") or name == "bench.jsonl"),
    ("bench_json", lambda name: name.endswith(".bench.json")),
    ("jsonl", lambda name: name.endswith(".jsonl")),
    ("log", lambda name: name.endswith(LOG_SUFFIXES)),
)
# Longest first: the stem of 'a.bench.jsonl' is 'a', not 'a.bench'.
_STEM_SUFFIXES = tuple(sorted({".nccl_probe.json", ".bench.jsonl", ".bench.json", *LOG_SUFFIXES, ".jsonl", ".gz", ".json"},
                              key=len, reverse=True))

BINARY_PROBE_BYTES = 8192
_BINARY_MAGIC = (b"\x7fELF", b"\x89PNG", b"PK\x03\x04", b"%PDF", b"SQLite format 3", b"\xff\xd8\xff", b"GIF8", b"BZh",
                 b"\xfd7zXZ", b"(\xb5/\xfd")
_GZIP_MAGIC = b"\x1f\x8b"
_REPLACEMENT = "\ufffd".encode("utf-8")


@dataclass(frozen=True)
class RunRef:
    """The run a file belongs to: a log stem, a launcher launch directory, or a name given with --run-name."""

    run_id: str
    run_name: str
    source_dir: str | None
    cell: str | None = None
    launch_index: int | None = None


@dataclass(frozen=True)
class InputFile:
    """One file to ingest. `source_file` is what the tables' source_file column holds (resolved path or '<stdin>')."""

    source_file: str
    kind: str  # one of _KINDS' kinds
    run: RunRef
    path: Path | None  # None for stdin
    size_bytes: int
    stat: os.stat_result | None = None  # taken when it was found (what an unchanged file is known by)


@dataclass(frozen=True)
class Discovery:
    """What discovery found: the files to read, and what it skipped with a reason."""

    files: tuple[InputFile, ...]
    notes: tuple[str, ...] = ()  # what a user should know (run names shared by different runs)
    skipped_files: tuple[tuple[str, str], ...] = ()  # (path, reason) of every file or directory skipped
    named: frozenset[str] = frozenset()  # source_file of every file named itself (not found in a directory)


STREAM_MIN_BYTES = 16 << 20  # logs with this much text are read chunk by chunk, never whole
GZIP_TEXT_RATIO = 8  # an SGLang log compresses 8-10×: a .gz of STREAM_MIN_BYTES / 8 on disk is streamed too
GZIP_READ_BYTES = 1 << 20  # compressed bytes read from disk at a time
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib reads the gzip header and trailer (CRC, length) itself
# How far back from where zlib found a deflate stream broken its output may already be garbage: a damaged block
# decodes to wrong text until a code cannot be (measured on flipped bytes: 50–250 bytes before the error).
GARBLED_BYTES = 1024
_CHECKSUM_REASONS = ("incorrect data check", "incorrect length check")  # zlib's: all text was decompressed, its CRC is wrong


def tapered_bytes(done: int, remaining: int, chunk_bytes: int) -> int:
    """The next chunk's size: from an eighth of chunk_bytes doubling up to it (the writer gets rows early), then over
    the last two chunks' worth halving down to an eighth (the two parse threads finish together)."""
    size = chunk_bytes if done >= chunk_bytes else max(chunk_bytes // 8, done)
    if remaining > 2 * chunk_bytes:
        return size
    return min(size, max(chunk_bytes // 8, remaining // 2))


class PlainText:
    """A plain file's bytes as they are read, each byte hashed once; what follows a chunk's cut is given back with
    `unread` and read again with the next block, so a chunk is one read, never a copy."""

    def __init__(self, handle, digest) -> None:
        self._handle = handle
        self._digest = digest
        self._at = 0  # where the next read starts
        self.disk_bytes = 0  # bytes read from the file (and hashed): the furthest a read went
        self.problem: str | None = None

    def read(self, size: int) -> bytes:
        block = self._handle.read(size)
        end = self._at + len(block)
        if end > self.disk_bytes:
            self._digest.update(memoryview(block)[len(block) - (end - self.disk_bytes):])
            self.disk_bytes = end
        self._at = end
        return block

    def unread(self, tail: memoryview) -> None:
        if len(tail):
            self._at -= len(tail)
            self._handle.seek(self._at)

    def remaining(self, size_bytes: int) -> int:
        return size_bytes - self._at


class GzipText:
    """The text of a gzip file (one member or several), its bytes on disk hashed on the way (`digest`). Where the data
    stops being readable the text ends, kept to the last byte (_salvage); `problem` says where, `reason` why. The last
    GARBLED_BYTES are held back: at a broken deflate stream the lines they touch may be garbage and are dropped."""

    def __init__(self, handle, digest=None) -> None:
        self._handle = handle
        self._digest = digest
        self._decompressor = zlib.decompressobj(_GZIP_WBITS)
        self._input = b""  # compressed bytes read, not decompressed yet
        self._unread: bytes | memoryview = b""  # text given back (unread), read again first
        self._held = b""  # text decompressed, not given yet: the last GARBLED_BYTES
        self._ended = False
        self.disk_bytes = 0
        self.text_bytes = 0  # bytes of text decompressed
        self.reason: str | None = None  # why the text ended early ('truncated', zlib's reason); None when it did not
        self.problem: str | None = None

    def read(self, size: int) -> bytes:
        pieces = [self._unread] if self._unread else []
        have = len(self._unread)
        self._unread = b""
        while have < size and (self._held or not self._ended):
            while not self._ended and len(self._held) <= GARBLED_BYTES + size - have:
                self._held += self._next(GARBLED_BYTES + size - have - len(self._held) + 1)
            if self._ended:
                piece, self._held = self._without_garbage(self._held), b""
            else:
                piece, self._held = self._held[: size - have], self._held[size - have:]
            pieces.append(piece)
            have += len(piece)
        return pieces[0] if len(pieces) == 1 and isinstance(pieces[0], bytes) else b"".join(pieces)

    def _without_garbage(self, tail: bytes) -> bytes:
        """The text's last bytes without the lines within GARBLED_BYTES of a broken deflate stream (a failed checksum
        or a file cut short says nothing of where the damage is: nothing is dropped for them)."""
        if self.reason is None or self.reason == "truncated" or self.reason in _CHECKSUM_REASONS:
            return tail
        cut = tail.rfind(b"\n", 0, max(0, len(tail) - GARBLED_BYTES)) + 1
        if dropped := tail[cut:]:
            lines = dropped.count(b"\n") + (0 if dropped.endswith(b"\n") else 1)
            self.problem = f"{self.problem}; {lines:,} line(s) decompressed just before the break dropped (may be garbled)"
        return tail[:cut]

    def unread(self, tail: memoryview) -> None:
        self._unread = tail  # kept: a gzip cannot seek back

    def read_all(self) -> bytes:
        return b"".join(iter(lambda: self.read(STREAM_MIN_BYTES), b""))

    def remaining(self, size_bytes: int) -> int:  # about how much text is left, at the ratio of text to gzip so far
        consumed = self.disk_bytes - len(self._input)
        if self._ended:
            return len(self._unread) + len(self._held)
        if consumed <= 0 or not self.text_bytes:
            return size_bytes * GZIP_TEXT_RATIO
        return (size_bytes - consumed) * self.text_bytes // consumed

    def skip_reason(self) -> str | None:  # why a file broken from its first bytes gives no text at all
        return f"not readable as gzip ({self.reason}): nothing decompresses" if self.reason is not None and not self.text_bytes else None

    def _next(self, limit: int) -> bytes:
        """Up to `limit` more bytes of text (b'' between members, or once it has ended)."""
        if self._decompressor.eof:  # a member has ended: the next one starts, or the gzip data is over
            if len(self._input) < len(_GZIP_MAGIC):
                self._input += self._read_disk()
            if not self._input:
                self._ended = True
            elif self._input.startswith(_GZIP_MAGIC):
                self._decompressor = zlib.decompressobj(_GZIP_WBITS)
            else:
                ignored = len(self._input) + self._drain()
                self._stop(None, f"{ignored:,} bytes after the end of the gzip data ignored (not gzip)")
            return b""
        if not self._input:
            self._input = self._read_disk()
        at_end = not self._input  # the file is read: what zlib still holds, then the member must have ended
        before = self._decompressor.copy()
        try:
            out = self._decompressor.flush() if at_end else self._decompressor.decompress(self._input, limit)
        except zlib.error as error:
            out = b"" if at_end else _salvage(before, self._input)
            self.text_bytes += len(out)
            reason = str(error).rpartition(": ")[2]
            note = " (its checksum does not match: some of them may be damaged)" if reason in _CHECKSUM_REASONS else ""
            self._stop(reason, f"corrupt gzip data after {self.text_bytes:,} bytes of text ({reason}): the lines before "
                               f"are kept{note}")
            return out
        self.text_bytes += len(out)
        if at_end and not self._decompressor.eof:
            self._stop("truncated", f"truncated gzip: the file ends after {self.text_bytes:,} bytes of text; the lines "
                                    "before are kept")
            return out
        self._input = self._decompressor.unused_data if self._decompressor.eof else self._decompressor.unconsumed_tail
        return out

    def _stop(self, reason: str | None, problem: str) -> None:
        self.reason, self.problem = reason, problem
        self._input = b""
        self._ended = True
        self._drain()

    def _drain(self) -> int:  # read (and hash) the rest of the file; → how many bytes that was
        return sum(len(block) for block in iter(self._read_disk, b""))

    def _read_disk(self) -> bytes:
        block = self._handle.read(GZIP_READ_BYTES)
        if self._digest is not None:
            self._digest.update(block)
        self.disk_bytes += len(block)
        return block


def _salvage(decompressor, data: bytes) -> bytes:
    """The text `decompressor` (the state before a call that failed) gives for `data` before the error, fed a byte at
    a time (once per damaged file) so that no byte decompressed before it is lost."""
    out = []
    for index in range(len(data)):
        try:
            out.append(decompressor.decompress(data[index : index + 1]))
        except zlib.error:
            break
    return b"".join(out)


class LogStream:
    """A big log on disk, plain or gzip, read chunk by chunk, each chunk hashed (the bytes on disk) and made valid
    UTF-8 as it is read. Chunks end just before a line that starts with '[' (an SGLang record) where there is one,
    else after a newline, so no line and no traceback is cut in two."""

    def __init__(self, path: Path | bytes, size_bytes: int, *, gzipped: bool = False) -> None:
        self.path = path  # or the text itself, already valid UTF-8 (stdin read whole)
        self.size_bytes = size_bytes
        self.gzipped = gzipped
        self.bytes_read = 0  # bytes of the file read (on disk, also for a gzip)
        self.invalid_utf8 = 0
        self.nul_bytes = 0
        self.problem: str | None = None  # where a gzip's data stopped being readable (known once read through)
        self._hash = hashlib.sha256()
        self._digest: str | None = None

    def chunks(self, chunk_bytes: int) -> Iterator[bytes | memoryview]:
        """Valid-UTF-8 chunks of about chunk_bytes of text, each the head of one block read (its rest starts the next)."""
        with io.BytesIO(self.path) if isinstance(self.path, bytes) else open(self.path, "rb") as handle:
            text = GzipText(handle, self._hash) if self.gzipped else PlainText(handle, self._hash)
            done = 0  # bytes of text in the chunks so far
            size = tapered_bytes(0, text.remaining(self.size_bytes), chunk_bytes)
            while block := self._read(text, size):
                if len(block) < size or text.remaining(self.size_bytes) < chunk_bytes // 16:  # the end, or nearly
                    rest = [block]
                    while following := self._read(text, chunk_bytes):
                        rest.append(following)
                    yield self._valid(rest[0] if len(rest) == 1 else b"".join(rest))
                    break
                view = memoryview(block)
                cut = block.rfind(b"\n[") + 1  # just before the last record that starts in the block
                if cut == 0:
                    cut = block.rfind(b"\n") + 1 if len(block) >= chunk_bytes else 0
                if cut == 0:  # no line end in it (one very long line), or no record starts in a tapered block: read more
                    text.unread(view)
                    size = 2 * len(block)
                    continue
                text.unread(view[cut:])
                done += cut
                yield self._valid(view[:cut])
                tail = len(block) - cut  # read again: the next block is the tail and the next chunk's worth of new text
                size = tail + tapered_bytes(done + tail, text.remaining(self.size_bytes) - tail, chunk_bytes)
            self.problem = text.problem
        self._digest = self._hash.hexdigest()

    def _read(self, text: PlainText | GzipText, size: int) -> bytes:
        block = text.read(size)
        self.bytes_read = text.disk_bytes
        return block

    def _valid(self, chunk: bytes) -> bytes:
        data, invalid, nuls = make_valid_text(chunk)
        self.invalid_utf8 += invalid
        self.nul_bytes += nuls
        return data

    def result(self) -> str:
        """sha256 of the bytes read when it was read through, else of the file as it is now ("" when it is gone)."""
        if self._digest is not None:
            return self._digest
        try:
            with open(self.path, "rb") as handle:
                return hashlib.file_digest(handle, "sha256").hexdigest()
        except OSError:
            return ""

    def warnings(self) -> list[str]:  # known once it was read through
        return ([self.problem] if self.problem else []) + _read_warnings(self.size_bytes, self.bytes_read, self.invalid_utf8,
                                                                         self.nul_bytes)


def _read_warnings(found_bytes: int, read_bytes: int, invalid_utf8: int, nul_bytes: int) -> list[str]:
    warnings = []
    if found_bytes and read_bytes != found_bytes:
        warnings.append(f"changed while being read ({found_bytes:,} bytes when found, {read_bytes:,} when read)")
    if invalid_utf8:
        warnings.append(f"{invalid_utf8:,} invalid UTF-8 byte sequences replaced by U+FFFD")
    if nul_bytes:
        warnings.append(f"{nul_bytes:,} NUL bytes replaced by U+FFFD")
    return warnings


@dataclass(frozen=True)
class RawInput:
    """A file's valid UTF-8 text and what was wrong with it; a big log's `stream` reads it chunk by chunk instead."""

    data: bytes
    digest: str | LogStream
    size_bytes: int
    skipped_reason: str | None = None
    warnings: tuple[str, ...] = ()
    invalid_utf8: int = 0
    nul_bytes: int = 0
    stream: LogStream | None = None

    @property
    def sha256(self) -> str:
        return self.digest if isinstance(self.digest, str) else self.digest.result()


def run_id_for(key: str) -> str:
    """run_id: 12 hex digits of sha1 over the run's key."""
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


def file_stem(name: str) -> str:
    """'eagle3_nccl.bench.jsonl' → 'eagle3_nccl'; 'server.log.gz' → 'server'."""
    suffix = next((suffix for suffix in _STEM_SUFFIXES if name.endswith(suffix) and len(name) > len(suffix)), None)
    return name[: -len(suffix)] if suffix else Path(name).stem or name


def kind_for_name(name: str) -> str | None:
    """The file kind a directory walk gives a file name, or None when the name is not one speclogs reads."""
    return next((kind for kind, test in _KINDS if test(name)), None)


def discover_inputs(paths: list[str], *, run_name: str | None = None, known_runs: dict[str, str] | None = None) -> Discovery:
    """PATH arguments → input files with their runs. Named files are always read (as logs unless the name says
    otherwise); directories are walked. A run's name is what it is (run.json's, or the file's stem), never changed by
    what else is ingested: one that other runs (of this call, or `known_runs`) share gets a note. Raises InputError for
    a named path that does not exist, is a symlink loop, or is not a regular file (a FIFO would block)."""
    files: dict[str, InputFile] = {}  # by source_file: each file once
    named_files: set[str] = set()
    launch_dirs: dict[str, RunRef | None] = {}
    skipped_files: list[tuple[str, str]] = []

    def add(path: Path, kind: str, found: os.stat_result, resolved: str | None = None) -> None:
        resolved = resolved or str(path.resolve())
        if resolved not in files:
            run = _run_for(path, os.path.dirname(resolved), run_name, launch_dirs)
            files[resolved] = InputFile(source_file=resolved, kind=kind, run=run, path=path, size_bytes=found.st_size, stat=found)

    for argument in paths:
        if argument == "-":
            if STDIN_NAME not in files:
                name = run_name or STDIN_RUN
                run = RunRef(run_id=run_id_for(f"stdin:{name}"), run_name=name, source_dir=None)
                files[STDIN_NAME] = InputFile(source_file=STDIN_NAME, kind="log", run=run, path=None, size_bytes=0)
            continue
        path = Path(argument)
        found = _stat_named(path, argument)
        if stat.S_ISDIR(found.st_mode):
            _walk(str(path), add, lambda reason, where: skipped_files.append((where, reason)))
        elif not stat.S_ISREG(found.st_mode):
            raise InputError(f"{argument}: not a regular file ({_file_type(found.st_mode)})",
                             hint="speclogs reads files and directories; pipe a stream in as '-' (… | speclogs ingest -)")
        else:
            add(path, kind_for_name(path.name) or "log", found)
            named_files.add(str(path.resolve()))
    notes = _shared_names(list(files.values()), known_runs or {})
    return Discovery(files=tuple(files.values()), notes=tuple(notes), skipped_files=tuple(skipped_files), named=frozenset(named_files))


def _stat_named(path: Path, argument: str) -> os.stat_result:
    """The stat of a named path (following symlinks); InputError saying why when there is none."""
    try:
        return path.stat()
    except FileNotFoundError as error:
        if path.is_symlink():
            raise InputError(f"{argument}: a broken symlink (it points at {os.readlink(path)})",
                             hint="point it at a log file or directory") from error
        raise InputError(f"{argument}: no such file or directory",
                         hint="pass log files, directories, .gz files or '-' for stdin") from error
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise InputError(f"{argument}: a symlink loop", hint="the link points back at itself; point it at a real file") from error
        raise InputError(f"cannot read {argument}: {error.strerror}", hint="check the path and its permissions") from error


def _file_type(mode: int) -> str:
    return {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
            stat.S_IFBLK: "a block device"}.get(stat.S_IFMT(mode), "not a file")


def _shared_names(files: list[InputFile], known_runs: dict[str, str]) -> list[str]:
    """Notes for run names that different runs share (of this call, or stored). Names are never changed here: a run's
    name comes from what it is, so the same logs ingested in any order, alone or together, get the same names; the
    folder (a launcher run's output directory, <output>/<cell>/<launch>, else the log's) tells such runs apart."""
    runs = {item.run.run_id: item.run for item in reversed(files)}  # the first file's RunRef of each run
    by_name: dict[str, set[str]] = {}
    for run_id, name in [*known_runs.items(), *((run.run_id, run.run_name) for run in runs.values())]:
        by_name.setdefault(name, set()).add(run_id)
    notes = []
    for name, run_ids in sorted(by_name.items()):
        if len(run_ids) < 2 or run_ids <= known_runs.keys():  # not shared, or by stored runs alone
            continue
        folders = set()
        for run in (runs[run_id] for run_id in run_ids if run_id in runs):
            launcher = run.cell is not None and run.launch_index is not None and run.source_dir
            folders.add(os.path.basename(os.path.dirname(os.path.dirname(run.source_dir)) if launcher else run.source_dir or ""))
        notes.append(f"run name '{name}' is shared by {len(run_ids)} different runs (folders: {', '.join(sorted(folders))}): "
                     f"select one as 'FOLDER/{name}' or with folder:/cell:/plan: selectors (docs/report.md)")
    return notes


def _walk(top: str, add, skip) -> None:
    """Every file under a directory; symlinked directories followed, each real directory once (a loop is said)."""
    walked = {os.path.realpath(top)}
    for directory, subdirs, names in os.walk(top, followlinks=True, onerror=lambda error: skip(
            f"unreadable directory ({error.strerror})", str(error.filename))):
        real_dir, kept = os.path.realpath(directory), []
        for name in sorted(subdirs):
            path = os.path.join(directory, name)
            real = os.path.realpath(path) if os.path.islink(path) else os.path.join(real_dir, name)
            if name.startswith(".") or name == "__pycache__":
                skip("hidden directory", path)
            elif real in walked:
                skip("symlinked directory already walked (a loop, or a second link to it)", path)
            else:
                walked.add(real)
                kept.append(name)
        subdirs[:] = kept
        for name in sorted(names):
            path, kind = os.path.join(directory, name), kind_for_name(name)
            if name.startswith(".") or kind is None:
                suffix = "".join(Path(name).suffixes[-2:]) or "(no extension)"
                skip("hidden file" if name.startswith(".") else f"not a log or bench file name ({suffix})", path)
                continue
            try:
                found = os.lstat(path)   # one call for a plain file; a symlink is followed with a second
                link = stat.S_ISLNK(found.st_mode)
                found = os.stat(path) if link else found
            except OSError as error:
                broken = isinstance(error, FileNotFoundError)
                skip("broken symlink" if broken else "symlink loop" if error.errno == errno.ELOOP else f"unreadable ({error.strerror})",
                     path)
                continue
            if not stat.S_ISREG(found.st_mode):
                skip(f"not a regular file ({_file_type(found.st_mode)})", path)
            else:
                add(Path(path), kind, found, os.path.realpath(path) if link else os.path.join(real_dir, name))


def _run_for(path: Path, directory: str, run_name: str | None, launch_dirs: dict[str, RunRef | None]) -> RunRef:
    """The run of a file in the (resolved) `directory`: --run-name's, its launch directory's (run.json), else its stem's."""
    if run_name is not None:
        return RunRef(run_id=run_id_for(f"name:{run_name}"), run_name=run_name, source_dir=directory)
    if directory not in launch_dirs:
        launch_dirs[directory] = _launch_run(directory)
    if launch_dirs[directory] is not None:
        return launch_dirs[directory]
    stem = file_stem(path.name)
    return RunRef(run_id=run_id_for(f"{directory}/{stem}"), run_name=stem, source_dir=directory)


def _launch_run(directory: str) -> RunRef | None:
    if not os.path.isfile(os.path.join(directory, RUN_JSON_NAME)):
        return None
    record = read_run_json(Path(directory))
    if record is None:  # a run.json that does not read: the run keeps its directory's name
        return RunRef(run_id=run_id_for(directory), run_name=os.path.basename(directory), source_dir=directory)
    key = f"run_uid:{record.run_uid}" if record.run_uid else directory
    return RunRef(run_id=run_id_for(key), run_name=record.run_name or os.path.basename(directory), source_dir=directory,
                  cell=record.cell, launch_index=record.launch)


def read_input(item: InputFile) -> RawInput:
    """Read one input's bytes: gunzip, refuse binary files, make the text valid UTF-8. Never raises for a bad file.
    A big log (plain, or gzip) is not read here: it comes back as a LogStream (after a look at its first text)."""
    try:
        if item.path is None:
            return _read_whole(sys.stdin.buffer.read(), 0)
        with open(item.path, "rb") as handle:
            head = handle.read(BINARY_PROBE_BYTES)
            gzipped = head.startswith(_GZIP_MAGIC)
            big = item.size_bytes * (GZIP_TEXT_RATIO if gzipped else 1) >= STREAM_MIN_BYTES
            if item.kind != "log" or not big or head.startswith(tuple(bom for bom, _ in _BOMS)):  # UTF-16/32: decoded whole
                return _read_whole(head + handle.read(), item.size_bytes)
            skipped = None
            if gzipped:
                handle.seek(0)
                text = GzipText(handle)
                head, skipped = text.read(BINARY_PROBE_BYTES), text.skip_reason()
    except OSError as error:
        reason = _UNREADABLE.get(type(error)) or f"read error ({error.strerror or error})"
        return RawInput(data=b"", digest="", size_bytes=0, skipped_reason=reason)
    skipped = skipped or binary_reason(head)
    if skipped is not None:
        return RawInput(data=b"", digest="", size_bytes=item.size_bytes, skipped_reason=skipped)
    stream = LogStream(item.path, item.size_bytes, gzipped=gzipped)
    return RawInput(data=b"", digest=stream, size_bytes=item.size_bytes, stream=stream)


def _read_whole(raw: bytes, found_bytes: int) -> RawInput:
    sha256, size = hashlib.sha256(raw).hexdigest(), len(raw)
    warnings = _read_warnings(found_bytes, size, 0, 0)
    if raw.startswith(_GZIP_MAGIC):
        text = GzipText(io.BytesIO(raw))
        raw = text.read_all()
        if text.skip_reason() is not None:
            return RawInput(data=b"", digest=sha256, size_bytes=size, skipped_reason=text.skip_reason())
        warnings += [text.problem] if text.problem else []
    bom = next(((bom, encoding) for bom, encoding in _BOMS if raw.startswith(bom)), None)
    if bom is not None:
        raw = raw[len(bom[0]):].decode(bom[1], "replace").encode("utf-8")
        warnings.append(f"decoded from {bom[1]} (byte order mark)")
    binary = binary_reason(raw[:BINARY_PROBE_BYTES])
    if binary is not None:
        return RawInput(data=b"", digest=sha256, size_bytes=size, skipped_reason=binary, warnings=tuple(warnings))
    data, invalid, nuls = make_valid_text(raw)
    warnings += _read_warnings(0, 0, invalid, nuls)
    return RawInput(data=data, digest=sha256, size_bytes=size, warnings=tuple(warnings), invalid_utf8=invalid, nul_bytes=nuls)


_UNREADABLE = {FileNotFoundError: "disappeared before it could be read", IsADirectoryError: "is a directory",
               PermissionError: "permission denied"}
BINARY_NON_TEXT_SHARE = 0.3  # a file whose first block is this much NUL, control bytes or invalid UTF-8 is binary
_TEXT_BYTES = bytes([9, 10, 12, 13, 27, 8]) + bytes(range(32, 127)) + bytes(range(128, 256))  # 0x80-0xFF: judged as UTF-8
# Byte order marks of the encodings a Windows tool writes a log in (PowerShell's `>` writes UTF-16 LE): the longer first.
_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32-LE"), (codecs.BOM_UTF32_BE, "UTF-32-BE"), (codecs.BOM_UTF16_LE, "UTF-16-LE"),
         (codecs.BOM_UTF16_BE, "UTF-16-BE"))


def binary_reason(head: bytes) -> str | None:
    """Why the first bytes of a file look binary (None for text): a known magic number, or more than
    BINARY_NON_TEXT_SHARE of them NUL, control bytes or invalid UTF-8 (random bytes: ~60 %; a log with a few bad
    bytes: well under 1 %). Tab, newlines, form feed, backspace and ESC are text; a character cut at the end is."""
    if head.startswith(_BINARY_MAGIC):
        return "binary file (magic number)"
    non_text = len(head.translate(None, _TEXT_BYTES))
    if not head.isascii():
        non_text += codecs.getincrementaldecoder("utf-8")("replace").decode(head, final=False).count("\ufffd") - head.count(_REPLACEMENT)
    if non_text > BINARY_NON_TEXT_SHARE * len(head):
        return (f"binary file (over {BINARY_NON_TEXT_SHARE * 100:.0f} % of its first {BINARY_PROBE_BYTES:,} bytes are NUL, control "
                "bytes or invalid UTF-8)")
    return None


def make_valid_text(raw: bytes | memoryview) -> tuple[bytes, int, int]:
    """→ (valid UTF-8 bytes, invalid sequences replaced, NUL bytes replaced)."""
    raw = bytes(raw)
    nuls = raw.count(b"\x00") if b"\x00" in raw else 0  # `in` is memchr; count walks byte by byte
    try:
        valid = raw.isascii() or raw.decode("utf-8") is not None
    except UnicodeDecodeError:
        valid = False
    if nuls:  # NUL is valid UTF-8, and so is its replacement: the text stays as valid as it was
        raw = raw.replace(b"\x00", _REPLACEMENT)
    if valid:
        return raw, 0, nuls
    text = raw.decode("utf-8", errors="replace")
    return text.encode("utf-8"), text.count("\ufffd") - raw.count(_REPLACEMENT), nuls
