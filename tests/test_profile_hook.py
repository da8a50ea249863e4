"""Fakes for the profiler tests: a fake GPU and a fake SGLang tree, written into tmp_path.

The fake worker module has SGLang 0.5.14's class and method layout (read from the real
sglang/srt/speculative/eagle_worker_v2.py): EAGLEWorkerV2.__init__(server_args, gpu_id, tp_rank, …),
forward_batch_generation(batch, on_publish=None), verify(batch); EagleDraftWorker.draft(batch),
_draft_extend_for_decode(batch, batch_result). The fake eagle_worker module has 0.5.9's overlap-off
EAGLEWorker, which the profiler does not wrap. The hook reads these files' source, so other layouts are source edits (`LAYOUTS`).
"""

from pathlib import Path

FAKE_FILES = {
    'fake_gpu.py': r'''"""A stand-in GPU for the profiler tests: a stream whose work completes only when told to.

`launch(ms)` enqueues work of that duration; `Event.record()` marks the stream position;
`complete_all()` makes everything launched so far done (the test's "GPU catches up").
Reading an event or a host copy before its work completed raises `WouldBlock`: the profiler
must never do that, and `synchronize()` raises too, so a profiler that waits fails loudly.
"""

from __future__ import annotations


class WouldBlock(AssertionError):
    pass


class FakeStream:
    def __init__(self) -> None:
        self.enqueued_ms = 0.0  # stream time at the end of the last launched work
        self.completed_ms = 0.0  # stream time up to which work has finished

    def launch(self, duration_ms: float) -> None:
        self.enqueued_ms += duration_ms

    def complete_all(self) -> None:
        self.completed_ms = self.enqueued_ms


STREAM = FakeStream()


class FakeEvent:
    def __init__(self) -> None:
        self.at_ms: float | None = None

    def record(self) -> None:
        self.at_ms = STREAM.enqueued_ms

    def query(self) -> bool:
        return self.at_ms is not None and STREAM.completed_ms >= self.at_ms

    def elapsed_time(self, end_event: "FakeEvent") -> float:
        if not (self.query() and end_event.query()):
            raise WouldBlock("elapsed_time() on an event the GPU has not reached")
        return end_event.at_ms - self.at_ms

    def synchronize(self) -> None:
        raise WouldBlock("the profiler synchronised on an event")


class FakeHostTensor:
    def __init__(self, values: list[int], ready_at_ms: float) -> None:
        self._values = values
        self._ready_at_ms = ready_at_ms

    def tolist(self) -> list[int]:
        if STREAM.completed_ms < self._ready_at_ms:
            raise WouldBlock("read a host copy before the copy completed")
        return list(self._values)


class FakeDeviceTensor:
    def __init__(self, values: list[int]) -> None:
        self._values = values

    def __len__(self) -> int:
        return len(self._values)

    def to(self, device: str, non_blocking: bool = False) -> FakeHostTensor:
        if device != "cpu" or not non_blocking:
            raise WouldBlock("a blocking device-to-host copy")
        STREAM.launch(0.001)
        return FakeHostTensor(self._values, STREAM.enqueued_ms)


class FakeEventSource:
    def new_event(self) -> FakeEvent:
        return FakeEvent()

    def is_capturing(self) -> bool:
        return False

    def copy_to_host(self, tensor: FakeDeviceTensor) -> FakeHostTensor:
        return tensor.to("cpu", non_blocking=True)


class BrokenEventSource(FakeEventSource):
    """An event source that fails like a CUDA driver error would."""

    def new_event(self) -> FakeEvent:
        raise RuntimeError("CUDA error: fake driver failure in cudaEventCreate")
''',
    'fake_server.py': r'''"""A fake SGLang server process: one scheduler, a prefill, then decode cycles; prints a summary."""

import argparse
import json
import logging

import fake_gpu

parser = argparse.ArgumentParser()
parser.add_argument("--algorithm", default="EAGLE3")
parser.add_argument("--tp-rank", type=int, default=0)
parser.add_argument("--cycles", type=int, default=64)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--stall-until", type=int, default=0, help="GPU completes nothing before this cycle")
parser.add_argument("--events", default="fake", choices=["fake", "broken"])
args = parser.parse_args()

logging.basicConfig(level=logging.INFO, format=f"[2026-01-01 00:00:00 TP{args.tp_rank}] %(message)s", force=True)
log = logging.getLogger("fake_server")

from speclogs.profile import hook  # noqa: E402  (installed by sitecustomize, not here)

state = hook.current()
if state is not None:
    state.event_source_factory = fake_gpu.BrokenEventSource if args.events == "broken" else fake_gpu.FakeEventSource

from sglang.srt.managers.scheduler import Scheduler, ServerArgs  # noqa: E402


class Mode:
    def __init__(self, name):
        self.name = name

    def is_extend(self):
        return self.name == "extend"

    def is_idle(self):
        return self.name == "idle"


class Batch:
    def __init__(self, mode, batch_size):
        self.forward_mode = Mode(mode)
        self.is_extend_in_batch = False
        self.seq_lens = [10] * batch_size
        self.spec_info = None


scheduler = Scheduler(ServerArgs(None if args.algorithm == "none" else args.algorithm), None, 0, args.tp_rank)
worker = scheduler.model_worker
summary = {"hook_installed": state is not None, "decode_cycles": 0, "errors_seen": [], "same_object": []}
if worker is not None and args.algorithm.startswith("EAGLE3"):
    worker.forward_batch_generation(Batch("extend", args.batch_size))
    for cycle in range(1, args.cycles + 1):
        if cycle > args.stall_until:
            fake_gpu.STREAM.complete_all()  # the GPU finished last cycle's work
        fake_gpu.STREAM.launch(0.5)  # the GPU idles between cycles while the host schedules
        try:
            worker.forward_batch_generation(Batch("decode", args.batch_size))
        except Exception as error:  # the fake scheduler reports what SGLang raised
            import sglang.srt.speculative.eagle_worker_v2 as module

            summary["errors_seen"].append(f"{type(error).__name__}: {error}")
            summary["same_object"].append(bool(module.LAST_RAISED) and error is module.LAST_RAISED[-1])
        summary["decode_cycles"] += 1
        log.info("fake cycle %d done", cycle)
    worker.forward_batch_generation(Batch("idle", 0))
if state is not None and state.profiler is not None:
    summary["pending"] = state.profiler.pending_count
print("SUMMARY " + json.dumps(summary), flush=True)
''',
    'sglang/srt/speculative/eagle_worker_v2.py': r'''"""Fake sglang.srt.speculative.eagle_worker_v2 with SGLang 0.5.14's method layout."""

import os

from fake_gpu import STREAM, FakeDeviceTensor

FAIL_AT_CYCLE = int(os.environ.get("FAKE_FAIL_AT_CYCLE", "0"))
ACCEPT_LENS = [3, 1, 4, 2]  # per request, bonus token included: accepted drafts = 2+0+3+1 = 6
LAST_RAISED = []


class FakeCudaError(RuntimeError):
    pass


class VerifyInput:
    def __init__(self, draft_token_num):
        self.draft_token_num = draft_token_num


class Result:
    def __init__(self, accept_lens):
        self.accept_lens = accept_lens
        self.num_correct_drafts_per_req_cpu = None


class EagleDraftWorker:
    def __init__(self, tp_rank):
        self.tp_rank = tp_rank

    def draft(self, batch):
        STREAM.launch(0.4)
        return VerifyInput(draft_token_num=4)

    def _draft_extend_for_decode(self, batch, batch_result):
        STREAM.launch(0.3)

    def _draft_extend_for_prefill(self, batch, hidden, next_ids, mm=None):
        STREAM.launch(2.0)


class EAGLEWorkerV2:
    def __init__(self, server_args, gpu_id, tp_rank, dp_rank=None):
        self.tp_rank = tp_rank
        self._draft_worker = EagleDraftWorker(tp_rank)
        self.cycles = 0

    @property
    def draft_worker(self):
        return self._draft_worker

    def forward_batch_generation(self, batch, on_publish=None):
        if batch.forward_mode.is_extend():
            STREAM.launch(5.0)
            self.draft_worker._draft_extend_for_prefill(batch, None, None)
            return Result(accept_lens=None)
        self.cycles += 1
        STREAM.launch(0.15)  # work outside the phases
        batch.spec_info = self.draft_worker.draft(batch)
        out = self.verify(batch)
        self.draft_worker._draft_extend_for_decode(batch, out)
        return out

    def verify(self, batch):
        if self.cycles == FAIL_AT_CYCLE:
            error = FakeCudaError("CUDA error: an illegal memory access was encountered")
            LAST_RAISED.append(error)
            raise error
        STREAM.launch(1.2)
        return Result(accept_lens=FakeDeviceTensor(ACCEPT_LENS[: len(batch.seq_lens)]))

''',
    'sglang/srt/managers/scheduler.py': r'''"""Fake sglang.srt.managers.scheduler: builds the speculative worker the way 0.5.14 does."""

import importlib


class ServerArgs:
    def __init__(self, speculative_algorithm):
        self.speculative_algorithm = speculative_algorithm


class Scheduler:
    def __init__(self, server_args, port_args, gpu_id, tp_rank, moe_ep_rank=0):
        self.server_args = server_args
        self.draft_worker = None
        if server_args.speculative_algorithm == "EAGLE3":
            module = importlib.import_module("sglang.srt.speculative.eagle_worker_v2")
            self.draft_worker = module.EAGLEWorkerV2(server_args, gpu_id, tp_rank)
        elif server_args.speculative_algorithm == "EAGLE3-overlap-off":  # 0.5.9 … 0.5.12
            module = importlib.import_module("sglang.srt.speculative.eagle_worker")
            self.draft_worker = module.EAGLEWorker(server_args, gpu_id, tp_rank)
        elif server_args.speculative_algorithm == "NGRAM":
            self.draft_worker = NGRAMWorker()
        self.model_worker = self.draft_worker


class NGRAMWorker:
    def forward_batch_generation(self, batch):
        return None
''',
    'sglang/srt/managers/utils.py': r'''import dataclasses


@dataclasses.dataclass
class GenerationBatchResult:
    accept_lens: object = None
    copy_done: object = None
    num_accepted_tokens: int = 0
''',
    'sglang/srt/speculative/eagle_worker.py': r'''"""Fake sglang.srt.speculative.eagle_worker: SGLang 0.5.9's worker with overlap off.

Its own draft model runner (a TpModelWorker), verify(batch, spec_info), and the batch's accepted
draft tokens as a host count in the result (bonus excluded).
"""

from fake_gpu import STREAM

from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.speculative.eagle_info import EagleVerifyInput


class EAGLEWorker(TpModelWorker):
    def __init__(self, server_args, gpu_id, tp_rank, dp_rank=None):
        super().__init__(server_args, gpu_id, tp_rank)

    def forward_batch_generation(self, batch):
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
            STREAM.launch(5.0)
            return GenerationBatchResult()
        STREAM.launch(0.15)  # work outside the phases
        spec_info = self.draft(batch)
        self.verify(batch, spec_info)
        self.forward_draft_extend_after_decode(batch)
        return GenerationBatchResult(num_accepted_tokens=6)

    def draft(self, batch):
        STREAM.launch(0.4)
        return EagleVerifyInput(draft_token_num=4)

    def verify(self, batch, spec_info):
        STREAM.launch(1.2)

    def forward_draft_extend_after_decode(self, batch):
        STREAM.launch(0.3)
''',
    'sglang/srt/managers/tp_worker.py': r'''class TpModelWorker:
    def __init__(self, server_args, gpu_id, tp_rank):
        self.tp_rank = tp_rank

    def forward_batch_generation(self, model_worker_batch):
        return None
''',
    'sglang/srt/managers/schedule_batch.py': r'''import dataclasses


@dataclasses.dataclass
class ScheduleBatch:
    seq_lens: object = None
    forward_mode: object = None
    is_extend_in_batch: bool = False
    spec_info: object = None
''',
    'sglang/srt/speculative/eagle_info.py': r'''import dataclasses


@dataclasses.dataclass
class EagleVerifyInput:
    draft_token_num: int
''',
    'sglang/srt/model_executor/forward_batch_info.py': r'''import enum


class ForwardMode(enum.IntEnum):
    EXTEND = 1
    DECODE = 2
    IDLE = 3

    def is_extend(self):
        return self == ForwardMode.EXTEND

    def is_idle(self):
        return self == ForwardMode.IDLE
''',
}


