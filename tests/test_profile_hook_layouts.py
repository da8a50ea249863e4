"""The hook on worker layouts other than 0.5.14's, in-process, with small fake SGLang modules.

Each fake module is executed from its source and registered in sys.modules for the test only; the
hook reads the same source (through `Instrumentation(sources=…)`) for its check, as it reads the
installed SGLang's in a server. A fake clock stands in for the GPU: `gpu.launch(ms)` is work on
the stream, events record the stream time and are complete at once.
"""

import logging
import sys
import textwrap
import types

import pytest

from speclogs.profile import hook, targets
from speclogs.profile.targets import SourceIndex

EAGLE_V2, _ = targets.WORKER_TARGETS


class Stream:
    def __init__(self):
        self.now_ms = 0.0

    def launch(self, ms):
        self.now_ms += ms


class Event:
    def __init__(self, stream):
        self.stream, self.at_ms = stream, None

    def record(self):
        self.at_ms = self.stream.now_ms

    def query(self):
        return True

    def elapsed_time(self, end):
        return end.at_ms - self.at_ms


class HostCopy:
    def __init__(self, values):
        self.values = values

    def tolist(self):
        return list(self.values)


class Events:
    def __init__(self, stream):
        self.stream = stream

    def new_event(self):
        return Event(self.stream)

    def is_capturing(self):
        return False

    def copy_to_host(self, values):
        return HostCopy(values)


MEMBERS = {
    "sglang.version": '__version__ = "0.5.9"\n',
    "sglang.srt.managers.schedule_batch": """
        class ScheduleBatch:
            def __init__(self, mode, batch_size, spec_info=None):
                self.forward_mode = ForwardMode(mode)
                self.is_extend_in_batch = False
                self.seq_lens = [7] * batch_size
                self.spec_info = spec_info

        class ForwardMode:
            def __init__(self, name):
                self.name = name

            def is_extend(self):
                return self.name == "extend"

            def is_idle(self):
                return self.name == "idle"
    """,
    "sglang.srt.model_executor.forward_batch_info": """
        from sglang.srt.managers.schedule_batch import ForwardMode
    """,
    "sglang.srt.speculative.eagle_info": """
        class EagleVerifyInput:
            def __init__(self, draft_token_num):
                self.draft_token_num = draft_token_num
    """,
    "sglang.srt.managers.utils": """
        class GenerationBatchResult:
            def __init__(self, accept_lens=None):
                self.accept_lens = accept_lens
    """,
}

# 0.5.4's overlap worker: the batch is `model_worker_batch`, tp_rank is only an __init__ argument.
V2_0_5_4 = """
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.utils import GenerationBatchResult

    class EagleDraftWorker:
        def draft(self, model_worker_batch):
            gpu.launch(0.4)
            return VerifyInput(draft_token_num=6)

        def _draft_extend_for_decode(self, batch, batch_result):
            gpu.launch(0.3)

    class VerifyInput:
        def __init__(self, draft_token_num):
            self.draft_token_num = draft_token_num

    class EAGLEWorkerV2:
        def __init__(self, server_args, gpu_id, tp_rank, dp_rank=None):
            self.draft_worker = EagleDraftWorker()

        def forward_batch_generation(self, model_worker_batch: ScheduleBatch):
            if model_worker_batch.forward_mode.is_extend():
                gpu.launch(5.0)
                return GenerationBatchResult()
            model_worker_batch.spec_info = self.draft_worker.draft(model_worker_batch)
            batch_output = self.verify(model_worker_batch, None)
            self.draft_worker._draft_extend_for_decode(model_worker_batch, batch_output)
            return batch_output

        def verify(self, batch, cur_allocate_lens):
            gpu.launch(1.2)
            return GenerationBatchResult(accept_lens=[2, 4])
"""

# 0.5.21: no rank on the worker; SGLang's runtime context has it. The scheduler takes none either.
V2_0_5_21 = (
    V2_0_5_4.replace("model_worker_batch", "batch")
    .replace("gpu_id, tp_rank, dp_rank=None", "gpu_id, nccl_port=None")
    .replace("self.verify(batch, None)", "self.verify(batch)")
    .replace("def verify(self, batch, cur_allocate_lens):", "def verify(self, batch):")
)
RUNTIME_CONTEXT = """
    import types

    PARALLEL = types.SimpleNamespace(tp_rank=0)

    def get_parallel():
        return PARALLEL
"""
SCHEDULER_0_5_21 = """
    import importlib

    class ServerArgs:
        def __init__(self, speculative_algorithm):
            self.speculative_algorithm = speculative_algorithm

    class Scheduler:
        def __init__(self, server_args, port_args):
            self.server_args = server_args
            self.init_model_worker()

        def init_model_worker(self):
            module = importlib.import_module(self.server_args.speculative_algorithm)
            self.draft_worker = module.WORKER(self.server_args, 0)
"""


