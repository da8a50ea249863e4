"""What an ingest did: one account type (FileAccount) for a chunk, a file (its `files` row) and the whole call
(IngestSummary.account); ProgressEvent says how far it is."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field

from speclogs.redact import redact_json


@dataclass(frozen=True)
class ProgressEvent:
    """Sent before each file and once at the end; `show`: the input is big enough for a bar."""

    current: str
    done_bytes: int
    total_bytes: int
    files_done: int
    files_total: int
    show: bool


@dataclass(frozen=True)
class FileAccount:
    """What some lines came to: a chunk of a file, a whole file, or every file of an ingest (accounts add up)."""

    total_lines: int = 0
    parsed_lines: int = 0
    continuation_lines: int = 0
    unparsed_lines: int = 0
    rows: dict[str, int] = field(default_factory=dict)  # table → rows
    drift: dict[str, int] = field(default_factory=dict)  # pattern → near misses that are drift
    warnings: tuple[str, ...] = ()
    prefixed_pieces: int = 0
    launch_starts: tuple[int, ...] = ()  # line numbers of its server starts
    launch_facts: tuple[tuple[int, str, object], ...] = ()  # (launch_no, event, ts)
    run_facts: dict[str, object] = field(default_factory=dict)  # what it says of its run (runs columns); the first wins

    def __add__(self, other: FileAccount) -> FileAccount:
        return FileAccount(
            self.total_lines + other.total_lines, self.parsed_lines + other.parsed_lines,
            self.continuation_lines + other.continuation_lines, self.unparsed_lines + other.unparsed_lines,
            dict(Counter(self.rows) + Counter(other.rows)), dict(Counter(self.drift) + Counter(other.drift)),
            self.warnings + other.warnings, self.prefixed_pieces + other.prefixed_pieces,
            self.launch_starts + other.launch_starts, self.launch_facts + other.launch_facts,
            {**other.run_facts, **self.run_facts},
        )

    def counts(self) -> FileAccount:  # its line and row counts alone: what an ingest's account adds up
        return FileAccount(self.total_lines, self.parsed_lines, self.continuation_lines, self.unparsed_lines, self.rows,
                           self.drift)


@dataclass(frozen=True)
class DriftNote:
    """One row of the `drift` view for a file just ingested."""

    source_file: str
    kind: str  # new_label | unmatched_line | unknown_message | near_miss | missing_field
    subject: str
    lines: int
    example_line_no: int | None
    detail: str | None


UNCHANGED = "unchanged, skipped (already ingested; --replace re-ingests)"


@dataclass(frozen=True)
class IngestSummary:
    """One `ingest_paths` call: the account of the files it ingested, and what it left out."""

    db_path: str
    files_found: int
    files_ingested: int
    files_unchanged: int
    bytes_read: int
    seconds: float
    account: FileAccount = FileAccount()
    warnings: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()
    source_files: tuple[str, ...] = ()  # the files this call ingested (files.source_file)
    drift_notes: tuple[DriftNote, ...] = ()  # the drift view's rows for those files
    skipped_files: tuple[tuple[str, str], ...] = ()  # (file, why) of every file left out, unchanged ones excepted
    replaced: tuple[tuple[str, str], ...] = ()  # (file, why) of every stored file whose rows this call replaced
    failed: tuple[str, ...] = ()  # "source_file: why" for each file that failed (written nowhere) or, named, was unreadable

    @property
    def skipped(self) -> dict[str, int]:  # reason → how many files (unchanged ones included)
        counts = Counter(why for _, why in self.skipped_files)
        return dict(counts, **{UNCHANGED: self.files_unchanged}) if self.files_unchanged else dict(counts)

    @property
    def skipped_examples(self) -> dict[str, str]:  # reason → the first file
        return {why: where for where, why in reversed(self.skipped_files)}

    @property
    def files_skipped(self) -> int:
        return len(self.skipped_files) + self.files_unchanged

    @property
    def parsed_pct(self) -> float:
        return 100.0 * self.account.parsed_lines / max(1, self.account.total_lines)

    @property
    def lines_per_s(self) -> float:
        return self.account.total_lines / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        account = data.pop("account")
        data.update(lines_total=account["total_lines"], lines_parsed=account["parsed_lines"],
                    lines_continuation=account["continuation_lines"], lines_unparsed=account["unparsed_lines"],
                    rows_per_table=dict(sorted(account["rows"].items())), drift=account["drift"])
        data.update(skipped=self.skipped, skipped_examples=self.skipped_examples, files_skipped=self.files_skipped,
                    parsed_pct=round(self.parsed_pct, 2), lines_per_s=round(self.lines_per_s, 1),
                    mb_per_s=round(self.mb_per_s, 2), seconds=round(self.seconds, 3))
        return data

    def to_json(self) -> str:
        return json.dumps(redact_json(self.to_dict()), indent=2)