# Source edits that turn the fake 0.5.14 tree into another layout (the hook reads the source).
LAYOUTS = {
    "0.5.14": {},
    "changed-signature": {  # a future SGLang whose verify takes other arguments
        "sglang/srt/speculative/eagle_worker_v2.py": (
            "    def verify(self, batch):\n",
            "    def verify(self, schedule_batch, spec_info=None):\n        batch = schedule_batch\n",
        ),
    },
}


def write_fake_sglang(root: Path, layout: str = "0.5.14") -> Path:
    """Write the fake SGLang package, fake GPU and fake server under `root`; return `root`."""
    packages = ("sglang", "sglang/srt", "sglang/srt/speculative", "sglang/srt/managers", "sglang/srt/model_executor")
    for package in packages:
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "sglang/version.py").write_text('__version__ = "0.5.14"\n')
    for relative, text in FAKE_FILES.items():
        if relative in LAYOUTS[layout]:
            old, new = LAYOUTS[layout][relative]
            assert old in text, f"layout {layout}: {old!r} not in {relative}"
            text = text.replace(old, new)
        (root / relative).write_text(text)
    return root


# -- the tests ---------------------------------------------------------------------------------
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
LINE = re.compile(
    r"^\[2026-01-01 00:00:00 TP0\] speclogs spec_cycle cycle=(\d+) bs=(\d+) "
    r"draft_ms=(\d+\.\d{3}) verify_ms=(\d+\.\d{3}) extend_ms=(\d+\.\d{3}) other_ms=(\d+\.\d{3}) "
    r"gap_ms=(\d+\.\d{3}) cycle_ms=(\d+\.\d{3}) accepted=(\d+) proposed=(\d+)$"
)


