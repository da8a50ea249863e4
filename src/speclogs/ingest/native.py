"""The native matcher: the grammar regexes run by a small C backtracking matcher (native.c) on the Arrow buffers of
polars string Series, values converted in C as rows match. It replaces polars' `extract_groups` + casts on big
inputs: the same rows for a third to a half of the CPU (benchmarks/bench_grammars.py).

- `program(regex)` / `programs(regexes)` compile the regexes lower.py emits (read with Python's own regex parser)
  into instructions; a regex outside the subset gives None and its scope stays on polars.
- `split_lines(data)` splits a chunk into a String Series of views into the chunk itself, with odd-line flags.
- `classify(series, Patterns([...]))` finds each row's first matching pattern (gate literal, then program) and
  converts its captures; `values(found, rows, k)` hands pattern k's rows over as typed polars columns. What it cannot
  decide exactly (a backtracking budget, a number its strict readers do not take) goes to polars, so results never
  depend on it.
- The library is compiled at first use with the system C compiler into the user cache (under a second, once per
  source version); without a compiler, or with SPECLOGS_NATIVE=0, `available()` is False and everything runs on
  polars. tests/test_native.py holds both to the same rows.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import re._constants as _sre  # Python's own regex parser: the AST `re` itself compiles
import re._parser as _sre_parse
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from speclogs.grammar.cache import cache_dir

SOURCE = Path(__file__).with_name("native.c")
ENV_SWITCH = "SPECLOGS_NATIVE"  # '0' turns the native matcher off

OP_LIT, OP_SET, OP_RUN, OP_SPLIT, OP_JMP, OP_SAVE, OP_BOL, OP_EOL, OP_MATCH, OP_REST, OP_NUM, OP_SEQ = range(1, 13)
SET_BYTES = 129  # [0..127] ASCII members, [128] non-ASCII characters
FIRST_BYTES = 130  # as a set, plus [129] the end of the text
_KINDS = {"int": 0, "float": 1, "pct": 2, "bool": 3, "timestamp": 5}  # any other field type: text (4)
_TEXT = 4
_INF = _sre.MAXREPEAT


class Unsupported(Exception):
    """The regex uses something the native matcher does not run (it stays on polars)."""


@dataclass(frozen=True)
class Program:
    regex: str
    code: np.ndarray  # int32 (n, 5): op, a, b, c, d
    lits: bytes
    sets: bytes  # SET_BYTES per set
    firsts: bytes  # FIRST_BYTES per first-character set (which characters a branch or a run's continuation can start with)
    groups: dict[str, int]  # group name → group number (slots 2n, 2n+1)
    n_slots: int
    entry: int  # index of the first-character set of a match in firsts (-1: any)


# ----------------------------------------------------------------------------------------------------------------
# regex → program


def programs(regexes: list[str]) -> list[Program | None]:
    """`program` of each regex, from the user cache when this exact list was compiled before (compiling the ~150
    bundled regexes takes ~0.15 s, at the start of every ingest otherwise)."""
    key = hashlib.sha256("\0".join([SOURCE.read_text(), Path(__file__).read_text(), *regexes]).encode()).hexdigest()[:24]
    path = cache_dir() / f"native-programs-{key}.json"
    try:
        if _private(path):
            loaded = [None if doc is None else _program_from_json(regex, doc)
                      for regex, doc in zip(regexes, json.loads(path.read_text(encoding="utf-8")), strict=True)]
            if all(p is None or _in_bounds(p) for p in loaded):
                return loaded
    except (OSError, ValueError, KeyError, TypeError):
        pass
    compiled = [program(regex) for regex in regexes]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8") as tmp:
            json.dump([None if p is None else _program_to_json(p) for p in compiled], tmp)
        os.replace(tmp.name, path)
    except OSError:
        pass  # no cache: compiled again next time
    return compiled


def _private(path: Path) -> bool:
    """Whether a cached file is ours alone: owned by this user, writable by no one else (the cache may be shared
    through SPECLOGS_CACHE_DIR; what is loaded from it is run as code, or steers code that indexes memory)."""
    try:
        st = path.stat()
    except OSError:
        return False
    return (not hasattr(os, "getuid") or st.st_uid == os.getuid()) and not st.st_mode & 0o022


def _in_bounds(p: Program) -> bool:
    """A program every index of which points inside its own tables (a damaged cache file must not reach native.c)."""
    n, n_sets, n_firsts = len(p.code), len(p.sets) // SET_BYTES, len(p.firsts) // FIRST_BYTES
    if not -1 <= p.entry < n_firsts or any(not 0 <= 2 * g < p.n_slots for g in p.groups.values()):
        return False
    for op, a, b, c, d in p.code.tolist():
        ok = {
            OP_LIT: 0 <= a and 0 < b and a + b <= len(p.lits),
            OP_SEQ: 0 <= a and 0 < b and a + 2 * b <= len(p.lits)
            and all(k == 0 or v < n_sets for k, v in zip(p.lits[a : a + 2 * b : 2], p.lits[a + 1 : a + 2 * b : 2])),
            OP_SET: 0 <= a < n_sets,
            OP_RUN: 0 <= a < n_sets and 0 <= b and (c == -1 or c >= b) and -1 <= d < n_firsts,
            OP_REST: 0 <= b and -1 <= d < n_firsts,
            OP_SPLIT: 0 <= a < n and 0 <= b < n and -1 <= c < n_firsts and -1 <= d < n_firsts,
            OP_JMP: 0 <= a < n,
            OP_SAVE: 0 <= a < p.n_slots,
            OP_NUM: 0 <= a < p.n_slots - 1,
        }.get(op, op in (OP_BOL, OP_EOL, OP_MATCH))
        if not ok:
            return False
    return True


def _program_to_json(p: Program) -> dict:
    return {"code": p.code.ravel().tolist(), "lits": p.lits.hex(), "sets": p.sets.hex(), "firsts": p.firsts.hex(),
            "groups": p.groups, "n_slots": p.n_slots, "entry": p.entry}


def _program_from_json(regex: str, d: dict) -> Program:
    return Program(regex=regex, code=np.array(d["code"], dtype=np.int32).reshape(-1, 5), lits=bytes.fromhex(d["lits"]),
                   sets=bytes.fromhex(d["sets"]), firsts=bytes.fromhex(d["firsts"]), groups=d["groups"],
                   n_slots=d["n_slots"], entry=d["entry"])


@cache
def program(regex: str) -> Program | None:
    """The native program of an anchored regex, or None when it is outside the subset."""
    try:
        parsed = _sre_parse.parse(regex)
        if parsed.state.flags & ~(_sre.SRE_FLAG_UNICODE):
            raise Unsupported("flags")
        for numbers in (True, False):  # number instructions where they are exact, else the plain program
            builder = _Builder(numbers=numbers)
            builder.seq(list(parsed))
            builder.emit(OP_MATCH)
            builder.merge_sequences()
            firsts, entry = builder.add_first_sets()
            if builder.exact:
                break
    except (Unsupported, re.error, RecursionError):
        return None
    if not builder.code or builder.code[0][0] != OP_BOL:
        return None  # an unanchored search is not what this matcher does
    groups = dict(parsed.state.groupdict)
    n_slots = 2 * (parsed.state.groups)
    return Program(
        regex=regex,
        code=np.array(builder.code, dtype=np.int32).reshape(-1, 5),
        lits=bytes(builder.lits) or b"\0",
        sets=b"".join(builder.sets) or b"\0" * SET_BYTES,
        firsts=firsts or b"\0" * FIRST_BYTES,
        groups=groups,
        n_slots=max(n_slots, 2),
        entry=entry,
    )


def _number_forms() -> dict[str, tuple[int, int]]:
    """The parsed forms of the number shapes OP_NUM runs in one step → (minus allowed, fraction allowed)."""
    forms = {r"-?[0-9]+(?:\.[0-9]+)?": (1, 1), r"-?[0-9]+": (1, 0), r"[0-9]+(?:\.[0-9]+)?": (0, 1), r"[0-9]+": (0, 0)}
    return {repr(list(_sre_parse.parse(rx))): shape for rx, shape in forms.items()}


_NUMBER_FORMS = _number_forms()
_DIGITS = frozenset(range(ord("0"), ord("9") + 1))


class _Builder:
    r"""Emits the program of a parsed regex. With `numbers`, a captured number (`(?P<x>-?[0-9]+(?:\.[0-9]+)?)` and
    its simpler forms) is one OP_NUM; that is exact only where nothing after it can start with a digit or '.'
    (then no shorter number could match instead), which add_first_sets checks: `exact` False means build again
    without."""

    def __init__(self, *, numbers: bool = False) -> None:
        self.numbers = numbers
        self.exact = True
        self.code: list[list[int]] = []
        self.lits = bytearray()
        self.sets: list[bytes] = []
        self._set_index: dict[bytes, int] = {}

    def emit(self, op: int, a: int = 0, b: int = 0, c: int = 0) -> int:
        self.code.append([op, a, b, c, -1])
        return len(self.code) - 1

    def seq(self, items: list) -> None:
        pending = bytearray()
        for op, av in items:
            if op is _sre.LITERAL:
                pending += chr(av).encode("utf-8")
                continue
            self._flush(pending)
            self.item(op, av)
        self._flush(pending)

    def _flush(self, pending: bytearray) -> None:
        if pending:
            self.emit(OP_LIT, len(self.lits), len(pending))
            self.lits += pending
            pending.clear()

    def item(self, op, av) -> None:
        if op is _sre.LITERAL:
            self.seq([(op, av)])
        elif op in (_sre.IN, _sre.NOT_LITERAL, _sre.ANY):
            self.emit(OP_SET, self._set(op, av))
        elif op is _sre.SUBPATTERN:
            group, add_flags, del_flags, body = av
            if add_flags or del_flags:
                raise Unsupported("inline flags")
            number = _NUMBER_FORMS.get(repr(list(body))) if self.numbers and group is not None else None
            if number is not None:
                self.emit(OP_NUM, 2 * group, number[1], number[0])
                return
            if group is not None:
                self.emit(OP_SAVE, 2 * group)
            self.seq(list(body))
            if group is not None:
                self.emit(OP_SAVE, 2 * group + 1)
        elif op is _sre.BRANCH:
            self._branch(av[1])
        elif op is _sre.MAX_REPEAT:
            self._repeat(*av)
        elif op is _sre.AT:
            if av is _sre.AT_BEGINNING:
                self.emit(OP_BOL)
            elif av in (_sre.AT_END, _sre.AT_END_STRING):
                self.emit(OP_EOL)  # pieces hold no '\n': '$' is the end of the text
            else:
                raise Unsupported(str(av))
        else:
            raise Unsupported(str(op))

    def _branch(self, branches: list) -> None:
        jumps = []
        for index, branch in enumerate(branches):
            if index < len(branches) - 1:
                split = self.emit(OP_SPLIT)
                self.code[split][1] = len(self.code)
                self.seq(list(branch))
                jumps.append(self.emit(OP_JMP))
                self.code[split][2] = len(self.code)
            else:
                self.seq(list(branch))
        for jump in jumps:
            self.code[jump][1] = len(self.code)

    def _repeat(self, low: int, high: int, body) -> None:
        items = list(body)
        if len(items) == 1 and items[0][0] in (_sre.IN, _sre.NOT_LITERAL, _sre.ANY, _sre.LITERAL):
            op, av = items[0]
            if op is _sre.ANY and high == _INF:
                self.emit(OP_REST, 0, low)
                return
            index = self._set(_sre.IN, [(_sre.LITERAL, av)]) if op is _sre.LITERAL else self._set(op, av)
            self.emit(OP_RUN, index, low, -1 if high == _INF else high)
            return
        if _can_be_empty(items) and high == _INF:
            raise Unsupported("unbounded repeat of something that can match empty")
        for _ in range(low):
            self.seq(items)
        if high == _INF:
            loop = self.emit(OP_SPLIT)
            self.code[loop][1] = len(self.code)
            self.seq(items)
            self.emit(OP_JMP, loop)
            self.code[loop][2] = len(self.code)
            return
        splits = []
        for _ in range(high - low):
            split = self.emit(OP_SPLIT)
            self.code[split][1] = len(self.code)
            splits.append(split)
            self.seq(items)
        for split in splits:
            self.code[split][2] = len(self.code)

    def merge_sequences(self) -> None:
        """Runs of fixed-width pieces — literals, one ASCII class, `[0-9]{2}` — become one OP_SEQ (the timestamp
        'dddd-dd-dd dd:dd:dd' is then two instructions, not twelve). Its positions are stored in lits as
        (0, byte) or (1, set index) pairs. Jump targets are renumbered; none may fall inside a run."""
        targets = {a for op, a, b, _c, _d in self.code if op in (OP_SPLIT, OP_JMP)}
        targets |= {b for op, _a, b, _c, _d in self.code if op == OP_SPLIT}
        merged: list[list[int]] = []
        new_index: dict[int, int] = {}
        pc = 0
        while pc < len(self.code):
            end, positions = pc, []
            while end < len(self.code) and (end == pc or end not in targets):
                piece = self._fixed_positions(self.code[end])
                if piece is None:
                    break
                positions += piece
                end += 1
            if end - pc >= 2 or (end - pc == 1 and self.code[pc][0] == OP_RUN):
                new_index.update({old: len(merged) for old in range(pc, end)})
                merged.append([OP_SEQ, len(self.lits), len(positions) // 2, 0, -1])
                self.lits += bytes(positions)
                pc = end
                continue
            new_index[pc] = len(merged)
            merged.append(list(self.code[pc]))
            pc += 1
        new_index[len(self.code)] = len(merged)
        for instruction in merged:
            if instruction[0] in (OP_SPLIT, OP_JMP):
                instruction[1] = new_index[instruction[1]]
            if instruction[0] == OP_SPLIT:
                instruction[2] = new_index[instruction[2]]
        self.code = merged

    def _fixed_positions(self, instruction: list[int]) -> list[int] | None:
        """(kind, value) pairs of a fixed-width instruction that matches only ASCII by class, else None."""
        op, a, b, c, _d = instruction
        if op == OP_LIT:
            return [v for byte in self.lits[a : a + b] for v in (0, byte)]
        ascii_only = op in (OP_SET, OP_RUN) and a < 256 and not self.sets[a][128]
        if op == OP_SET and ascii_only:
            return [1, a]
        if op == OP_RUN and ascii_only and b == c and 0 < b <= 16:
            return [1, a] * b
        return None

    def add_first_sets(self) -> tuple[bytes, int]:
        """Let SPLIT skip a branch, and a run's backtracking a length, that cannot go on at the current character:
        SPLIT's c/d and RUN's d get the index of the first-character set of its branch a/b or continuation
        (-1: anything may follow), and the program its entry set. The matches found are the same; the choice
        points not pushed, and the rows turned down on their first character, are dead ends."""
        tables: list[bytes] = []
        index: dict[bytes, int] = {}
        memo: dict[int, bytearray | None] = {}

        def store(first: bytearray | None) -> int:
            if first is None:
                return -1
            key = bytes(first)
            if key not in index:
                index[key] = len(tables)
                tables.append(key)
            return index[key]

        for pc, (op, a, b, _c, _d) in enumerate(self.code):
            if op == OP_SPLIT:
                self.code[pc][3] = store(self._first(a, memo, set()))
                self.code[pc][4] = store(self._first(b, memo, set()))
            elif op in (OP_RUN, OP_REST):
                self.code[pc][4] = store(self._first(pc + 1, memo, set()))
            elif op == OP_NUM:
                after = self._first(pc + 1, memo, set())
                can_follow = _DIGITS | ({ord(".")} if b else set())
                if after is None or any(after[c] for c in can_follow):
                    self.exact = False
        entry = store(self._first(0, memo, set()))
        return b"".join(tables), entry

    def _first(self, pc: int, memo: dict, visiting: set) -> bytearray | None:
        """The characters a match continuing at pc can start with (None: any, or it may consume nothing)."""
        if pc in memo:
            return memo[pc]
        if pc in visiting:
            return None  # a loop: stay conservative
        visiting.add(pc)
        op, a, b, c, _d = self.code[pc]
        first: bytearray | None = bytearray(FIRST_BYTES)
        if op == OP_LIT:
            byte = self.lits[a]
            first[min(byte, 128)] = 1
        elif op == OP_SET or (op == OP_RUN and b >= 1):
            first[:SET_BYTES] = self.sets[a]
        elif op == OP_NUM:
            for byte in _DIGITS | ({ord("-")} if c else set()):
                first[byte] = 1
        elif op == OP_SEQ:
            kind, value = self.lits[a], self.lits[a + 1]
            if kind == 0:
                first[min(value, 128)] = 1
            else:
                first[:SET_BYTES] = self.sets[value]
        elif op == OP_RUN:
            rest = self._first(pc + 1, memo, visiting)
            first = None if rest is None else bytearray(x | y for x, y in zip(self.sets[a] + b"\0", rest))
        elif op == OP_SPLIT:
            left, right = self._first(a, memo, visiting), self._first(b, memo, visiting)
            first = None if left is None or right is None else bytearray(x | y for x, y in zip(left, right))
        elif op == OP_JMP:
            first = self._first(a, memo, visiting)
        elif op in (OP_SAVE, OP_BOL):
            first = self._first(pc + 1, memo, visiting)
        elif op == OP_EOL:
            first[129] = 1
        else:  # MATCH, REST
            first = None
        visiting.discard(pc)
        memo[pc] = first
        return first

    def _set(self, op, av) -> int:
        table = bytearray(SET_BYTES)
        if op is _sre.ANY:
            table[:128] = b"\1" * 128
            table[ord("\n")] = 0
            table[128] = 1
        elif op is _sre.NOT_LITERAL:
            if av >= 128:
                raise Unsupported("non-ASCII class member")
            table[:] = b"\1" * SET_BYTES
            table[av] = 0
        else:
            negate = False
            for kind, value in av:
                if kind is _sre.NEGATE:
                    negate = True
                elif kind is _sre.LITERAL and value < 128:
                    table[value] = 1
                elif kind is _sre.RANGE and value[1] < 128:
                    table[value[0] : value[1] + 1] = b"\1" * (value[1] - value[0] + 1)
                else:
                    raise Unsupported(f"class member {kind}")
            if negate:
                table = bytearray(1 - b for b in table[:128]) + b"\1"
        key = bytes(table)
        if key not in self._set_index:
            self._set_index[key] = len(self.sets)
            self.sets.append(key)
        return self._set_index[key]


def _can_be_empty(items: list) -> bool:
    for op, av in items:
        if op is _sre.SUBPATTERN and not _can_be_empty(list(av[3])):
            return False
        if op is _sre.BRANCH and not any(_can_be_empty(list(b)) for b in av[1]):
            return False
        if op is _sre.MAX_REPEAT and av[0] > 0 and not _can_be_empty(list(av[2])):
            return False
        if op in (_sre.LITERAL, _sre.IN, _sre.NOT_LITERAL, _sre.ANY):
            return False
    return True


# ----------------------------------------------------------------------------------------------------------------
# the library


def available() -> bool:
    return _library() is not None


def unavailable_reason() -> str | None:
    """Why the native matcher is off (for the ingest summary), or None when it is on."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        why = f"{ENV_SWITCH}=0"
    elif _library() is None:
        why = _build_error[0]
    else:
        return None
    return f"the native matcher is off ({why}): the big logs' lines ran on polars' regexes (~1.5× slower)"


