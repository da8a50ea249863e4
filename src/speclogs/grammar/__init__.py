"""Line grammars: data files under grammars/, built into pyparsing elements (the definition and validator) and
compiled to one regex each (what the ingest runs).

    load_grammars(extra_paths) -> GrammarSet      bundled grammars + user files; raises GrammarError
    check_grammar_files(paths) -> list[GrammarProblem]
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
    split_rank_tags,
)

# The loader (and pyparsing with it) is imported only when grammars are loaded: `speclogs sql` needs neither.

__all__ = [
    "Field",
    "GrammarProblem",
    "GrammarSet",
    "Pattern",
    "RANK_TAGS",
    "RANK_TAG_REGEXES",
    "bundled_grammar_files",
    "cast_expr",
    "check_grammar_files",
    "load_grammars",
    "split_rank_tags",
]

_MAX_SHOWN = 10


def bundled_grammar_files() -> list[Path]:
    return sorted(bundled_grammar_dir().glob("*.toml"))


def _expand(paths: Sequence[Path]) -> list[Path]:
    return [f for p in map(Path, paths) for f in (sorted(p.glob("*.toml")) if p.is_dir() else [p])]


def _assemble(paths: Sequence[Path], focus: set[Path]) -> tuple[GrammarSet | None, list[GrammarProblem], set[str]]:
    """The files read and validated together, looking only for problems that involve the `focus` files' patterns;
    the focus files as problems name them."""
    from speclogs.grammar.loader import find_prefix, heads_of, ordered_patterns, read_grammar_file, validate

    files = [read_grammar_file(p) for p in paths]
    focused = {f.path for f, p in zip(files, paths) if p.resolve() in focus}
    problems = [pr for f in files for pr in f.problems]  # a file that does not build is always a problem
    prefix = find_prefix(files)
    if prefix is None:
        problems.append(GrammarProblem("grammars/prefix.toml", 1, None,
                                       "no prefix grammar (a file with kind = \"prefix\" and a pattern named 'prefix')"))
    problems += validate(files, prefix, focused)
    if prefix is None:
        return None, problems, focused
    others = tuple(p for p in heads_of(files, "prefix") if p is not prefix)
    grammar_set = GrammarSet(prefix=prefix, patterns=ordered_patterns(files), files=tuple(f.path for f in files),
                             prefixes=(prefix, *others), wrappers=heads_of(files, "wrapper"))
    return grammar_set, problems, focused


def load_grammars(extra_paths: Sequence[Path] = ()) -> GrammarSet:
    """Bundled grammars/ plus user grammar files (or directories of them), built and validated; GrammarError names
    file:line of the first problems. A user file's samples are checked every time it loads (the bundled files' by the
    tests and `speclogs grammars check`); the last few sets are kept, keyed by the files' paths, sizes and mtimes."""
    paths = tuple(bundled_grammar_files() + _expand(extra_paths))
    return _load(paths, tuple(_stat(p) for p in paths))


@functools.lru_cache(maxsize=4)
def _load(paths: tuple[Path, ...], stats: tuple) -> GrammarSet:
    bundled = set(bundled_grammar_files())
    grammar_set, problems, _ = _assemble(paths, focus={p.resolve() for p in paths if p not in bundled})
    if problems or grammar_set is None:
        shown = "\n".join(str(p) for p in problems[:_MAX_SHOWN])
        more = f"\n… and {len(problems) - _MAX_SHOWN} more" if len(problems) > _MAX_SHOWN else ""
        raise GrammarError(f"{len(problems)} grammar problem(s):\n{shown}{more}",
                           hint="run `speclogs grammars check FILE` for the full list")
    return grammar_set


def _stat(p: Path) -> tuple[int, int]:
    try:
        st = p.stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def check_grammar_files(paths: Sequence[Path] = ()) -> list[GrammarProblem]:
    """`speclogs grammars check`: the problems of the given grammar files (or directories), checked together with the
    bundled set in one pass (conflicts between them are found too); every bundled file when none is given."""
    bundled = bundled_grammar_files()
    targets = _expand(paths) if paths else bundled
    known = {p.resolve() for p in bundled}
    _, problems, focused = _assemble(bundled + [p for p in targets if p.resolve() not in known], {p.resolve() for p in targets})
    return [p for p in problems if p.file in focused]