@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    return write_fake_sglang(tmp_path)


def run_profiled(
    root: Path, *server_args: str, every: int = 16, extra_env: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> tuple[list[str], dict]:
    """Start `python -m speclogs.profile --every N -- python fake_server.py …` for real."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECLOGS_", "FAKE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(SRC)])
    env.update(extra_env or {})
    server = command or [sys.executable, "fake_server.py"]
    completed = subprocess.run(
        [sys.executable, "-m", "speclogs.profile", "--every", str(every), "--", *server, *server_args],
        cwd=root, env=env, capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    summary_lines = [line for line in completed.stdout.splitlines() if line.startswith("SUMMARY ")]
    return completed.stderr.splitlines(), json.loads(summary_lines[-1][len("SUMMARY "):])


def speclogs_lines(log: list[str]) -> list[str]:
    """What the profiler wrote, in order (the fake server's own lines and the runtime line left out)."""
    return [line for line in log if "speclogs" in line and "profiler: runtime:" not in line]


def cycle_lines(log: list[str]) -> list[re.Match]:
    return [m for m in map(LINE.match, log) if m]


def test_profiled_server_logs_active_line_then_one_exact_line_per_sampled_cycle(fake_root):
    log, summary = run_profiled(fake_root, "--cycles", "64")
    runtime = [line for line in log if "profiler: runtime:" in line]
    log = speclogs_lines(log)

    assert runtime == ["[2026-01-01 00:00:00 TP0] speclogs profiler: runtime: worker=sglang.srt.speculative."
                       "eagle_worker_v2.EAGLEWorkerV2 algorithm=EAGLE3 captured_layers=- draft=-"]
    assert summary["hook_installed"] and summary["decode_cycles"] == 64
    assert log[0] == "[2026-01-01 00:00:00 TP0] speclogs profiler: active (EAGLEWorkerV2, every=16, sglang 0.5.14)"
    assert log[1] == (
        "[2026-01-01 00:00:00 TP0] speclogs spec_cycle cycle=16 bs=4 draft_ms=0.400 verify_ms=1.200 "
        "extend_ms=0.300 other_ms=0.150 gap_ms=0.500 cycle_ms=2.050 accepted=6 proposed=12"
    )
    # cycle 64 is still pending when the fake server exits: it would resolve on cycle 65
    assert [int(m[1]) for m in cycle_lines(log)] == [16, 32, 48]
    assert len(log) == 4


def test_sampling_period_comes_from_every(fake_root):
    log, _ = run_profiled(fake_root, "--cycles", "20", every=5)

    assert [int(m[1]) for m in cycle_lines(log)] == [5, 10, 15]


def test_phase_times_add_up_to_the_cycle_time(fake_root):
    log, _ = run_profiled(fake_root, "--cycles", "40", every=3)

    for m in cycle_lines(log):
        draft, verify, extend, other, gap, cycle = (float(m[i]) for i in range(3, 9))
        assert draft + verify + extend + other == pytest.approx(cycle, abs=1e-9)
        assert gap == 0.5  # the idle stream time between the previous call's exit and this entry


def test_gap_covers_the_idle_time_after_the_prefill_and_between_sampled_cycles(fake_root):
    log, _ = run_profiled(fake_root, "--cycles", "4", every=1)

    lines = cycle_lines(log)
    assert [int(m[1]) for m in lines] == [1, 2, 3]  # cycle 1 follows the prefill, 2 and 3 follow sampled cycles
    assert [m[7] for m in lines] == ["0.500"] * 3


def test_unfinished_gpu_work_is_not_waited_for_and_reported_once_done(fake_root):
    # The fake GPU completes nothing until cycle 40; reading an unfinished event or host copy, or
    # synchronising, raises in the fake. The server must run on, and the lines come later.
    log, summary = run_profiled(fake_root, "--cycles", "50", "--stall-until", "40")

    assert summary["decode_cycles"] == 50
    done_40 = log.index("[2026-01-01 00:00:00 TP0] fake cycle 40 done")
    lines = cycle_lines(log)
    assert [int(m[1]) for m in lines] == [16, 32, 48]
    assert all(log.index(m.string) > done_40 for m in lines[:2])


def test_an_error_raised_inside_a_phase_reaches_the_caller_unchanged(fake_root):
    log, summary = run_profiled(
        fake_root, "--cycles", "64", extra_env={"FAKE_FAIL_AT_CYCLE": "32"}
    )

    assert summary["errors_seen"] == ["FakeCudaError: CUDA error: an illegal memory access was encountered"]
    assert summary["same_object"] == [True]
    assert [int(m[1]) for m in cycle_lines(log)] == [16, 48]  # the failed cycle yields no line
    assert not any("disabled" in line for line in log)


def test_a_failing_profiler_disables_itself_with_one_warning_and_the_server_runs_on(fake_root):
    log, summary = run_profiled(fake_root, "--cycles", "64", "--events", "broken")

    assert summary["decode_cycles"] == 64 and summary["errors_seen"] == []
    disabled = [line for line in log if "speclogs profiler: disabled" in line]
    assert disabled == [
        "[2026-01-01 00:00:00 TP0] speclogs profiler: disabled: internal error in worker init: "
        "RuntimeError: CUDA error: fake driver failure in cudaEventCreate; the server continues "
        "without profiling"
    ]
    assert cycle_lines(log) == []


def test_an_unexpected_worker_layout_gives_one_warning_and_the_server_runs_normally(tmp_path):
    root = write_fake_sglang(tmp_path, layout="changed-signature")
    log, summary = run_profiled(root, "--cycles", "32")

    assert summary["decode_cycles"] == 32 and summary["errors_seen"] == []
    assert speclogs_lines(log) == [
        "[2026-01-01 00:00:00 TP0] speclogs profiler: disabled: sglang 0.5.14 EAGLEWorkerV2 does not "
        "have the expected layout: EAGLEWorkerV2.verify(schedule_batch, spec_info) does not start "
        "with (batch) or (model_worker_batch)"
    ]


def test_the_overlap_off_v1_worker_is_named_unsupported_and_runs_plain(fake_root):
    # 0.5.9's EAGLEWorker (--disable-overlap-schedule up to 0.5.12.post1)
    log, summary = run_profiled(fake_root, "--cycles", "64", "--algorithm", "EAGLE3-overlap-off")

    assert summary["decode_cycles"] == 64
    assert speclogs_lines(log) == [
        "[2026-01-01 00:00:00 TP0] speclogs profiler: disabled: speculative worker "
        "sglang.srt.speculative.eagle_worker.EAGLEWorker (speculative_algorithm=EAGLE3-overlap-off) is not "
        "supported; supported: EAGLEWorkerV2, MultiLayerEagleWorkerV2 and their subclasses that keep the "
        "wrapped cycle and verify (docs/profiling.md lists the SGLang releases)"
    ]


@pytest.mark.parametrize(
    ("algorithm", "reason"),
    [
        ("none", "server started without speculative decoding (speculative_algorithm=None)"),
        (
            "NGRAM",
            "speculative worker sglang.srt.managers.scheduler.NGRAMWorker "
            "(speculative_algorithm=NGRAM) is not supported; supported: EAGLEWorkerV2, "
            "MultiLayerEagleWorkerV2 and their subclasses that keep the wrapped cycle and verify "
            "(docs/profiling.md lists the SGLang releases)",
        ),
    ],
)
def test_a_server_without_an_eagle_worker_gets_one_line_and_nothing_else(fake_root, algorithm, reason):
    log, summary = run_profiled(fake_root, "--algorithm", algorithm)

    assert summary["hook_installed"]
    assert speclogs_lines(log) == [f"[2026-01-01 00:00:00 TP0] speclogs profiler: disabled: {reason}"]


def test_only_tp_rank_0_logs(fake_root):
    log, summary = run_profiled(fake_root, "--cycles", "64", "--tp-rank", "1")

    assert summary["decode_cycles"] == 64
    assert speclogs_lines(log) == []


def test_works_when_the_server_is_started_with_python3_dash_m(fake_root):
    (fake_root / "launch_server.py").write_text((fake_root / "fake_server.py").read_text())
    (fake_root / "sglang" / "launch_server.py").write_text((fake_root / "fake_server.py").read_text())
    log, summary = run_profiled(
        fake_root, "--cycles", "20", command=[sys.executable, "-m", "sglang.launch_server"]
    )

    assert summary["decode_cycles"] == 20
    assert [int(m[1]) for m in cycle_lines(log)] == [16]


def test_without_the_wrapper_nothing_is_installed(fake_root):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECLOGS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(fake_root), str(SRC)])
    completed = subprocess.run(
        [sys.executable, "fake_server.py", "--cycles", "32"],
        cwd=fake_root, env=env, capture_output=True, text=True, timeout=60,
    )

    assert completed.returncode == 0, completed.stderr
    assert "speclogs" not in completed.stderr
    assert '"hook_installed": false' in completed.stdout