_build_error = ["not built"]


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    if not hasattr(pa, "string_view") or not hasattr(pl, "CompatLevel"):
        _build_error[0] = f"pyarrow {pa.__version__} / polars {pl.__version__} without Arrow string views"
        return None
    try:
        lib = ctypes.CDLL(str(_built_library()))
    except OSError as error:
        _build_error[0] = str(error)
        return None
    vp, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
    lib.sl_classify.restype = None
    lib.sl_classify.argtypes = [vp, i32, vp, vp, vp, i64, vp, i64, vp, vp, vp, vp, vp, vp, vp, i64, vp]
    lib.sl_split_lines.restype = i64
    lib.sl_split_lines.argtypes = [ctypes.c_char_p, i64, i32, i64, vp, vp, i64]
    lib.sl_cells.restype = None
    lib.sl_cells.argtypes = [vp, vp, vp, vp, i64, i32, vp, vp, vp]
    lib.sl_own_views.restype = None
    lib.sl_own_views.argtypes = [vp, vp, i64, vp, vp]
    return lib


def _compiler() -> str | None:
    configured = (sysconfig.get_config_var("CC") or "").split()
    for candidate in (os.environ.get("CC"), configured[0] if configured else None, "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def _built_library() -> Path:
    """native.c compiled into the user cache (one file per source and platform), built once; older builds are
    removed. Raises OSError (with the compiler's first error line) when it cannot be built."""
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + sys.platform.encode() + sysconfig.get_platform().encode()).hexdigest()[:16]
    cache = cache_dir()
    target = cache / f"native-{key}.so"
    if _private(target):
        return target
    compiler = _compiler()
    if compiler is None:
        raise OSError("no C compiler found (cc, gcc, clang or $CC)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        built = Path(tmp) / target.name
        try:
            subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(built), str(SOURCE)],
                           check=True, capture_output=True, text=True, timeout=120)
        except subprocess.CalledProcessError as error:
            first = next((line for line in error.stderr.splitlines() if "error" in line), error.stderr.strip()[:200])
            raise OSError(f"{Path(compiler).name} could not build native.c: {first}") from error
        except subprocess.TimeoutExpired as error:
            raise OSError(f"{Path(compiler).name} took over {error.timeout} s to build native.c") from error
        built.chmod(0o755)  # writable by this user only, whatever the umask (see _private)
        os.replace(built, target)  # atomic: a concurrent build of the same source writes the same bytes
    for old in cache.glob("native-*.so"):
        if old != target:
            old.unlink(missing_ok=True)
    return target


