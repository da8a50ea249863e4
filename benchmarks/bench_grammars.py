"""Grammar speed figures: what loading the grammars costs a fresh process, and the compiled regexes on a generated
2M-line SGLang log (decode lines, prefill lines, uvicorn access lines, the prefix split) in polars.

    PYTHONPATH=src python benchmarks/bench_grammars.py [--lines 2000000] [--log /tmp/sglang_2m.log]

Prints seconds; nothing is asserted (speed is measured here, not in tests).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import ensure_log  # noqa: E402


def _load_time(what: str) -> float:
    """Seconds a fresh interpreter spends on `what` (after importing speclogs.grammar), min of three."""
    code = ("import time; from speclogs.grammar import load_grammars; from speclogs.ingest.classify import compile_engine; "
            f"t=time.perf_counter(); {what}; print(time.perf_counter()-t)")
    return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
               for _ in range(3))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--log", type=Path, default=Path("/tmp/sglang_2m.log"))
    args = parser.parse_args()

    load = _load_time("load_grammars()")
    both = _load_time("compile_engine(load_grammars())")
    print(f"load_grammars() in a fresh process (build every pattern's element and regex; bundled samples are checked by "
          f"the tests, not here) {load:.3f} s; with compile_engine {both:.3f} s (min of 3)")
    ensure_log(args.log, args.lines)

    import polars as pl

    from speclogs.grammar import cast_expr, load_grammars

    grammars = load_grammars()
    t0 = time.perf_counter()
    text = pl.read_csv(args.log, has_header=False, separator="\x01", quote_char=None, infer_schema=False,
                       new_columns=["text"], low_memory=False).get_column("text").fill_null("")
    t_read = time.perf_counter() - t0
    print(f"log: {len(text):,} lines, {args.log.stat().st_size / 1e6:.1f} MB; polars read_csv {t_read:.3f} s")

    prefix = grammars.prefix.regex
    cut = prefix.find("(?P<message>")
    prefix_no_message = "^(?P<_pfx>" + prefix[1:cut] + ")"  # what the ingest runs: no capture of the message body
    t0, c0 = time.perf_counter(), time.process_time()
    head = text.str.extract_groups(prefix_no_message).struct.unnest()
    t_prefix, c_prefix = time.perf_counter() - t0, time.process_time() - c0
    print(f"prefix (ts, ms, rank_tags; no message capture) on all {len(text):,} lines: {t_prefix:.3f} s wall, {c_prefix:.3f} s CPU")
    messages = text.str.slice(head.get_column("_pfx").str.len_chars().fill_null(0))

    for family in ("decode_batch", "prefill_batch", "uvicorn"):
        patterns = [p for p in grammars.patterns if p.family == family and p.scope == "message"]
        t0, c0 = time.perf_counter(), time.process_time()
        rows = messages.filter(messages.str.contains(patterns[0].gate, literal=True))
        candidates = len(rows)
        claimed = 0
        for pattern in patterns:
            if len(rows) == 0:
                break
            gated = rows.filter(rows.str.contains(pattern.gate, literal=True)) if pattern.gate else rows
            groups = gated.str.extract_groups("^(?P<_hit>)" + pattern.regex[1:]).struct.unnest()
            hit = groups.get_column("_hit").is_not_null()
            groups.filter(hit).select(cast_expr(pl.col(f.name), f.type) for f in pattern.fields if f.name in groups.columns)
            claimed += int(hit.sum())
            rows = gated.filter(~hit)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"{family}: {candidates:,} gated lines, {claimed:,} claimed by {', '.join(p.name for p in patterns)} "
              f"(first match wins): {elapsed:.3f} s wall, {cpu:.3f} s CPU (all threads) "
              f"({candidates / elapsed / 1e6:.2f} M lines/s wall; {elapsed / t_read:.1f}x this run's read_csv time)")
    print("The VM is noisy (other jobs share its 2 cores): compare stages through their ratio to read_csv, which took "
          "0.31 s unloaded in shared/reference/perf-anchors.md.")


if __name__ == "__main__":
    main()