def test_bad_usage_exits_2_with_a_message():
    env = dict(os.environ, PYTHONPATH=str(SRC))
    for argv, message in [([], "no command given"), (["--every", "0", "--", "true"], "--every needs a positive integer")]:
        completed = subprocess.run(
            [sys.executable, "-m", "speclogs.profile", *argv], env=env, capture_output=True, text=True
        )
        assert completed.returncode == 2
        assert f"Error: {message}" in completed.stderr


def test_a_missing_program_exits_1_with_a_message():
    env = dict(os.environ, PYTHONPATH=str(SRC))
    completed = subprocess.run(
        [sys.executable, "-m", "speclogs.profile", "--", "no-such-program-xyz"],
        env=env, capture_output=True, text=True,
    )

    assert completed.returncode == 1
    assert "Error: cannot run 'no-such-program-xyz'" in completed.stderr


def run_selfcheck(root: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECLOGS_", "FAKE_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(SRC)])
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "speclogs.profile.selfcheck"],
        cwd=root, env=env, capture_output=True, text=True, timeout=60,
    )


def test_selfcheck_passes_on_the_0_5_14_layout(fake_root):
    completed = run_selfcheck(fake_root)

    assert completed.returncode == 0, completed.stdout
    lines = completed.stdout.splitlines()
    assert lines[0] == "sglang 0.5.14: verified on a GPU"
    assert lines[-1] == "selfcheck: OK"
    assert "OK   EAGLEWorkerV2 layout: as the hook expects" in lines
    assert (
        "OK   EAGLEWorkerV2 wrapped: EAGLEWorkerV2.__init__, EAGLEWorkerV2.forward_batch_generation, "
        "EagleDraftWorker.draft, EAGLEWorkerV2.verify, EagleDraftWorker._draft_extend_for_decode"
    ) in lines
    assert "OK   Scheduler hook: Scheduler.__init__ wrapped (TP rank from __init__ argument tp_rank)" in lines