# ----------------------------------------------------------------------------------------------------------------
# matching


LINE_ODD, LINE_UNBRACKETED, LINE_TOO_LONG = 1, 2, 4  # split_lines' flags (see native.c)


def count_lines(data: bytes) -> int:
    """How many lines split_lines finds in `data`."""
    return _library().sl_split_lines(data, len(data), 0, 0, None, None, 0)


def split_lines(data: bytes, max_bytes: int, count: int | None = None) -> tuple[pl.Series, np.ndarray]:
    """The physical lines of valid UTF-8 `data` (LF or CRLF; a last line without newline counts) as a String
    Series whose views point into `data` itself (no copy of the text), and per line its flags: LINE_ODD ('\\r',
    ESC or '^[[' inside, or a '[pod/' prefix), LINE_UNBRACKETED (not starting with '['), LINE_TOO_LONG."""
    lib = _library()
    if count is None:
        count = count_lines(data)
    views = np.empty(16 * count, dtype=np.uint8)
    flags = np.empty(count, dtype=np.uint8)
    found = lib.sl_split_lines(data, len(data), 0, max_bytes, views.ctypes.data, flags.ctypes.data, count)
    if found != count:  # a count from elsewhere that does not fit: split again with the right one
        return split_lines(data, max_bytes)
    array = pa.Array.from_buffers(pa.string_view(), count, [None, pa.py_buffer(views), pa.py_buffer(data)])
    return _series("text", array), flags


