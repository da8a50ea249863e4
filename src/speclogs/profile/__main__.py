"""`python -m speclogs.profile [--every N] [--] <command…>`: run <command> with the profiler hook.

The command replaces this process (exec), so its exit status, signals and output are its own.
"""

from __future__ import annotations

import os
import sys

from speclogs.profile import DEFAULT_EVERY, profiled_environment

USAGE = (
    "usage: python -m speclogs.profile [--every N] [--] <command…>\n"
    "  Runs <command> (e.g. python3 -m sglang.launch_server … --speculative-algorithm EAGLE3)\n"
    "  with speclogs' EAGLE-worker profiler active in every Python process it starts.\n"
    f"  --every N   log one `speclogs spec_cycle` line every N decode cycles (default {DEFAULT_EVERY})\n"
)


def parse_arguments(argv: list[str]) -> tuple[int, list[str]]:
    """(every, command) from argv; ValueError with a message on bad input."""
    every, rest = DEFAULT_EVERY, list(argv)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option == "--":
            break
        if option != "--every" and not option.startswith("--every="):
            raise ValueError(f"unknown option {option!r} (put `--` before the command)")
        value = option.split("=", 1)[1] if "=" in option else (rest.pop(0) if rest else "")
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"--every needs a positive integer, got {value!r}")
        every = int(value)
    if not rest:
        raise ValueError("no command given")
    return every, rest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    try:
        every, command = parse_arguments(argv)
        os.execvpe(command[0], command, profiled_environment(os.environ, every=every))
    except ValueError as error:
        sys.stderr.write(f"Error: {error}\n{USAGE}")
        return 2
    except OSError as error:
        sys.stderr.write(f"Error: cannot run {command[0]!r}: {error.strerror}\n")
        return 1
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
