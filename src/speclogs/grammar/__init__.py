"""Line grammars: data files under grammars/, built into pyparsing elements and compiled to regexes.

Public API (consumed by speclogs.ingest):
    load_grammars(extra_paths) -> GrammarSet      bundled grammars + user files, validated; raises GrammarError
    check_grammar_file(path) -> list[GrammarProblem]
    parse_server_args(text) -> list[(name, repr_text, value_or_None)]
    Field, Pattern, GrammarSet, GrammarProblem, cast_value, RANK_TAG_REGEXES
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from speclogs.errors import GrammarError
from speclogs.grammar.cache import cache_key, read_cached, write_cached
from speclogs.grammar.model import (
    RANK_TAG_REGEXES,
    bundled_grammar_dir,
    RANK_TAGS,
    Field,
    GrammarProblem,
    GrammarSet,
    Pattern,
    cast_value,
    split_rank_tags,
)
from speclogs.grammar.server_args import parse_server_args

# The loader (and pyparsing with it) is imported only when grammar files must be built: a load from the disk
# cache needs neither, which keeps `speclogs` start-up short.


def read_grammar_file(path: Path):
    from speclogs.grammar.loader import read_grammar_file as read

    return read(path)

__all__ = [
    "Field",
    "GrammarProblem",
    "GrammarSet",
    "Pattern",
    "RANK_TAGS",
    "RANK_TAG_REGEXES",
    "bundled_grammar_files",
    "cast_value",
    "check_grammar_file",
    "check_grammar_files",
    "load_grammars",
    "parse_server_args",
    "split_rank_tags",
]

_MAX_SHOWN = 10


def bundled_grammar_files() -> list[Path]:
    return sorted(bundled_grammar_dir().glob("*.toml"))


def _expand(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.glob("*.toml"))
        else:
            out.append(p)
    return out


_read_cache: dict[tuple, object] = {}


def _read_all(paths: Sequence[Path]) -> list:
    """Read and build grammar files (bundled ones are kept per process, keyed by path, size and mtime)."""
    out = []
    for p in paths:
        key = (str(p), *_stat(p))
        loaded = _read_cache.get(key)
        if loaded is None:
            loaded = read_grammar_file(p)
            _read_cache[key] = loaded
        out.append(loaded)
    return out


def _assemble(files: list, focus: set[str] | None = None) -> tuple[GrammarSet | None, list[GrammarProblem]]:
    from speclogs.grammar.loader import find_prefix, ordered_patterns, validate

    problems = [pr for f in files for pr in f.problems if focus is None or f.path in focus]
    prefixes = [f for f in files if f.is_prefix]
    if len(prefixes) > 1:
        problems += [GrammarProblem(f.path, 1, None, "a second prefix grammar (kind = \"prefix\"); only the bundled prefix.toml may set it")
                     for f in prefixes[1:]]
    prefix = find_prefix(files)
    if prefix is None:
        problems.append(GrammarProblem("grammars/prefix.toml", 1, None, "no prefix grammar (a file with kind = \"prefix\" and a pattern named 'prefix')"))
    problems += validate(files, prefix, focus)
    if prefix is None:
        return None, problems
    grammar_set = GrammarSet(prefix=prefix, patterns=ordered_patterns(files), files=tuple(f.path for f in files))
    return grammar_set, problems


_cache: dict[tuple, GrammarSet] = {}


def load_grammars(extra_paths: Sequence[Path] = (), *, use_cache: bool = True) -> GrammarSet:
    """Bundled grammars/ plus user grammar files (or directories of them), built and validated.

    Raises GrammarError naming file:line of the first problems found (every sample is checked at load).
    A validated set is cached on disk (keyed by the files' content, see grammar/cache.py) and per process.
    """
    paths = bundled_grammar_files() + _expand(extra_paths)
    key = tuple((str(p), *_stat(p)) for p in paths)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    disk_key = cache_key(paths) if use_cache else None
    grammar_set = read_cached(disk_key) if disk_key else None
    if grammar_set is None:
        files = _read_all(paths)
        grammar_set, problems = _assemble(files)
        if problems or grammar_set is None:
            shown = "\n".join(str(p) for p in problems[:_MAX_SHOWN])
            more = f"\n… and {len(problems) - _MAX_SHOWN} more" if len(problems) > _MAX_SHOWN else ""
            raise GrammarError(
                f"{len(problems)} grammar problem(s):\n{shown}{more}",
                hint="run `speclogs grammars check FILE` for the full list",
            )
        if disk_key:
            infos = {f.path: {"field_types": _field_types(f), "field_shapes": f.field_shapes, "shape_specs": f.shape_specs}
                     for f in files}
            write_cached(disk_key, grammar_set, infos)
    _cache[key] = grammar_set
    return grammar_set


def _field_types(f) -> dict[str, str]:
    types: dict[str, str] = {}
    for p in f.patterns:
        types.update({fl.name: fl.type for fl in p.fields})
    return types


def _stat(p: Path) -> tuple[int, int]:
    try:
        st = p.stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def check_grammar_file(path: Path) -> list[GrammarProblem]:
    """Validate one grammar file together with the bundled set: the problems that involve this file's patterns."""
    path = Path(path)
    bundled = bundled_grammar_files()
    if path.resolve() in {p.resolve() for p in bundled}:
        files = _read_all(bundled)
        target = next(f for f, p in zip(files, bundled) if p.resolve() == path.resolve())
    else:
        target = read_grammar_file(path)
        files = _read_all(bundled) + [target]
    _, problems = _assemble(files, focus={target.path})
    return [p for p in problems if p.file == target.path]


def check_grammar_files(paths: Sequence[Path] = ()) -> list[GrammarProblem]:
    """`speclogs grammars check`: the given grammar files (or directories), or every bundled file when none is given.

    All files are checked together with the bundled set in one pass (sample conflicts between them are found too).
    """
    bundled = bundled_grammar_files()
    targets = _expand(paths) if paths else list(bundled)
    bundled_resolved = {p.resolve(): p for p in bundled}
    user = [p for p in targets if p.resolve() not in bundled_resolved]
    files = _read_all(bundled) + [read_grammar_file(p) for p in user]
    target_resolved = {p.resolve() for p in targets}
    focus = {f.path for f in files if Path(f.path).resolve() in target_resolved}
    _, problems = _assemble(files, focus=focus)
    return [p for p in problems if p.file in focus]