class _Wanted(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_int32), ("kind", ctypes.c_int32)]


class _Pattern(ctypes.Structure):
    _fields_ = [("code", ctypes.c_void_p), ("lits", ctypes.c_char_p), ("sets", ctypes.c_char_p),
                ("firsts", ctypes.c_char_p), ("n_slots", ctypes.c_int32), ("entry", ctypes.c_int32),
                ("gate", ctypes.c_char_p), ("gate_len", ctypes.c_int32), ("wanted", ctypes.c_void_p),
                ("n_wanted", ctypes.c_int32), ("anchor", ctypes.c_char_p), ("anchor_len", ctypes.c_int32),
                ("near_after", ctypes.c_int32)]


@dataclass(frozen=True)
class Classified:
    """What `classify` found: per row its winner, and the winners' values, converted as they matched."""

    winner: np.ndarray  # int32 per row: index of the winning pattern, -1 none
    near_rows: np.ndarray  # int64 row positions …
    near_patterns: np.ndarray  # … and int32 pattern indices of the near misses (gate contained, program missed)
    _wanted: list  # per pattern: [(field, kind)] in cell order
    _cells: tuple  # (cells uint8 16 per cell, cell_valid, cell_at per row, left per row, data buffers): working
    # arrays that the next classify() in this thread reuses — read them (values) before calling it again


