"""Per-cycle phase timing with CUDA events, resolved later without synchronising.

A sampled speculative cycle records one event at the entry and one at the exit of the cycle and of
each phase (draft, verify, extend), all on the current stream. Nothing waits for the GPU: the
sample goes into a FIFO of pending samples, and at the start of every later cycle the profiler
asks the oldest pending samples `event.query()`; only the ones whose events have all completed
are turned into a `SpecCycleSample` and emitted. A sample is therefore reported a cycle or more
after it ran.

Accepted tokens come from SGLang's `accept_lens` (one int per request, bonus token included),
copied to the host with a non-blocking copy enqueued right after the cycle's end event; it is
read only once the event recorded after that copy has completed.

This module is stdlib only; torch appears only inside `CudaEventSource`, imported when built.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Protocol

from speclogs.errors import SpeclogsError

PHASES = ("draft", "verify", "extend")

SPEC_CYCLE_FORMAT = (
    "speclogs spec_cycle cycle={cycle} bs={bs} draft_ms={draft_ms} verify_ms={verify_ms} "
    "extend_ms={extend_ms} other_ms={other_ms} cycle_ms={cycle_ms} accepted={accepted} "
    "proposed={proposed}"
)


class Event(Protocol):
    """What the profiler needs of a CUDA event (torch.cuda.Event has exactly these)."""

    def record(self) -> None: ...

    def query(self) -> bool: ...

    def elapsed_time(self, end_event: Any) -> float: ...


class EventSource(Protocol):
    """The seam between the profiler and the GPU: real CUDA events, or a test's stand-in."""

    def new_event(self) -> Event: ...

    def is_capturing(self) -> bool: ...

    def copy_to_host(self, tensor: Any) -> Any: ...


class CudaEventSource:
    """torch.cuda events on the current stream; host copies are non-blocking (pinned memory)."""

    def __init__(self) -> None:
        import torch  # lazy: this module must import where torch is absent

        self._torch = torch

    def new_event(self) -> Event:
        return self._torch.cuda.Event(enable_timing=True)

    def is_capturing(self) -> bool:
        return bool(self._torch.cuda.is_current_stream_capturing())

    def copy_to_host(self, tensor: Any) -> Any:
        return tensor.to("cpu", non_blocking=True)


@dataclasses.dataclass(frozen=True)
class SpecCycleSample:
    """One resolved cycle. Times are GPU stream times in microseconds (integers, so they add up)."""

    cycle: int
    batch_size: int
    draft_us: int
    verify_us: int
    extend_us: int
    cycle_us: int
    accepted_tokens: int
    proposed_tokens: int

    @property
    def other_us(self) -> int:
        """Cycle time outside the three phases (never negative)."""
        return max(0, self.cycle_us - self.draft_us - self.verify_us - self.extend_us)

    def to_line(self) -> str:
        """The `speclogs spec_cycle …` log line (format documented in docs/profiling.md)."""
        return SPEC_CYCLE_FORMAT.format(
            cycle=self.cycle,
            bs=self.batch_size,
            draft_ms=_ms(self.draft_us),
            verify_ms=_ms(self.verify_us),
            extend_ms=_ms(self.extend_us),
            other_ms=_ms(self.other_us),
            cycle_ms=_ms(self.cycle_us),
            accepted=self.accepted_tokens,
            proposed=self.proposed_tokens,
        )


def _ms(microseconds: int) -> str:
    return f"{microseconds // 1000}.{microseconds % 1000:03d}"


def _elapsed_us(start: Event, end: Event) -> int:
    return max(0, round(start.elapsed_time(end) * 1000.0))


@dataclasses.dataclass
class _PendingCycle:
    cycle: int
    batch_size: int
    start: Event
    phases: dict[str, tuple[Event, Event]] = dataclasses.field(default_factory=dict)
    end: Event | None = None
    verify_width: int | None = None
    accept_lens_host: Any = None
    host_copy_done: Event | None = None

    def all_events(self) -> list[Event]:
        events = [self.start]
        for phase_start, phase_end in self.phases.values():
            events += [phase_start, phase_end]
        if self.end is not None:
            events.append(self.end)
        if self.host_copy_done is not None:
            events.append(self.host_copy_done)
        return events


