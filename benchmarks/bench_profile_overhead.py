"""Host-side cost of the EAGLE-worker profiler per decode cycle (the part that can slow a host-bound server).

Builds a worker module with SGLang 0.5.14's method layout (EAGLEWorkerV2 / EagleDraftWorker, methods that do
no work) from source, wraps it with the real hook (`hook.patch_worker_module`, which reads that source), and
times `forward_batch_generation` plain and wrapped. The difference is what the wrappers, the profiler, its events and
its log lines cost the host per cycle.
Log lines go through a real logging handler into os.devnull.

    PYTHONPATH=src python benchmarks/bench_profile_overhead.py            # stand-in events (no torch needed)
    PYTHONPATH=src python benchmarks/bench_profile_overhead.py --cuda     # real torch.cuda events (GPU box)

Prints µs per cycle for --every 1 / 16 / 64; nothing is asserted (speed is measured here, not in tests).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import types

from speclogs.profile import hook
from speclogs.profile.targets import WORKER_TARGETS, SourceIndex

EAGLE_V2 = next(t for t in WORKER_TARGETS if t.key == "eagle_v2")


class StandInEvent:
    """What the profiler needs of a CUDA event, completing at once (the GPU is never behind)."""

    clock = 0.0

    def __init__(self) -> None:
        self.at_ms = 0.0

    def record(self) -> None:
        StandInEvent.clock += 0.001
        self.at_ms = StandInEvent.clock

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: "StandInEvent") -> float:
        return end_event.at_ms - self.at_ms


class StandInHost:
    def __init__(self, values: list[int]) -> None:
        self.values = values

    def tolist(self) -> list[int]:
        return self.values


class StandInEventSource:
    def new_event(self) -> StandInEvent:
        return StandInEvent()

    def is_capturing(self) -> bool:
        return False

    def copy_to_host(self, tensor: list[int]) -> StandInHost:
        return StandInHost(tensor)


class Mode:
    def is_extend(self) -> bool:
        return False

    def is_idle(self) -> bool:
        return False


# The worker module and the classes whose members the hook's check reads, as source (the check reads source).
BENCH_SOURCES = {
    "sglang.srt.speculative.eagle_worker_v2": """
class VerifyInput:
    draft_token_num = 6


class Result:
    def __init__(self, accept_lens):
        self.accept_lens = accept_lens


class EagleDraftWorker:
    def draft(self, batch):
        return VerifyInput()

    def _draft_extend_for_decode(self, batch, batch_result):
        return None


class EAGLEWorkerV2:
    def __init__(self, server_args, gpu_id, tp_rank, dp_rank=None):
        self.tp_rank = tp_rank
        self.draft_worker = EagleDraftWorker()

    def forward_batch_generation(self, batch, on_publish=None):
        batch.spec_info = self.draft_worker.draft(batch)
        out = self.verify(batch)
        self.draft_worker._draft_extend_for_decode(batch, out)
        return out

    def verify(self, batch):
        return Result(ACCEPT_LENS)
""",
    "sglang.srt.managers.schedule_batch": "class ScheduleBatch:\n    forward_mode: object\n    seq_lens: object\n"
    "    spec_info: object\n    is_extend_in_batch: bool\n",
    "sglang.srt.model_executor.forward_batch_info": "class ForwardMode:\n    def is_extend(self): ...\n"
    "    def is_idle(self): ...\n",
    "sglang.srt.speculative.eagle_info": "class EagleVerifyInput:\n    draft_token_num: int\n",
    "sglang.srt.managers.utils": "class GenerationBatchResult:\n    accept_lens: object\n",
}


def build_worker_module(accept_lens: object) -> types.ModuleType:
    """A fresh eagle_worker_v2 stand-in with 0.5.14's method names and parameters."""
    module = types.ModuleType("sglang.srt.speculative.eagle_worker_v2")
    module.ACCEPT_LENS = accept_lens
    exec(BENCH_SOURCES[module.__name__], module.__dict__)
    return module


def time_cycles(worker: object, batch: object, cycles: int, sync: object) -> float:
    """Seconds per cycle, best of 5 rounds."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(cycles):
            worker.forward_batch_generation(batch)
        best = min(best, (time.perf_counter() - started) / cycles)
        sync()
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", action="store_true", help="real torch.cuda events and a CUDA accept_lens tensor")
    parser.add_argument("--cycles", type=int, default=0, help="cycles per round (default 200000, 20000 with --cuda)")
    args = parser.parse_args()
    cycles = args.cycles or (20_000 if args.cuda else 200_000)

    sink = logging.FileHandler(os.devnull)
    sink.setFormatter(logging.Formatter("[%(asctime)s TP0] %(message)s"))
    logger = logging.getLogger("sglang.speclogs.profile")
    logger.handlers, logger.propagate = [sink], False
    logger.setLevel(logging.INFO)

    if args.cuda:
        import torch

        from speclogs.profile.timing import CudaEventSource

        accept_lens = torch.tensor([2], device="cuda", dtype=torch.int32)
        seq_lens = torch.tensor([100], device="cuda", dtype=torch.int64)
        source_factory, sync, label = CudaEventSource, torch.cuda.synchronize, "torch.cuda events"
    else:
        accept_lens, seq_lens = [2], [100]
        source_factory, sync, label = StandInEventSource, (lambda: None), "stand-in events"
    batch = types.SimpleNamespace(forward_mode=Mode(), is_extend_in_batch=False, seq_lens=seq_lens, spec_info=None)

    plain = build_worker_module(accept_lens).EAGLEWorkerV2(None, 0, 0)
    base_s = time_cycles(plain, batch, cycles, sync)
    print(f"profiler host overhead per decode cycle ({label}, {cycles} cycles a round, best of 5)")
    print(f"  plain forward_batch_generation (empty methods): {base_s * 1e6:7.2f} us/cycle")
    for every in (1, 16, 64):
        state = hook.Instrumentation(
            every=every, event_source_factory=source_factory, sources=SourceIndex(BENCH_SOURCES.get)
        )
        module = build_worker_module(accept_lens)
        hook.patch_worker_module(state, EAGLE_V2, module)
        if state.layout_problems:
            raise SystemExit(f"the hook refused the bench module: {state.layout_problems}")
        worker = module.EAGLEWorkerV2(None, 0, 0)  # tp_rank 0: starts the profiler, logs `active`
        wrapped_s = time_cycles(worker, batch, cycles, sync)
        profiler = state.profiler
        print(
            f"  --every {every:<3} wrapped: {wrapped_s * 1e6:7.2f} us/cycle, overhead "
            f"{(wrapped_s - base_s) * 1e6:6.2f} us/cycle "
            f"({profiler.samples_emitted} lines, {profiler.samples_dropped} dropped, "
            f"disabled: {state.disabled_reason})"
        )
    print("  (against ~4 ms per cycle for EAGLE-3 bs=1 on H200 TP 2: 40 us/cycle would be 1 %)")


if __name__ == "__main__":
    main()
