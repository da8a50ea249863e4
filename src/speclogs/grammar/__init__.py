"""Line grammars: data files under grammars/, built into pyparsing elements (the definition) and compiled to one
regex each (the compiled form, in the subset of speclogs.grammar.regex).

Public API (consumed by speclogs.ingest):
    load_grammars(extra_paths) -> GrammarSet      bundled grammars + user files; raises GrammarError
    check_grammar_file(path) -> list[GrammarProblem]
    Field, Pattern, GrammarSet, GrammarProblem, cast_expr, cast_value, RANK_TAG_REGEXES
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from speclogs.errors import GrammarError
from speclogs.grammar.model import (
    RANK_TAG_REGEXES,
    RANK_TAGS,
    Field,
    GrammarProblem,
    GrammarSet,
    Pattern,
    bundled_grammar_dir,
    cast_expr,
    cast_value,
    split_rank_tags,
)

# The loader (and pyparsing with it) is imported only when grammars are loaded: `speclogs sql` needs neither.


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
    "cast_expr",
    "cast_value",
    "check_grammar_file",
    "check_grammar_files",
    "load_grammars",
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


def _read_all(paths: Sequence[Path]) -> list:
    return [read_grammar_file(p) for p in paths]


def _assemble(files: list, focus: set[str] | None = None) -> tuple[GrammarSet | None, list[GrammarProblem]]:
    from speclogs.grammar.loader import find_prefix, heads_of, ordered_patterns, validate

    problems = [pr for f in files for pr in f.problems]  # a file that does not build is always a problem
    prefix = find_prefix(files)
    if prefix is None:
        problems.append(GrammarProblem("grammars/prefix.toml", 1, None,
                                       "no prefix grammar (a file with kind = \"prefix\" and a pattern named 'prefix')"))
    problems += validate(files, prefix, focus)
    if prefix is None:
        return None, problems
    others = tuple(p for p in heads_of(files, "prefix") if p is not prefix)
    grammar_set = GrammarSet(prefix=prefix, patterns=ordered_patterns(files), files=tuple(f.path for f in files),
                             prefixes=(prefix, *others), wrappers=heads_of(files, "wrapper"))
    return grammar_set, problems


def load_grammars(extra_paths: Sequence[Path] = ()) -> GrammarSet:
    """Bundled grammars/ plus user grammar files (or directories of them), built and validated.

    Raises GrammarError naming file:line of the first problems found. The bundled files' samples are checked by the
    test suite and by `speclogs grammars check`, a user file's every time it loads (it may have changed). The last
    few sets are kept per process, keyed by the files' paths, sizes and modification times.
    """
    paths = tuple(bundled_grammar_files() + _expand(extra_paths))
    return _load(paths, tuple(_stat(p) for p in paths))


@functools.lru_cache(maxsize=4)
def _load(paths: tuple[Path, ...], stats: tuple) -> GrammarSet:
    files = _read_all(paths)
    bundled = {str(p) for p in bundled_grammar_files()}
    grammar_set, problems = _assemble(files, focus={f.path for f in files if f.path not in bundled})
    if problems or grammar_set is None:
        shown = "\n".join(str(p) for p in problems[:_MAX_SHOWN])
        more = f"\n… and {len(problems) - _MAX_SHOWN} more" if len(problems) > _MAX_SHOWN else ""
        raise GrammarError(
            f"{len(problems)} grammar problem(s):\n{shown}{more}",
            hint="run `speclogs grammars check FILE` for the full list",
        )
    return grammar_set


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