class CycleProfiler:
    """Counts speculative cycles, samples every `every`-th, resolves samples when the GPU is done.

    The caller brackets a cycle with `begin_cycle` / `end_cycle` (or `abandon_cycle` when the
    cycle raised) and each phase with `begin_phase` / `end_phase`. `emit` receives one
    `SpecCycleSample` per resolved sample. No method here ever waits on the GPU.
    """

    def __init__(
        self,
        *,
        every: int,
        events: EventSource,
        emit: Callable[[SpecCycleSample], None],
        max_pending: int = 64,
    ) -> None:
        if every < 1:
            raise SpeclogsError(
                f"profiler sampling period every={every} must be >= 1",
                hint="pass --every N with N >= 1",
            )
        self.every = every
        self.cycles_seen = 0
        self.samples_emitted = 0
        self.samples_dropped = 0
        self._events = events
        self._emit = emit
        self._max_pending = max_pending
        self._pending: collections.deque[_PendingCycle] = collections.deque()
        self._current: _PendingCycle | None = None
        self._phase_starts: dict[str, Event] = {}

    @property
    def sampling(self) -> bool:
        """Whether the cycle in progress is a sampled one (phases outside it cost nothing)."""
        return self._current is not None

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def begin_cycle(self, batch_size: int) -> None:
        """Start cycle number `cycles_seen + 1`; record its start event when it is sampled."""
        self.resolve_ready()
        self.cycles_seen += 1
        self._current = None
        self._phase_starts = {}
        if self.cycles_seen % self.every != 0 or self._events.is_capturing():
            return
        start = self._events.new_event()
        start.record()
        self._current = _PendingCycle(self.cycles_seen, batch_size, start)

    def begin_phase(self, phase: str) -> None:
        if self._current is None:
            return
        event = self._events.new_event()
        event.record()
        self._phase_starts[phase] = event

    def end_phase(self, phase: str) -> None:
        if self._current is None or phase not in self._phase_starts:
            return
        event = self._events.new_event()
        event.record()
        self._current.phases[phase] = (self._phase_starts.pop(phase), event)

    def set_verify_width(self, draft_token_num: int) -> None:
        """Tokens per request in this cycle's verify tree, root included (SGLang's draft_token_num)."""
        if self._current is not None:
            self._current.verify_width = draft_token_num

    def end_cycle(self, accept_lens: Any) -> None:
        """Close the sampled cycle; `accept_lens` is SGLang's per-request device tensor."""
        sample = self._current
        self._current = None
        if sample is None:
            return
        sample.end = self._events.new_event()
        sample.end.record()
        if accept_lens is not None:
            sample.accept_lens_host = self._events.copy_to_host(accept_lens)
            sample.host_copy_done = self._events.new_event()
            sample.host_copy_done.record()
        self._pending.append(sample)
        while len(self._pending) > self._max_pending:
            self._pending.popleft()
            self.samples_dropped += 1

    def abandon_cycle(self) -> None:
        """The cycle raised: forget its events, count nothing."""
        self._current = None
        self._phase_starts = {}

    def resolve_ready(self) -> list[SpecCycleSample]:
        """Emit every leading pending sample whose events have all completed; never waits."""
        resolved = []
        while self._pending:
            sample = self._pending[0]
            if not all(event.query() for event in sample.all_events()):
                break
            self._pending.popleft()
            result = _resolve(sample)
            if result is None:
                self.samples_dropped += 1
                continue
            self.samples_emitted += 1
            resolved.append(result)
            self._emit(result)
        return resolved


def _resolve(sample: _PendingCycle) -> SpecCycleSample | None:
    """Turn a completed pending sample into numbers; None when it lacks what a line needs."""
    if sample.end is None or sample.accept_lens_host is None:
        return None
    phase_us = {
        phase: _elapsed_us(start, end) for phase, (start, end) in sample.phases.items()
    }
    accept_lens = [int(n) for n in sample.accept_lens_host.tolist()]
    batch_size = len(accept_lens) if accept_lens else sample.batch_size
    width = sample.verify_width
    proposed = batch_size * max(0, width - 1) if width is not None else 0
    return SpecCycleSample(
        cycle=sample.cycle,
        batch_size=batch_size,
        draft_us=phase_us.get("draft", 0),
        verify_us=phase_us.get("verify", 0),
        extend_us=phase_us.get("extend", 0),
        cycle_us=_elapsed_us(sample.start, sample.end),
        accepted_tokens=max(0, sum(accept_lens) - len(accept_lens)),
        proposed_tokens=proposed,
    )
