"""Benchmark windows and `/metrics` scrapes: what run.json's `windows` records.

A window is one benchmark's measured span. With `--enable-metrics` the launcher scrapes `GET /metrics` as it opens
(`before`), every `every_s` seconds (`during`) and as it closes (`after`), into `metrics-<window>-<phase>[-NNN].prom`,
so counter deltas between a window's scrapes belong to that window only. A failed scrape is recorded, never fatal.

Standard library only (runs on the GPU box).
"""

from __future__ import annotations

import threading
import time
import urllib.error
from pathlib import Path
from typing import Callable

from speclogs.launcher import runinfo
from speclogs.launcher.process import open_direct

METRICS_FLAG = "--enable-metrics"


class Windows:
    """The benchmark windows of one launch, and their scrapes when `scrape` is true."""

    def __init__(self, base_url: str, run_dir: Path, *, scrape: bool, every_s: float, timeout_s: float,
                 say: Callable[[str], None]) -> None:
        self.base_url = base_url
        self.run_dir = run_dir
        self.scrape = scrape
        self.every_s = every_s
        self.timeout_s = timeout_s
        self.say = say
        self.records: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._open: dict | None = None

    def open(self, name: str) -> None:
        """Open window `name` (closing one still open): its start time, the `before` scrape, the `during` scrapes."""
        self.close()
        window = {"name": name, "start": runinfo.now_iso(), "start_unix": time.time(), "end": None, "end_unix": None,
                  "scrapes": []}
        self.records.append(window)
        self._open = window
        if not self.scrape:
            return
        self._take(window, "before")
        if self.every_s > 0:
            self._stop.clear()
            self._thread = threading.Thread(target=self._during, args=(window,), name="speclogs-scrape", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Close the open window (if any): stop the `during` scrapes, take the `after` one, note the end time."""
        window, self._open = self._open, None
        if window is None:
            return
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.scrape:
            self._take(window, "after")
        window["end"], window["end_unix"] = runinfo.now_iso(), time.time()

    def files(self) -> list[str]:
        """The scrape files written (call it after close(): no `during` thread is running then)."""
        return [s["file"] for w in self.records for s in w["scrapes"] if s["file"]]

    def _during(self, window: dict) -> None:
        index = 1
        while not self._stop.wait(self.every_s):
            self._take(window, "during", index)
            index += 1

    def _take(self, window: dict, phase: str, index: int | None = None) -> None:
        name = f"metrics-{window['name']}-{phase}" + (f"-{index:03d}" if index is not None else "") + ".prom"
        entry = {"phase": phase, "ts": runinfo.now_iso(), "unix": time.time(), "file": None, "status": None,
                 "bytes": None, "error": None}
        try:
            with open_direct(f"{self.base_url}/metrics", self.timeout_s) as response:
                body = response.read()
                entry["status"] = response.status
        except urllib.error.HTTPError as exc:
            entry["status"], entry["error"] = exc.code, f"GET /metrics answered HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            entry["error"] = f"GET /metrics failed: {getattr(exc, 'reason', exc)}"
        if entry["error"] is None:
            try:
                (self.run_dir / name).write_bytes(body)
                entry["file"], entry["bytes"] = name, len(body)
            except OSError as exc:   # a full disk shows in the launch's own writes; the scrape only records it
                entry["error"] = f"cannot write {name}: {exc.strerror}"
        if entry["error"] is not None:
            self.say(f"metrics scrape {window['name']}/{phase}: {entry['error']} (recorded; the launch goes on)")
        window["scrapes"].append(entry)