def test_selfcheck_names_what_does_not_match(tmp_path):
    completed = run_selfcheck(write_fake_sglang(tmp_path, layout="changed-signature"))

    assert completed.returncode == 1
    assert (
        "FAIL EAGLEWorkerV2 layout: EAGLEWorkerV2.verify(schedule_batch, spec_info) "
        "does not start with (batch) or (model_worker_batch)"
    ) in completed.stdout.splitlines()
    assert completed.stdout.splitlines()[-1] == "selfcheck: FAILED (EAGLEWorkerV2 layout)"


def test_a_sitecustomize_already_on_the_path_still_runs(fake_root, tmp_path):
    user_site = tmp_path / "user_site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECLOGS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(user_site), str(fake_root), str(SRC)])
    completed = subprocess.run(
        [sys.executable, "-m", "speclogs.profile", "--", sys.executable, "-c",
         "import os; from speclogs.profile import hook; "
         "print(os.environ.get('USER_SITECUSTOMIZE_RAN'), hook.current() is not None)"],
        env=env, capture_output=True, text=True, timeout=60,
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["yes", "True"]


def test_the_environment_puts_the_hook_first_and_keeps_the_callers_path():
    from speclogs.profile import HOOK_DIR, profiled_environment

    env = profiled_environment({"PYTHONPATH": "/opt/sglang-site", "HOME": "/root"}, every=8)

    assert env["SPECLOGS_PROFILE"] == "1" and env["SPECLOGS_PROFILE_EVERY"] == "8"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(HOOK_DIR), str(SRC), "/opt/sglang-site"]
    assert env["HOME"] == "/root"


def test_runtime_facts_name_the_worker_the_algorithm_and_the_captured_layers():
    from types import SimpleNamespace

    from speclogs.profile.hook import runtime_facts

    class EAGLEWorkerV2:
        draft_model_runner = SimpleNamespace(model=type("LlamaForCausalLMEagle3", (), {})())

    target = SimpleNamespace(capture_aux_hidden_states=True, model=SimpleNamespace(layers_to_capture=[3, 9, 15]))
    scheduler = SimpleNamespace(draft_worker=EAGLEWorkerV2(), spec_algorithm=SimpleNamespace(name="EAGLE3"),
                                tp_worker=SimpleNamespace(model_runner=SimpleNamespace(model=target)))
    facts = runtime_facts(scheduler)
    assert facts["worker"].endswith(".EAGLEWorkerV2")
    assert (facts["algorithm"], facts["captured_layers"], facts["draft"]) == ("EAGLE3", "3,9,15", "LlamaForCausalLMEagle3")
    target.capture_aux_hidden_states = False        # the EAGLE flag: the target captures nothing
    assert runtime_facts(scheduler)["captured_layers"] == "-"