class Patterns:
    """(program, gate, fields) triples in priority order, laid out once for native.c (building the table costs
    ~2 ms: the ingest keeps one per scope, not one per chunk). fields: name → int, float, pct, bool, timestamp,
    or anything else for text.

    near_after[k]: whether the caller reads the near misses (of earlier patterns) of rows pattern k wins; rows
    no pattern wins always get theirs. Default: all (every near miss is reported)."""

    def __init__(self, patterns: list[tuple[Program, str, dict[str, str]]], near_after: list[bool] | None = None) -> None:
        self.wanted = [[(name, _KINDS.get(type_name, _TEXT)) for name, type_name in fields.items() if name in prog.groups]
                       for prog, _, fields in patterns]
        self._wanted_arrays = [(_Wanted * max(len(w), 1))(*[_Wanted(2 * prog.groups[name], kind) for name, kind in w])
                               for w, (prog, _, _) in zip(self.wanted, patterns)]
        anchors = [_anchor(prog) for prog, _, _ in patterns]
        near_after = near_after if near_after is not None else [True] * len(patterns)
        self.table = (_Pattern * len(patterns))(*[
            _Pattern(prog.code.ctypes.data, prog.lits, prog.sets, prog.firsts, prog.n_slots, prog.entry,
                     gate.encode("utf-8"), len(gate.encode("utf-8")), ctypes.addressof(w), len(names),
                     anchor, len(anchor), near)
            for (prog, gate, _), w, names, anchor, near in zip(patterns, self._wanted_arrays, self.wanted, anchors, near_after)
        ])
        self.most_cells = max(1, max((len(w) for w in self.wanted), default=1))
        self._programs = [prog for prog, _, _ in patterns]  # their arrays are what the table points at

    def __len__(self) -> int:
        return len(self.wanted)


