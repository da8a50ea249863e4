"""Per-cycle phase timing with CUDA events, resolved later without synchronising (docs/profiling.md, "How the timing
works"). Stdlib only; torch is imported inside `CudaEventSource`.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable

from speclogs.errors import SpeclogsError

# An event source offers new_event() (an object with record(), query(), elapsed_time(end)), is_capturing() and
# copy_to_host(tensor): CudaEventSource, or a test's stand-in.
EventSource = Any


class CudaEventSource:
    """torch.cuda events on the current stream; host copies go, non-blocking, into a ring of pinned buffers allocated
    once (pinning is too slow for a sampled cycle), longer than the profiler's pending queue."""

    HOST_SLOTS = 72
    HOST_CAPACITY = 1024  # requests a batch; a wider one gets a one-off pinned copy

    def __init__(self) -> None:
        import torch  # lazy: this module must import where torch is absent

        self._torch = torch
        self._host_buffers: list[Any] = []
        self._host_dtype: Any = None
        self._next_slot = 0

    def new_event(self) -> Any:
        return self._torch.cuda.Event(enable_timing=True)

    def is_capturing(self) -> bool:
        return bool(self._torch.cuda.is_current_stream_capturing())

    def copy_to_host(self, tensor: Any) -> Any:
        count = tensor.numel()
        if count > self.HOST_CAPACITY:
            return tensor.to("cpu", non_blocking=True)
        if tensor.dtype != self._host_dtype:  # once: SGLang's accept_lens keep their dtype
            self._host_dtype = tensor.dtype
            block = self._torch.empty((self.HOST_SLOTS, self.HOST_CAPACITY), dtype=tensor.dtype, pin_memory=True)
            self._host_buffers = list(block.unbind(0))
        view = self._host_buffers[self._next_slot][:count]
        self._next_slot = (self._next_slot + 1) % self.HOST_SLOTS
        view.copy_(tensor.reshape(-1), non_blocking=True)
        return view


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
    gap_us: int = 0

    @property
    def other_us(self) -> int:
        """Cycle time outside the three phases (never negative)."""
        return max(0, self.cycle_us - self.draft_us - self.verify_us - self.extend_us)

    def to_line(self) -> str:
        """The `speclogs spec_cycle …` log line (docs/profiling.md)."""
        times = (("draft", self.draft_us), ("verify", self.verify_us), ("extend", self.extend_us), ("other", self.other_us),
                 ("gap", self.gap_us), ("cycle", self.cycle_us))
        return (f"speclogs spec_cycle cycle={self.cycle} bs={self.batch_size} "
                + " ".join(f"{name}_ms={us // 1000}.{us % 1000:03d}" for name, us in times)
                + f" accepted={self.accepted_tokens} proposed={self.proposed_tokens}")


def _elapsed_us(start: Any, end: Any) -> int:
    return max(0, round(start.elapsed_time(end) * 1000.0))


