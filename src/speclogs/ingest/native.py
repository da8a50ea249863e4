"""The native matcher: the grammars' regexes run by a small C backtracking matcher (the extension module
`speclogs.ingest._native`, built with the package from _native.c) on the Arrow buffers of polars string Series,
values converted in C as rows match. It gives the same rows as polars' `extract_groups` + casts (the portable
path, taken where the extension could not be built) for a third to a half of the CPU.

- `program(regex)` turns a grammar regex (parsed by speclogs.grammar.regex, the subset lower.py writes) into
  instructions; a regex outside what the matcher runs gives None and its scope stays on polars.
- `split_lines(data)` splits a chunk into a String Series of views into the chunk itself, with odd-line flags.
- `classify(series, Patterns([...]))` finds each row's first matching pattern (gate literal, then program) and
  converts its captures; `values(found, rows, k)` hands pattern k's rows over as typed polars columns. What it
  cannot decide exactly (a backtracking budget, a number its strict readers do not take) goes to polars, so results
  never depend on it.
- `available()` is False where the extension is not installed, or with SPECLOGS_NATIVE=0; then everything runs on
  polars, and `unavailable_reason()` says why (the ingest summary repeats it).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from speclogs.errors import GrammarError
from speclogs.grammar.regex import ANY, INFINITE, Alternation, Char, CharSet, End, Group, Regex, Repeat, Start, parse_regex

try:
    from speclogs.ingest import _native
except ImportError as error:  # not built (no C compiler at install time): the portable path
    _native = None
    _IMPORT_ERROR = str(error)
else:
    _IMPORT_ERROR = ""

ENV_SWITCH = "SPECLOGS_NATIVE"  # '0' turns the native matcher off

OP_LIT, OP_SET, OP_RUN, OP_SPLIT, OP_JMP, OP_SAVE, OP_BOL, OP_EOL, OP_MATCH, OP_REST, OP_NUM, OP_SEQ = range(1, 13)
SET_BYTES = 129  # [0..127] ASCII members, [128] non-ASCII characters
FIRST_BYTES = 130  # as a set, plus [129] the end of the text
LINE_ODD, LINE_UNBRACKETED, LINE_TOO_LONG = 1, 2, 4  # split_lines' flags (see _native.c)
_KINDS = {"int": 0, "float": 1, "pct": 2, "bool": 3, "timestamp": 5}  # any other field type: text (4)
_TEXT = 4


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


def program(regex: str) -> Program | None:
    """The native program of an anchored regex, or None when it is outside what the matcher runs."""
    try:
        parsed = parse_regex(regex)
    except GrammarError:
        return None
    return program_of(parsed)


def program_of(parsed: Regex) -> Program | None:
    """The native program of a parsed anchored regex (a grammar pattern keeps its own), or None when it is outside
    what the matcher runs."""
    regex = parsed.text
    try:
        for numbers in (True, False):  # number instructions where they are exact, else the plain program
            builder = _Builder(numbers=numbers)
            builder.seq(parsed.nodes)
            builder.emit(OP_MATCH)
            builder.merge_sequences()
            firsts, entry = builder.add_first_sets()
            if builder.exact:
                break
    except (Unsupported, RecursionError):
        return None
    if not builder.code or builder.code[0][0] != OP_BOL:
        return None  # an unanchored search is not what this matcher does
    return Program(
        regex=regex,
        code=np.array(builder.code, dtype=np.int32).reshape(-1, 5),
        lits=bytes(builder.lits) or b"\0",
        sets=b"".join(builder.sets) or b"\0" * SET_BYTES,
        firsts=firsts or b"\0" * FIRST_BYTES,
        groups=dict(parsed.names),
        n_slots=2 * (parsed.groups + 1),
        entry=entry,
    )


# The number shapes OP_NUM runs in one step (as lower.py writes them) → (minus allowed, fraction allowed).
_NUMBER_FORMS = {
    parse_regex(rx).nodes: shape
    for rx, shape in {r"-?[0-9]+(?:\.[0-9]+)?": (1, 1), r"-?[0-9]+": (1, 0), r"[0-9]+(?:\.[0-9]+)?": (0, 1), r"[0-9]+": (0, 0)}.items()
}
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

    def seq(self, items: tuple) -> None:
        pending = bytearray()
        for node in items:
            if isinstance(node, Char):
                pending += node.char.encode("utf-8")
                continue
            self._flush(pending)
            self.item(node)
        self._flush(pending)

    def _flush(self, pending: bytearray) -> None:
        if pending:
            self.emit(OP_LIT, len(self.lits), len(pending))
            self.lits += pending
            pending.clear()

    def item(self, node) -> None:
        if isinstance(node, Char):
            self.seq((node,))
        elif isinstance(node, CharSet):
            self.emit(OP_SET, self._set(node))
        elif isinstance(node, Group):
            number = _NUMBER_FORMS.get(node.body) if self.numbers and node.index is not None else None
            if number is not None:
                self.emit(OP_NUM, 2 * node.index, number[1], number[0])
                return
            if node.index is not None:
                self.emit(OP_SAVE, 2 * node.index)
            self.seq(node.body)
            if node.index is not None:
                self.emit(OP_SAVE, 2 * node.index + 1)
        elif isinstance(node, Alternation):
            self._branch(node.branches)
        elif isinstance(node, Repeat):
            self._repeat(node.low, node.high, node.body)
        elif isinstance(node, Start):
            self.emit(OP_BOL)
        elif isinstance(node, End):
            self.emit(OP_EOL)  # pieces hold no '\n': '$' is the end of the text
        else:
            raise Unsupported(type(node).__name__)

    def _branch(self, branches: tuple) -> None:
        jumps = []
        for index, branch in enumerate(branches):
            if index < len(branches) - 1:
                split = self.emit(OP_SPLIT)
                self.code[split][1] = len(self.code)
                self.seq(branch)
                jumps.append(self.emit(OP_JMP))
                self.code[split][2] = len(self.code)
            else:
                self.seq(branch)
        for jump in jumps:
            self.code[jump][1] = len(self.code)

    def _repeat(self, low: int, high: int, body: tuple) -> None:
        if len(body) == 1 and isinstance(body[0], (CharSet, Char)):
            node = body[0]
            if node == ANY and high == INFINITE:
                self.emit(OP_REST, 0, low)
                return
            index = self._set(CharSet(frozenset(node.char)) if isinstance(node, Char) else node)
            self.emit(OP_RUN, index, low, high)
            return
        if _can_be_empty(body) and high == INFINITE:
            raise Unsupported("unbounded repeat of something that can match empty")
        for _ in range(low):
            self.seq(body)
        if high == INFINITE:
            loop = self.emit(OP_SPLIT)
            self.code[loop][1] = len(self.code)
            self.seq(body)
            self.emit(OP_JMP, loop)
            self.code[loop][2] = len(self.code)
            return
        splits = []
        for _ in range(high - low):
            split = self.emit(OP_SPLIT)
            self.code[split][1] = len(self.code)
            splits.append(split)
            self.seq(body)
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

    def _set(self, node: CharSet) -> int:
        """The index of a class's 129-byte table (ASCII members, then whether non-ASCII characters match)."""
        if any(ord(member) >= 128 for member in node.members):
            raise Unsupported("a non-ASCII character repeated or in a class")
        table = bytearray(SET_BYTES)
        for member in node.members:
            table[ord(member)] = 1
        if node.negated:
            table = bytearray(1 - b for b in table[:128]) + b"\1"
        key = bytes(table)
        if key not in self._set_index:
            self._set_index[key] = len(self.sets)
            self.sets.append(key)
        return self._set_index[key]