def _anchor(prog: Program) -> bytes:
    """The literal every match of an anchored program starts with (b'' when it does not start with one)."""
    code = prog.code
    if not len(code) or code[0, 0] != OP_BOL:
        return b""
    pc = 1
    while pc < len(code) and code[pc, 0] == OP_SAVE:
        pc += 1
    if pc == len(code) or code[pc, 0] != OP_LIT:
        return b""
    return prog.lits[code[pc, 1] : code[pc, 1] + code[pc, 2]]


def classify(series: pl.Series, patterns: Patterns | list[tuple[Program, str, dict[str, str]]]) -> Classified | None:
    """The first of `patterns` that each row of `series` contains the gate of and matches; the winner's fields are
    converted on the spot. None when a row is undecided (polars must then do them all)."""
    if not isinstance(patterns, Patterns):
        patterns = Patterns(patterns)
    lib = _library()
    array = series.to_arrow(compat_level=pl.CompatLevel.newest())
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type != pa.string_view():
        array = array.cast(pa.string_view())
    buffers = array.buffers()
    data = buffers[2:]
    data_ptrs = (ctypes.c_void_p * max(len(data), 1))(*[b.address for b in data])
    n = len(array)
    wanted, table, most_cells = patterns.wanted, patterns.table, patterns.most_cells
    cells = _scratch("cells", 16 * n * most_cells, np.uint8)  # pages only get touched as winners' cells land
    cell_valid = _scratch("cell_valid", n * most_cells, np.uint8)
    cell_at = _scratch("cell_at", n, np.int64)
    left = _scratch("left", n, np.uint8)
    winner = np.empty(n, dtype=np.int32)
    near_capacity = 4 * n + 16
    while True:
        near_rows = _scratch("near_rows", near_capacity, np.int64)
        near_patterns = _scratch("near_patterns", near_capacity, np.int32)
        n_near = ctypes.c_int64(0)
        lib.sl_classify(table, len(patterns), buffers[1].address, data_ptrs,
                        buffers[0].address if buffers[0] is not None else None, array.offset, None, n,
                        winner.ctypes.data, cells.ctypes.data, cell_valid.ctypes.data, cell_at.ctypes.data,
                        left.ctypes.data, near_rows.ctypes.data, near_patterns.ctypes.data, near_capacity,
                        ctypes.byref(n_near))
        if n_near.value <= near_capacity:
            break
        near_capacity = n_near.value
    if (winner == -2).any():
        return None
    return Classified(winner=winner, near_rows=near_rows[: n_near.value], near_patterns=near_patterns[: n_near.value],
                      _wanted=wanted, _cells=(cells, cell_valid, cell_at, left, data))


