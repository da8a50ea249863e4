"""What an ingest did (IngestSummary) and how far it is (ProgressEvent)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from speclogs.redact import redact_json


@dataclass(frozen=True)
class ProgressEvent:
    """Sent before each file and once at the end; `show` says whether the input is big enough for a bar."""

    current: str
    done_bytes: int
    total_bytes: int
    files_done: int
    files_total: int
    show: bool


@dataclass(frozen=True)
class DriftNote:
    """One row of the `drift` view for a file just ingested: a label no typed column took, a template of lines no
    grammar matched, a pattern's near misses, or a field the run's configuration implies but the log never printed."""

    source_file: str
    kind: str  # new_label | unmatched_line | unknown_message | near_miss | missing_field
    subject: str
    lines: int
    example_line_no: int | None
    detail: str | None


UNCHANGED = "unchanged, skipped (already ingested; --replace re-ingests)"


@dataclass(frozen=True)
class IngestSummary:
    """Counts of one `ingest_paths` call. `skipped` maps a reason to how many files it applied to."""

    db_path: str
    files_found: int
    files_ingested: int
    files_unchanged: int
    skipped: dict[str, int]
    skipped_examples: dict[str, str]
    lines_total: int
    lines_parsed: int
    lines_continuation: int
    lines_unparsed: int
    rows_per_table: dict[str, int]
    bytes_read: int
    seconds: float
    warnings: tuple[str, ...] = ()
    drift: dict[str, int] = field(default_factory=dict)
    runs: tuple[str, ...] = ()
    source_files: tuple[str, ...] = ()  # the files this call ingested (files.source_file)
    drift_notes: tuple[DriftNote, ...] = ()  # the drift view's rows for those files
    skipped_files: tuple[tuple[str, str], ...] = ()  # (file, why) of every file left out, unchanged ones excepted
    replaced: tuple[tuple[str, str], ...] = ()  # (file, why) of every stored file whose rows this call replaced
    failed: tuple[str, ...] = ()  # "source_file: why" for each file that failed (written nowhere) or, named, was unreadable

    @property
    def files_skipped(self) -> int:
        return sum(self.skipped.values())

    @property
    def parsed_pct(self) -> float:
        return 100.0 * self.lines_parsed / self.lines_total if self.lines_total else 0.0

    @property
    def lines_per_s(self) -> float:
        return self.lines_total / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data["warnings"] = list(self.warnings)
        data["runs"] = list(self.runs)
        data["source_files"] = list(self.source_files)
        data["failed"] = list(self.failed)
        data["drift_notes"] = [asdict(note) for note in self.drift_notes]
        data["files_skipped"] = self.files_skipped
        data["parsed_pct"] = round(self.parsed_pct, 2)
        data["lines_per_s"] = round(self.lines_per_s, 1)
        data["mb_per_s"] = round(self.mb_per_s, 2)
        data["seconds"] = round(self.seconds, 3)
        return data

    def to_json(self) -> str:
        return json.dumps(redact_json(self.to_dict()), indent=2)