@pytest.fixture
def stream():
    return Stream()


@pytest.fixture
def fake_sglang(monkeypatch, stream):
    """load(name -> source, …): execute the fakes (MEMBERS first) into sys.modules; returns the
    Instrumentation whose checks read the same sources."""
    texts = {}

    def load(**modules):
        texts.update({name: textwrap.dedent(text) for name, text in MEMBERS.items()})
        texts.update({name.replace("__", "."): textwrap.dedent(text) for name, text in modules.items()})
        for name, text in texts.items():
            for depth in range(1, name.count(".") + 1):
                package = name.rsplit(".", depth)[0]
                if package not in sys.modules:
                    monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
            module = types.ModuleType(name)
            module.gpu = stream
            monkeypatch.setitem(sys.modules, name, module)
            exec(compile(text, f"<fake {name}>", "exec"), module.__dict__)
        return hook.Instrumentation(
            every=1, event_source_factory=lambda: Events(stream), sources=SourceIndex(texts.get)
        )

    return load


def profiler_lines(caplog):
    """The profiler's status and cycle lines (the scheduler's `runtime:` line left out)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "sglang.speclogs.profile" and not r.getMessage().startswith("speclogs profiler: runtime:")
    ]


def run_cycles(worker, batch_class, cycles, *, by_keyword=None):
    for _ in range(cycles):
        batch = batch_class("decode", 2)
        if by_keyword:
            worker.forward_batch_generation(**{by_keyword: batch})
        else:
            worker.forward_batch_generation(batch)


def test_a_batch_passed_by_keyword_and_a_rank_given_only_to_init_are_understood(fake_sglang, caplog):
    caplog.set_level(logging.INFO)
    state = fake_sglang(sglang__srt__speculative__eagle_worker_v2=V2_0_5_4)
    module = sys.modules[EAGLE_V2.module]
    hook.patch_worker_module(state, EAGLE_V2, module)
    batch_class = sys.modules["sglang.srt.managers.schedule_batch"].ScheduleBatch
    other_rank = module.EAGLEWorkerV2(None, 0, 1)
    run_cycles(other_rank, batch_class, 3)
    assert profiler_lines(caplog) == []

    worker = module.EAGLEWorkerV2(None, 0, tp_rank=0)
    run_cycles(worker, batch_class, 3, by_keyword="model_worker_batch")

    assert profiler_lines(caplog)[2:] == [
        f"speclogs spec_cycle cycle={n} bs=2 draft_ms=0.400 verify_ms=1.200 extend_ms=0.300 "
        "other_ms=0.000 gap_ms=0.000 cycle_ms=1.900 accepted=4 proposed=10"
        for n in (1, 2)
    ]


@pytest.mark.parametrize("tp_rank", [0, 1])
def test_the_rank_comes_from_sglangs_runtime_context_when_worker_and_scheduler_have_none(
    fake_sglang, caplog, tp_rank
):
    caplog.set_level(logging.INFO)
    state = fake_sglang(
        sglang__srt__runtime_context=RUNTIME_CONTEXT,
        sglang__srt__speculative__eagle_worker_v2=textwrap.dedent(V2_0_5_21) + "WORKER = EAGLEWorkerV2\n",
        sglang__srt__managers__scheduler=SCHEDULER_0_5_21,
    )
    sys.modules["sglang.srt.runtime_context"].PARALLEL.tp_rank = tp_rank
    hook.patch_scheduler(state, sys.modules[targets.SCHEDULER_TARGET.module])
    hook.patch_worker_module(state, EAGLE_V2, sys.modules[EAGLE_V2.module])
    scheduler_module = sys.modules[targets.SCHEDULER_TARGET.module]
    scheduler = scheduler_module.Scheduler(scheduler_module.ServerArgs(EAGLE_V2.module), None)
    run_cycles(scheduler.draft_worker, sys.modules["sglang.srt.managers.schedule_batch"].ScheduleBatch, 2)

    lines = profiler_lines(caplog)
    if tp_rank == 0:
        assert lines[0] == "speclogs profiler: active (EAGLEWorkerV2, every=1, sglang 0.5.9)"
        assert lines[2].startswith("speclogs spec_cycle cycle=1 bs=2 ")
    else:
        assert lines == []


def test_a_subclass_with_its_own_cycle_is_not_timed_and_the_scheduler_says_why(fake_sglang, caplog):
    caplog.set_level(logging.INFO)
    subclass = """
        from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

        class FrozenKVMTPWorkerV2(EAGLEWorkerV2):
            def forward_batch_generation(self, batch):
                return None

        WORKER = FrozenKVMTPWorkerV2
    """
    state = fake_sglang(
        sglang__srt__runtime_context=RUNTIME_CONTEXT,
        sglang__srt__speculative__eagle_worker_v2=V2_0_5_21,
        sglang__srt__speculative__frozen_kv_mtp_worker_v2=subclass,
        sglang__srt__managers__scheduler=SCHEDULER_0_5_21,
    )
    hook.patch_worker_module(state, EAGLE_V2, sys.modules[EAGLE_V2.module])
    hook.patch_scheduler(state, sys.modules[targets.SCHEDULER_TARGET.module])
    scheduler_module = sys.modules[targets.SCHEDULER_TARGET.module]
    scheduler_module.Scheduler(
        scheduler_module.ServerArgs("sglang.srt.speculative.frozen_kv_mtp_worker_v2"), None
    )

    assert profiler_lines(caplog) == [
        "speclogs profiler: disabled: speculative worker "
        "sglang.srt.speculative.frozen_kv_mtp_worker_v2.FrozenKVMTPWorkerV2 (speculative_algorithm="
        "sglang.srt.speculative.frozen_kv_mtp_worker_v2) is not supported; supported: EAGLEWorkerV2, "
        "MultiLayerEagleWorkerV2 and their subclasses that keep the wrapped cycle and verify (docs/profiling.md lists the SGLang releases)"
    ]
    assert state.profiler is None


def test_a_rank_that_reads_as_none_disables_with_one_line_and_the_worker_runs_plain(fake_sglang, caplog):
    caplog.set_level(logging.INFO)
    source = V2_0_5_21.replace(
        "            self.draft_worker = EagleDraftWorker()\n",
        "            self.draft_worker = EagleDraftWorker()\n            self.tp_rank = None\n",
    )
    state = fake_sglang(sglang__srt__speculative__eagle_worker_v2=source)
    module = sys.modules[EAGLE_V2.module]
    hook.patch_worker_module(state, EAGLE_V2, module)
    worker = module.EAGLEWorkerV2(None, 0)
    run_cycles(worker, sys.modules["sglang.srt.managers.schedule_batch"].ScheduleBatch, 3)

    assert profiler_lines(caplog) == [
        "speclogs profiler: disabled: cannot tell the TP rank of EAGLEWorkerV2: self.tp_rank is None"
    ]


def test_a_worker_module_whose_source_cannot_be_read_is_left_alone(fake_sglang):
    state = fake_sglang(sglang__srt__speculative__eagle_worker_v2=V2_0_5_21)
    module = sys.modules[EAGLE_V2.module]
    state.sources = SourceIndex(lambda name: None)  # e.g. an install that ships only .pyc files
    original = module.EAGLEWorkerV2.forward_batch_generation
    hook.patch_worker_module(state, EAGLE_V2, module)

    assert module.EAGLEWorkerV2.forward_batch_generation is original
    assert state.layout_problems == {
        "eagle_v2": ["no readable source for sglang.srt.speculative.eagle_worker_v2"]
    }


def test_reading_a_source_executes_nothing(tmp_path, monkeypatch):
    package = tmp_path / "fakesglang_unimported" / "srt"
    package.mkdir(parents=True)
    (tmp_path / "fakesglang_unimported" / "__init__.py").write_text("raise RuntimeError('executed')\n")
    (package / "worker.py").write_text("class EAGLEWorkerV2:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    assert hook.read_installed_source("fakesglang_unimported.srt.worker") == "class EAGLEWorkerV2:\n    pass\n"
    assert hook.read_installed_source("fakesglang_unimported.srt.missing") is None
    assert "fakesglang_unimported" not in sys.modules