_SCRATCH = threading.local()


def _scratch(name: str, n: int, dtype: type) -> np.ndarray:
    """A working array of n items, reused by the next classify() in the same thread: a new one per chunk would
    have the kernel zero its pages again (~3 % of an ingest's CPU). Only `values` reads them, before that."""
    pool = _SCRATCH.__dict__
    array = pool.get(name)
    if array is None or len(array) < n:
        array = pool[name] = np.empty(max(n, 2 * len(array) if array is not None else n), dtype=dtype)
    return array[:n]


def values(found: Classified, pick: np.ndarray, pattern: int, *,
           borrowed: frozenset[str] = frozenset()) -> tuple[dict[str, pl.Series], np.ndarray]:
    """The typed fields of the rows `pick` (positions, all won by patterns[`pattern`]), as classify.cast_expr makes
    them; and the positions in `pick` whose values the C readers did not take (for polars; the columns hold the
    other rows, in order).

    Text columns get their own copy of the text, but those named in `borrowed` point into the source's buffers
    (no copy, but they keep all of its text alive as long as they live: for columns dropped soon)."""
    cells, cell_valid, cell_at, left, data = found._cells
    pick = np.ascontiguousarray(pick, dtype=np.int64)
    refused = np.flatnonzero(left[pick])
    if len(refused):
        pick = np.delete(pick, refused)
    wanted = found._wanted[pattern]
    widths = [16 if kind == _TEXT else (1 if kind == 3 else 8) for _, kind in wanted]
    outs = [np.empty(width * len(pick), dtype=np.uint8) for width in widths]
    valids = [np.empty(len(pick), dtype=np.uint8) for _ in wanted]
    pointers = ctypes.c_void_p * max(len(wanted), 1)
    _library().sl_cells(cells.ctypes.data, cell_valid.ctypes.data, cell_at.ctypes.data, pick.ctypes.data, len(pick),
                        len(wanted), (ctypes.c_int32 * max(len(wanted), 1))(*widths),
                        pointers(*[o.ctypes.data for o in outs]), pointers(*[v.ctypes.data for v in valids]))
    columns = {name: _column(name, kind, out, valid, data, name in borrowed)
               for (name, kind), out, valid in zip(wanted, outs, valids)}
    return columns, refused