@dataclasses.dataclass
class _PendingCycle:
    cycle: int
    batch_size: int
    start: Any
    gap_start: Any = None
    phases: dict[str, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    end: Any = None
    verify_width: int | None = None
    accept_lens_host: Any = None
    host_copy_done: Any = None

    def all_events(self) -> list[Any]:
        """The last recorded first: it is the one most likely pending."""
        events = [self.gap_start, self.start, *(e for pair in self.phases.values() for e in pair), self.end, self.host_copy_done]
        return [event for event in reversed(events) if event is not None]

    def resolve(self) -> SpecCycleSample | None:
        """None when the sample lacks what a line needs."""
        if self.end is None or self.accept_lens_host is None:
            return None
        phase_us = {phase: _elapsed_us(start, end) for phase, (start, end) in self.phases.items()}
        accept_lens = [int(n) for n in self.accept_lens_host.tolist()]
        batch_size = len(accept_lens) or self.batch_size
        accepted = max(0, sum(accept_lens) - len(accept_lens))
        return SpecCycleSample(
            cycle=self.cycle, batch_size=batch_size, draft_us=phase_us.get("draft", 0), verify_us=phase_us.get("verify", 0),
            extend_us=phase_us.get("extend", 0), cycle_us=_elapsed_us(self.start, self.end),
            gap_us=_elapsed_us(self.gap_start, self.start) if self.gap_start is not None else 0, accepted_tokens=accepted,
            proposed_tokens=batch_size * max(0, self.verify_width - 1) if self.verify_width is not None else 0,
        )


class CycleProfiler:
    """Counts speculative cycles, samples every `every`-th, emits a `SpecCycleSample` once the GPU is done.

    The caller brackets a cycle with `begin_cycle` / `end_cycle` (`abandon_cycle` when it raised), each phase with
    `begin_phase` / `end_phase`, and calls `end_forward` after the worker's other forward calls. `preallocate` events
    are created up front, so that sampled cycles only reuse events.
    """

    def __init__(self, *, every: int, events: EventSource, emit: Callable[[SpecCycleSample], None], max_pending: int = 64,
                 preallocate: int = 0) -> None:
        if every < 1:
            raise SpeclogsError(f"profiler sampling period every={every} must be >= 1", hint="pass --every N with N >= 1")
        self.every = every
        self.cycles_seen = self.samples_emitted = self.samples_dropped = 0
        self._events = events
        self._emit = emit
        self._max_pending = max_pending
        self._pending: collections.deque[_PendingCycle] = collections.deque()
        self._current: _PendingCycle | None = None  # the sampled cycle in progress: phases outside one cost nothing
        self._phase_starts: dict[str, Any] = {}
        self._free_events: list[Any] = [events.new_event() for _ in range(preallocate)]
        self._gap_mark: Any = None  # exit of the forward call before the next sampled cycle

    @property
    def sampling(self) -> bool:
        return self._current is not None

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def _take_event(self) -> Any:
        return self._free_events.pop() if self._free_events else self._events.new_event()

    def _record(self) -> Any:
        event = self._take_event()
        event.record()
        return event

    def _next_is_sampled(self) -> bool:
        return (self.cycles_seen + 1) % self.every == 0 and not self._events.is_capturing()

    def begin_cycle(self, batch_size: int) -> None:
        if self._pending:
            self.resolve_ready()
        sampled = self._next_is_sampled()
        self.cycles_seen += 1
        self._current = None
        if sampled:
            self._phase_starts = {}
            self._current = _PendingCycle(self.cycles_seen, batch_size, self._record(), gap_start=self._gap_mark)
            self._gap_mark = None

    def begin_phase(self, phase: str) -> None:
        if self._current is not None:
            self._phase_starts[phase] = self._record()

    def end_phase(self, phase: str) -> None:
        if self._current is not None and phase in self._phase_starts:
            self._current.phases[phase] = (self._phase_starts.pop(phase), self._record())

    def set_verify_width(self, draft_token_num: int) -> None:
        """Tokens per request in this cycle's verify tree, root included (SGLang's draft_token_num)."""
        if self._current is not None:
            self._current.verify_width = draft_token_num

    def end_cycle(self, accept_lens: Any) -> None:
        """Close the cycle; `accept_lens` is SGLang's per-request device tensor (bonus included)."""
        sample, self._current = self._current, None
        if sample is not None:
            sample.end = self._record()
            if accept_lens is not None:
                sample.accept_lens_host = self._events.copy_to_host(accept_lens)
                sample.host_copy_done = self._record()
            self._pending.append(sample)
            while len(self._pending) > self._max_pending:
                self._free_events += self._pending.popleft().all_events()
                self.samples_dropped += 1
        self.end_forward()

    def end_forward(self) -> None:
        """A forward call of the worker returned: mark its exit when the next cycle is sampled."""
        if self._next_is_sampled():
            if self._gap_mark is None:
                self._gap_mark = self._take_event()
            self._gap_mark.record()  # a later call before the sampled cycle re-records it

    def abandon_cycle(self) -> None:
        if self._current is not None:
            self._free_events += self._current.all_events() + list(self._phase_starts.values())
        self._current, self._phase_starts = None, {}

    def resolve_ready(self) -> list[SpecCycleSample]:
        """Emit every leading pending sample whose events have all completed; never waits."""
        resolved = []
        while self._pending:
            events = self._pending[0].all_events()
            if not all(event.query() for event in events):
                break
            result = self._pending.popleft().resolve()
            self._free_events += events
            if result is None:
                self.samples_dropped += 1
            else:
                self.samples_emitted += 1
                resolved.append(result)
        for result in resolved:  # emitted after the bookkeeping: a slow logger delays nothing above
            self._emit(result)
        return resolved
