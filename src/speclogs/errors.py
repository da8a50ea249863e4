"""speclogs' exception types: the message says what failed and where, `hint` what to do (cli.py: stderr, exit 1)."""

from __future__ import annotations


class SpeclogsError(Exception):
    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class GrammarError(SpeclogsError):
    """A grammar file is malformed or one of its samples fails (message names file:line and the sample)."""


class InputError(SpeclogsError):
    """An input path cannot be read at all (missing, permission denied)."""


class StoreError(SpeclogsError):
    """The DuckDB file cannot be opened or written (locked by another writer, wrong schema version)."""


class AnalysisError(SpeclogsError):
    """Nothing can be computed for the request (unknown runs, no decode rows, …)."""


class PlanError(SpeclogsError):
    """A launch plan is invalid (message names file:line)."""


class LaunchError(SpeclogsError):
    """A launch could not be carried out (port busy, server died, health never 200, …)."""

