"""CycleProfiler in-process, with a tiny event stand-in (the subprocess tests are in test_profile_hook.py)."""

import pytest

from speclogs.errors import SpeclogsError
from speclogs.profile.timing import CycleProfiler, SpecCycleSample


class Clock:
    """A stream clock: work advances `enqueued_ms`; the GPU has finished up to `done_ms`."""

    def __init__(self):
        self.enqueued_ms = 0.0
        self.done_ms = 0.0
        self.capturing = False


class Event:
    def __init__(self, clock):
        self.clock, self.at_ms = clock, None

    def record(self):
        self.at_ms = self.clock.enqueued_ms

    def query(self):
        return self.at_ms is not None and self.clock.done_ms >= self.at_ms

    def elapsed_time(self, end):
        assert self.query() and end.query(), "elapsed_time on an unfinished event"
        return end.at_ms - self.at_ms


class HostCopy:
    def __init__(self, values):
        self.values = values

    def tolist(self):
        return list(self.values)


class Source:
    def __init__(self, clock):
        self.clock = clock

    def new_event(self):
        return Event(self.clock)

    def is_capturing(self):
        return self.clock.capturing

    def copy_to_host(self, values):
        return HostCopy(values)


def run_cycle(profiler, clock, *, draft_ms=0.4, verify_ms=1.2, extend_ms=0.3, other_ms=0.1, accept_lens=(2, 3)):
    profiler.begin_cycle(len(accept_lens))
    clock.enqueued_ms += other_ms
    for phase, ms in (("draft", draft_ms), ("verify", verify_ms), ("extend", extend_ms)):
        if phase == "verify":
            profiler.set_verify_width(4)
        profiler.begin_phase(phase)
        clock.enqueued_ms += ms
        profiler.end_phase(phase)
    profiler.end_cycle(list(accept_lens))


@pytest.fixture
def clock():
    return Clock()


def make_profiler(clock, every=1, **kwargs):
    emitted = []
    profiler = CycleProfiler(every=every, events=Source(clock), emit=emitted.append, **kwargs)
    return profiler, emitted


def test_line_format_is_exact():
    sample = SpecCycleSample(1200, 1, 412, 1203, 301, 2066, 250, 1250, gap_us=1100)

    assert sample.to_line() == (
        "speclogs spec_cycle cycle=1200 bs=1 draft_ms=0.412 verify_ms=1.203 extend_ms=0.301 "
        "other_ms=0.150 gap_ms=1.100 cycle_ms=2.066 accepted=250 proposed=1250"
    )
    assert SpecCycleSample(1, 2, 12, 21345, 0, 21400, 0, 0).to_line().endswith(
        "draft_ms=0.012 verify_ms=21.345 extend_ms=0.000 other_ms=0.043 gap_ms=0.000 cycle_ms=21.400 accepted=0 proposed=0"
    )


def test_a_sample_is_emitted_only_after_the_gpu_finished_it(clock):
    profiler, emitted = make_profiler(clock)
    run_cycle(profiler, clock)
    run_cycle(profiler, clock)  # GPU still behind: nothing resolved, nothing waited for

    assert emitted == [] and profiler.pending_count == 2
    clock.done_ms = clock.enqueued_ms
    run_cycle(profiler, clock)

    assert [s.cycle for s in emitted] == [1, 2]
    assert emitted[0].to_line() == (
        "speclogs spec_cycle cycle=1 bs=2 draft_ms=0.400 verify_ms=1.200 extend_ms=0.300 "
        "other_ms=0.100 gap_ms=0.000 cycle_ms=2.000 accepted=3 proposed=6"
    )


def test_only_every_nth_cycle_is_sampled(clock):
    profiler, emitted = make_profiler(clock, every=4)
    for _ in range(13):
        run_cycle(profiler, clock)
        clock.done_ms = clock.enqueued_ms

    assert [s.cycle for s in emitted] == [4, 8, 12]


