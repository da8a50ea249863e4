"""Grammar speed figures: load_grammars() time (cold build, warm disk cache) and the compiled regexes in polars
on a generated 2M-line SGLang log (decode lines, prefill lines, uvicorn access lines, the prefix split).

    PYTHONPATH=src python benchmarks/bench_grammars.py [--lines 2000000] [--log /tmp/speclogs_bench_2m.log]

Prints seconds; nothing is asserted (speed is measured here, not in tests).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GENERATOR = Path("/work/shared/tools/gen_sglang_log.py")


def _load_time(cache_dir: str, *, fresh: bool) -> float:
    code = ("import time; t=time.perf_counter(); from speclogs.grammar import load_grammars; "
            f"load_grammars(use_cache={not fresh}); print(time.perf_counter()-t)")
    env = {**os.environ, "SPECLOGS_CACHE_DIR": cache_dir}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--log", type=Path, default=Path(tempfile.gettempdir()) / "speclogs_bench_2m.log")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as cache:
        cold = _load_time(cache, fresh=True)
        _load_time(cache, fresh=False)  # writes the cache
        warm = min(_load_time(cache, fresh=False) for _ in range(3))
    print(f"load_grammars: cold (build + validate every sample) {cold:.3f} s, warm (disk cache, incl. pyparsing import) {warm:.3f} s")

    if not args.log.exists():
        subprocess.run([sys.executable, str(GENERATOR), "-n", str(args.lines), str(args.log)], check=True)

    import polars as pl

    from speclogs.grammar import load_grammars

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
            casts = []
            for f in pattern.fields:
                col = pl.col(f.name)
                if f.type == "int":
                    casts.append(col.cast(pl.Int64))
                elif f.type in ("float", "pct"):
                    casts.append(col.str.strip_chars_end("%").cast(pl.Float64))
                elif f.type == "bool":
                    casts.append(col == "True")
                else:
                    casts.append(col)
            groups.filter(hit).select(casts)
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
