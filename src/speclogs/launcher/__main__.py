"""`python -m speclogs.launcher PLAN.toml …`: the launcher without typer (what `--host` runs on the remote box).

Progress on stderr; --json-summary: the summary as one JSON line on stdout. Exit 0 all ok, 1 an error or a failed
launch, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

from speclogs.errors import SpeclogsError
from speclogs.launcher import Interrupted, LaunchOptions, launch_plan, load_plan
from speclogs.launcher.adaptive import parse_until


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speclogs.launcher")
    parser.add_argument("plan")
    parser.add_argument("--out")
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--max-launches", type=int)
    parser.add_argument("--max-minutes", type=float)
    parser.add_argument("--until", help="adaptive: e.g. 'ci_width<=5%%'")
    for flag in ("--resume", "--retry-failed", "--force", "--json-summary", "--stop-on-stdin-eof"):
        parser.add_argument(flag, action="store_true")   # --stop-on-stdin-eof: stdin closed = the ssh session went away
    args = parser.parse_args(argv)
    if args.stop_on_stdin_eof:
        threading.Thread(target=_watch_stdin, daemon=True).start()

    def say(message: str) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()

    try:
        plan = load_plan(args.plan)
        out = Path(args.out) if args.out else Path("runs") / plan.name
        until = parse_until(args.until) if args.until is not None else None
        summary = launch_plan(plan, LaunchOptions(out_dir=out, resume=args.resume, retry_failed=args.retry_failed,
                                                  only=tuple(args.only), max_launches=args.max_launches,
                                                  max_minutes=args.max_minutes, until=until, force=args.force),
                              progress=say)
    except SpeclogsError as exc:
        say(f"Error: {exc}")
        if exc.hint:
            say(f"Hint: {exc.hint}")
        return 1
    except Interrupted as exc:
        say(f"Interrupted ({exc.reason}): the running server was stopped; --resume continues")
        return 130
    if args.json_summary:
        sys.stdout.write(json.dumps(summary.to_dict()) + "\n")
    for result in summary.results:
        say(f"{result.run_name:<28} {'skipped (complete)' if result.skipped else result.outcome:<18} "
            f"ready {result.ready_s if result.ready_s is not None else '-':>8} s  "
            f"median {result.median_tok_s if result.median_tok_s is not None else '-'} tok/s")
    say(f"stopped: {summary.stopped}; pending: {len(summary.pending)}")
    return 1 if summary.failed else 0


def _watch_stdin() -> None:
    # raw fd reads: a daemon thread blocked in a buffered stdin read would abort interpreter shutdown
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGHUP)


if __name__ == "__main__":
    sys.exit(main())