def _own_views(views: np.ndarray, n: int, data: list) -> tuple[np.ndarray, list]:
    sizes = views.view(np.int32)[::4]
    if not (sizes > 12).any():  # all inline ('TP0', 'GET', 'cuda graph', …): the views hold the text themselves
        return views, []
    new_data = np.empty(int(sizes[sizes > 12].sum()), dtype=np.uint8)
    own = np.empty_like(views)
    data_ptrs = (ctypes.c_void_p * max(len(data), 1))(*[b.address for b in data])
    _library().sl_own_views(views.ctypes.data, data_ptrs, n, own.ctypes.data, new_data.ctypes.data)
    return own, [pa.py_buffer(new_data)]


_ARROW_TYPES = {0: pa.int64(), 1: pa.float64(), 2: pa.float64(), 5: pa.timestamp("us")}


def _column(name: str, kind: int, values: np.ndarray, valid: np.ndarray, data: list, borrow: bool) -> pl.Series:
    """Converted values (8-byte numbers, bool bytes or 16-byte views, one per entry of `valid`) as a Series."""
    n = len(valid)
    nulls = None if valid.all() else pa.py_buffer(np.packbits(valid.astype(bool), bitorder="little"))
    if kind == _TEXT:
        if not borrow:
            values, data = _own_views(values, n, data)
        array = pa.Array.from_buffers(pa.string_view(), n, [nulls, pa.py_buffer(values), *data])
    elif kind == 3:
        array = pa.Array.from_buffers(pa.bool_(), n, [nulls, pa.py_buffer(np.packbits(values, bitorder="little"))])
    else:
        array = pa.Array.from_buffers(_ARROW_TYPES[kind], n, [nulls, pa.py_buffer(values)])
    return _series(name, array)


class _ArrowArray:
    """A pyarrow array seen only through the Arrow PyCapsule interface: polars then imports it without importing
    pyarrow.compute (~0.17 s, once per process, on the first chunk's critical path)."""

    def __init__(self, array: pa.Array) -> None:
        self._array = array

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple:
        return self._array.__arrow_c_array__(requested_schema)


def _series(name: str, array: pa.Array) -> pl.Series:
    return pl.Series(name, _ArrowArray(array)).alias(name)