def _can_be_empty(items: tuple) -> bool:
    for node in items:
        if isinstance(node, Group) and not _can_be_empty(node.body):
            return False
        if isinstance(node, Alternation) and not any(_can_be_empty(b) for b in node.branches):
            return False
        if isinstance(node, Repeat) and node.low > 0 and not _can_be_empty(node.body):
            return False
        if isinstance(node, (Char, CharSet)):
            return False
    return True


# ----------------------------------------------------------------------------------------------------------------
# the extension


def available() -> bool:
    return unavailable_reason() is None


def unavailable_reason() -> str | None:
    """Why the native matcher is off (for the ingest summary), or None when it is on."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        why = f"{ENV_SWITCH}=0"
    elif _native is None:
        why = f"the extension speclogs.ingest._native is not built: {_IMPORT_ERROR}; reinstall with a C compiler present"
    elif not hasattr(pa, "string_view") or not hasattr(pl, "CompatLevel"):
        why = f"pyarrow {pa.__version__} / polars {pl.__version__} without Arrow string views"
    else:
        return None
    return f"the native matcher is off ({why}): the lines ran on polars' regexes (~1.6× slower)"


def text_flaws(data: bytes) -> tuple[int, bool] | None:
    """(NUL bytes, whether it is valid UTF-8) of `data`, in one pass without the GIL; None where the extension is
    not built."""
    return _native.text_flaws(data) if _native is not None else None


def joined(parts: list) -> bytes:
    """The buffers `parts` as one bytes object (a big chunk's copy made without the GIL, where the extension is built)."""
    return _native.joined(parts) if _native is not None else b"".join(parts)


def count_lines(data: bytes) -> int:
    """How many lines split_lines finds in `data`."""
    return _native.count_lines(data)


def split_lines(data: bytes, max_bytes: int, count: int | None = None) -> tuple[pl.Series, np.ndarray]:
    """The physical lines of valid UTF-8 `data` (LF or CRLF; a last line without newline counts) as a String
    Series whose views point into `data` itself (no copy of the text), and per line its flags: LINE_ODD ('\\r',
    ESC or '^[[' inside, or a '[pod/' prefix), LINE_UNBRACKETED (not starting with '['), LINE_TOO_LONG."""
    if count is None:
        count = count_lines(data)
    views = np.empty(16 * count, dtype=np.uint8)
    flags = np.empty(count, dtype=np.uint8)
    found = _native.split_lines(data, max_bytes, views, flags)
    if found != count:  # a count from elsewhere that does not fit: split again with the right one
        return split_lines(data, max_bytes)
    array = pa.Array.from_buffers(pa.string_view(), count, [None, pa.py_buffer(views), pa.py_buffer(data)])
    return _series("text", array), flags


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
    """(program, gate, fields) triples in priority order, laid out once for the extension (the ingest keeps one per
    scope in its Engine, not one per chunk). fields: name → int, float, pct, bool, timestamp, or anything else for
    text.

    near_after[k]: whether the caller reads the near misses (of earlier patterns) of rows pattern k wins (without it
    those rows have none); rows no pattern wins always get theirs. Default: all (every near miss is reported)."""

    def __init__(self, patterns: list[tuple[Program, str, dict[str, str]]], near_after: list[bool] | None = None) -> None:
        self.wanted = [[(name, _KINDS.get(type_name, _TEXT)) for name, type_name in fields.items() if name in prog.groups]
                       for prog, _, fields in patterns]
        near_after = near_after if near_after is not None else [True] * len(patterns)
        self.table = _native.Patterns([
            (prog.code, prog.lits, prog.sets, prog.firsts, prog.n_slots, prog.entry, gate.encode("utf-8"),
             np.array([(2 * prog.groups[name], kind) for name, kind in wanted], dtype=np.int32).reshape(-1),
             _anchor(prog), near)
            for (prog, gate, _), wanted, near in zip(patterns, self.wanted, near_after)
        ])

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


def classify(series: pl.Series, patterns: Patterns) -> Classified | None:
    """The first of `patterns` that each row of `series` contains the gate of and matches; the winner's fields are
    converted on the spot. None when a row is undecided (polars must then do them all)."""
    array = series.to_arrow(compat_level=pl.CompatLevel.newest())
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type != pa.string_view():
        array = array.cast(pa.string_view())
    buffers = array.buffers()
    data = buffers[2:]
    n = len(array)
    most_cells = patterns.table.most_cells
    cells = _scratch("cells", 16 * n * most_cells, np.uint8)  # pages only get touched as winners' cells land
    cell_valid = _scratch("cell_valid", n * most_cells, np.uint8)
    cell_at = _scratch("cell_at", n, np.int64)
    left = _scratch("left", n, np.uint8)
    winner = np.empty(n, dtype=np.int32)
    near_capacity = 4 * n + 16
    while True:
        near_rows = _scratch("near_rows", near_capacity, np.int64)
        near_patterns = _scratch("near_patterns", near_capacity, np.int32)
        n_near = _native.classify(patterns.table, buffers[1], data, buffers[0], array.offset, n, winner, cells,
                                  cell_valid, cell_at, left, near_rows, near_patterns)
        if n_near <= near_capacity:
            break
        near_capacity = n_near
    if (winner == -2).any():
        return None
    return Classified(winner=winner, near_rows=near_rows[:n_near], near_patterns=near_patterns[:n_near],
                      _wanted=patterns.wanted, _cells=(cells, cell_valid, cell_at, left, data))


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
    _native.cells(cells, cell_valid, cell_at, pick, widths, outs, valids)
    columns = {name: _column(name, kind, out, valid, data, name in borrowed)
               for (name, kind), out, valid in zip(wanted, outs, valids)}
    return columns, refused


def _own_views(views: np.ndarray, n: int, data: list) -> tuple[np.ndarray, list]:
    sizes = views.view(np.int32)[::4]
    if not (sizes > 12).any():  # all inline ('TP0', 'GET', 'cuda graph', …): the views hold the text themselves
        return views, []
    new_data = np.empty(int(sizes[sizes > 12].sum()), dtype=np.uint8)
    own = np.empty_like(views)
    _native.own_views(views, data, n, own, new_data)
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