def test_an_abandoned_cycle_yields_nothing_and_the_next_sample_is_clean(clock):
    profiler, emitted = make_profiler(clock)
    profiler.begin_cycle(2)
    profiler.begin_phase("draft")
    profiler.abandon_cycle()  # the phase raised
    run_cycle(profiler, clock, draft_ms=0.5)
    clock.done_ms = clock.enqueued_ms
    profiler.resolve_ready()

    assert [(s.cycle, s.draft_us) for s in emitted] == [(2, 500)]


def test_no_events_are_recorded_during_cuda_graph_capture(clock):
    profiler, emitted = make_profiler(clock)
    clock.capturing = True
    run_cycle(profiler, clock)
    clock.capturing = False
    clock.done_ms = clock.enqueued_ms
    profiler.resolve_ready()

    assert emitted == [] and profiler.pending_count == 0


def test_pending_samples_are_bounded_when_the_gpu_never_catches_up(clock):
    profiler, emitted = make_profiler(clock, max_pending=3)
    for _ in range(10):
        run_cycle(profiler, clock)

    assert profiler.pending_count == 3 and profiler.samples_dropped == 7


def test_missing_phases_count_as_zero_and_other_is_never_negative(clock):
    profiler, emitted = make_profiler(clock)
    profiler.begin_cycle(1)
    profiler.begin_phase("verify")
    clock.enqueued_ms += 1.0
    profiler.end_phase("verify")
    profiler.end_cycle([1])
    clock.done_ms = clock.enqueued_ms
    profiler.resolve_ready()

    (sample,) = emitted
    assert (sample.draft_us, sample.verify_us, sample.extend_us, sample.other_us) == (0, 1000, 0, 0)
    assert (sample.accepted_tokens, sample.proposed_tokens) == (0, 0)


def test_a_cycle_without_accept_lens_cannot_make_a_line_and_is_dropped(clock):
    profiler, emitted = make_profiler(clock)
    profiler.begin_cycle(3)
    profiler.end_cycle(None)
    clock.done_ms = clock.enqueued_ms
    profiler.resolve_ready()

    assert emitted == []
    assert profiler.samples_dropped == 1


def test_every_must_be_positive(clock):
    with pytest.raises(SpeclogsError, match="every=0"):
        make_profiler(clock, every=0)


def test_gap_is_the_stream_time_between_the_previous_forward_exit_and_the_sampled_entry(clock):
    profiler, emitted = make_profiler(clock, every=3)
    clock.enqueued_ms += 5.0  # a prefill forward call …
    profiler.end_forward()  # … after which cycle 1 is not sampled: no mark
    for idle_ms in (0.7, 0.8, 0.9, 1.0, 1.1, 1.2):
        clock.enqueued_ms += idle_ms  # the GPU idles while the host prepares the next cycle
        run_cycle(profiler, clock)
    clock.done_ms = clock.enqueued_ms
    profiler.resolve_ready()

    assert [(s.cycle, s.gap_us, s.cycle_us) for s in emitted] == [(3, 900, 2000), (6, 1200, 2000)]


def test_a_prefill_right_before_a_sampled_cycle_starts_its_gap(clock):
    profiler, emitted = make_profiler(clock, every=2)
    run_cycle(profiler, clock)
    clock.enqueued_ms += 5.0  # a prefill between cycle 1 and cycle 2
    profiler.end_forward()
    clock.enqueued_ms += 0.25
    run_cycle(profiler, clock)
    clock.done_ms = clock.enqueued_ms
    profiler.resolve_ready()

    assert [(s.cycle, s.gap_us) for s in emitted] == [(2, 250)]


def test_events_are_reused_once_their_sample_is_resolved(clock):
    created = []

    class CountingSource(Source):
        def new_event(self):
            created.append(1)
            return super().new_event()

    profiler = CycleProfiler(every=2, events=CountingSource(clock), emit=lambda sample: None)
    for _ in range(40):
        run_cycle(profiler, clock)
        clock.done_ms = clock.enqueued_ms

    assert profiler.samples_emitted == 19 and len(created) <= 2 * 11
