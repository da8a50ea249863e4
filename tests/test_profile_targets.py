"""The hook's compatibility check (speclogs.profile.targets) on small SGLang-shaped sources.

Each source below is cut down from a real release's file (the version is named); only the
classes, signatures, calls and fields the check reads are kept.
"""

import dataclasses
import sys
import textwrap
from pathlib import Path

import pytest

from speclogs.profile import targets
from speclogs.profile.targets import SourceIndex, WorkerFacts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import profile_compat as compat  # noqa: E402  (the script that writes the compatibility table)

EAGLE_V2, MULTI_LAYER_V2 = targets.WORKER_TARGETS

# Where the classes the wrappers read members of live (sglang/srt/…), as in 0.5.9 … 0.5.23.
MEMBER_SOURCES = {
    "sglang.srt.managers.schedule_batch": """
        import dataclasses

        @dataclasses.dataclass
        class ScheduleBatch:
            forward_mode: object = None
            seq_lens: object = None
            spec_info: object = None
            is_extend_in_batch: bool = False

        @dataclasses.dataclass
        class ModelWorkerBatch:
            forward_mode: object
            seq_lens: object
            spec_info: object
            is_extend_in_batch: bool
    """,
    "sglang.srt.model_executor.forward_batch_info": """
        class ForwardMode:
            def is_extend(self): ...
            def is_idle(self): ...
    """,
    "sglang.srt.speculative.eagle_info": """
        class EagleVerifyInput:
            draft_token_num: int
    """,
    "sglang.srt.managers.utils": """
        class GenerationBatchResult:
            accept_lens: object = None
    """,
    "sglang.srt.managers.scheduler": """
        from sglang.srt.managers.utils import GenerationBatchResult
    """,
}

V2_0_5_14 = """
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import GenerationBatchResult
    from .base_spec_worker import BaseSpecWorker

    class EagleDraftWorker:
        def draft(self, batch: ScheduleBatch): ...
        def _draft_extend_for_decode(self, batch: ScheduleBatch, batch_result): ...

    class EAGLEWorkerV2(BaseSpecWorker):
        def __init__(self, server_args, gpu_id, tp_rank, dp_rank, nccl_port, target_worker):
            self.tp_rank = tp_rank
            self._draft_worker = EagleDraftWorker()

        def forward_batch_generation(self, batch: ScheduleBatch, on_publish=None):
            if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
                return self.target_worker.forward_batch_generation(batch)
            verify_input = self.draft_worker.draft(batch)
            batch.spec_info = verify_input
            batch_output = self.verify(batch)
            self.draft_worker._draft_extend_for_decode(batch, batch_output)
            return batch_output

        def verify(self, batch: ScheduleBatch):
            ...
"""
BASE_SPEC_WORKER = """
    from abc import ABC

    class BaseSpecWorker(ABC):
        @property
        def draft_worker(self): ...
"""

def sources(**modules: str) -> SourceIndex:
    """A SourceIndex over MEMBER_SOURCES plus `modules` (keyword names use `__` for dots)."""
    texts = {name: textwrap.dedent(text) for name, text in MEMBER_SOURCES.items()}
    texts |= {name.replace("__", "."): textwrap.dedent(text) for name, text in modules.items()}
    return SourceIndex(texts.get)


def v2_tree(worker_source: str = V2_0_5_14, **modules: str) -> SourceIndex:
    return sources(
        sglang__srt__speculative__eagle_worker_v2=worker_source,
        sglang__srt__speculative__base_spec_worker=BASE_SPEC_WORKER,
        **modules,
    )


def check(target, tree):
    return targets.check_worker(target, targets.observe_worker(target, tree))


def test_the_0_5_14_layout_passes_and_the_plan_reads_the_batch_accept_lens_and_self_tp_rank():
    tree = v2_tree()
    facts = targets.observe_worker(EAGLE_V2, tree)

    assert targets.check_worker(EAGLE_V2, facts) == []
    assert compat.verdict(EAGLE_V2, facts) == "supported"
    plan = targets.plan_worker(EAGLE_V2, facts)
    assert (plan.cycle_batch_param, plan.verify_batch_param, plan.rank_source.label) == ("batch", "batch", "self.tp_rank")
    assert facts.members["result"].module == "sglang.srt.managers.utils"  # followed the re-export


def test_the_0_5_4_layout_passes_with_model_worker_batch_and_the_rank_from_the_init_argument():
    source = (
        V2_0_5_14.replace("batch: ScheduleBatch, on_publish=None", "model_worker_batch: ModelWorkerBatch")
        .replace("            self.tp_rank = tp_rank\n", "")
        .replace("import ScheduleBatch", "import ModelWorkerBatch, ScheduleBatch")
    )
    facts = targets.observe_worker(EAGLE_V2, v2_tree(source))

    assert targets.check_worker(EAGLE_V2, facts) == []
    plan = targets.plan_worker(EAGLE_V2, facts)
    assert plan.cycle_batch_param == "model_worker_batch"
    assert plan.rank_source.label == "__init__ argument tp_rank"
    assert facts.members["batch"].class_name == "ModelWorkerBatch"  # the cycle's annotation decides


def test_the_0_5_21_layout_takes_the_rank_from_the_runtime_context():
    source = V2_0_5_14.replace("            self.tp_rank = tp_rank\n", "").replace(
        "gpu_id, tp_rank, dp_rank,", "gpu_id,"
    )
    context = "def get_parallel():\n    return _PARALLEL\n"
    facts = targets.observe_worker(
        EAGLE_V2,
        sources(
            sglang__srt__speculative__eagle_worker_v2=source,
            sglang__srt__speculative__base_spec_worker=BASE_SPEC_WORKER,
            sglang__srt__runtime_context=context,
        ),
    )

    assert targets.check_worker(EAGLE_V2, facts) == []
    assert targets.plan_worker(EAGLE_V2, facts).rank_source.label == (
        "sglang.srt.runtime_context.get_parallel().tp_rank"
    )


def test_without_any_rank_source_the_worker_is_refused():
    source = V2_0_5_14.replace("            self.tp_rank = tp_rank\n", "").replace(
        "gpu_id, tp_rank, dp_rank,", "gpu_id, ps,"
    )

    assert check(EAGLE_V2, v2_tree(source)) == [
        "no TP rank: EAGLEWorkerV2 has none of self.tp_rank, __init__ argument tp_rank, "
        "self.ps.tp_rank, sglang.srt.runtime_context.get_parallel().tp_rank"
    ]


def test_a_rank_set_in_a_base_class_counts_and_an_inherited_cycle_is_not_a_speculative_cycle():
    source = V2_0_5_14.replace("            self.tp_rank = tp_rank\n", "").replace(
        "def forward_batch_generation(", "def forward_batch_speculative_generation("
    )
    base = BASE_SPEC_WORKER + "\n        def __init__(self, tp_rank):\n            self.tp_rank = tp_rank\n\n" \
        "        def forward_batch_generation(self, batch): ...\n"
    tree = sources(sglang__srt__speculative__eagle_worker_v2=source, sglang__srt__speculative__base_spec_worker=base)
    facts = targets.observe_worker(EAGLE_V2, tree)

    assert facts.rank_sources[0] == "self.tp_rank"
    assert targets.check_worker(EAGLE_V2, facts) == [
        "EAGLEWorkerV2.forward_batch_generation is inherited from BaseSpecWorker, not a speculative cycle"
    ]


def test_what_the_layout_lacks_is_named_one_phrase_each():
    source = (
        V2_0_5_14.replace("def verify(self, batch: ScheduleBatch):", "def verify(self, schedule_batch, spec_info):")
        .replace("            self.draft_worker._draft_extend_for_decode(batch, batch_output)\n", "")
        .replace("        def draft(self, batch: ScheduleBatch): ...\n", "")
    )
    tree = v2_tree(source)

    assert check(EAGLE_V2, tree) == [
        "EagleDraftWorker.draft not found",
        "EAGLEWorkerV2.verify(schedule_batch, spec_info) does not start with (batch) or (model_worker_batch)",
        "EAGLEWorkerV2.forward_batch_generation does not call self.draft_worker._draft_extend_for_decode",
    ]
    assert check(MULTI_LAYER_V2, tree) == [
        "no readable source for sglang.srt.speculative.multi_layer_eagle_worker_v2"
    ]


def test_a_field_the_wrappers_read_is_required_of_the_class_that_holds_it():
    result = "class GenerationBatchResult:\n    next_token_ids: object = None\n"
    tree = v2_tree(sglang__srt__managers__utils=result)

    assert check(EAGLE_V2, tree) == ["GenerationBatchResult has no accept_lens"]


def test_a_source_that_does_not_parse_counts_as_unreadable():
    tree = v2_tree("class EAGLEWorkerV2(:\n")

    assert compat.verdict(EAGLE_V2, targets.observe_worker(EAGLE_V2, tree)) == "absent"


def test_recorded_facts_survive_the_json_round_trip():
    facts = targets.observe_worker(EAGLE_V2, v2_tree())

    assert compat.facts_from_json(WorkerFacts, dataclasses.asdict(facts)) == facts


@pytest.mark.parametrize(
    ("subclass", "expected"),
    [
        (
            "class StandaloneWorkerV2(EAGLEWorkerV2):\n    def __init__(self, *args):\n        super().__init__(*args)\n",
            {"subclass_of": "EAGLEWorkerV2", "overrides": [], "profiled_as": "EAGLEWorkerV2"},
        ),
        (
            "class FrozenKVMTPWorkerV2(EAGLEWorkerV2):\n    def forward_batch_generation(self, batch, on_publish=None): ...\n",
            {"subclass_of": "EAGLEWorkerV2", "overrides": ["forward_batch_generation"], "profiled_as": None},
        ),
    ],
)
def test_a_subclass_is_profiled_as_its_target_only_while_it_keeps_the_wrapped_methods(subclass, expected):
    module = "from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2\n\n" + subclass
    tree = sources(
        sglang__srt__speculative__eagle_worker_v2=V2_0_5_14,
        sglang__srt__speculative__base_spec_worker=BASE_SPEC_WORKER,
        sglang__srt__speculative__sub=module,
    )
    name = subclass.split("(")[0].removeprefix("class ")

    assert compat.profiled_as(tree, tree.find_class("sglang.srt.speculative.sub", name)) == expected


@pytest.mark.parametrize(
    ("init", "context", "problems", "rank_sources"),
    [
        ("def __init__(self, server_args, port_args, gpu_id, tp_rank, moe_ep_rank):", False, [], ("__init__ argument tp_rank",)),
        (
            "def __init__(self, server_args, port_args):",
            True,
            [],
            ("sglang.srt.runtime_context.get_parallel().tp_rank",),
        ),
        (
            "def __init__(self, server_args, port_args):",
            False,
            [
                "no TP rank: Scheduler.__init__(server_args, port_args) has none of __init__ argument "
                "tp_rank, sglang.srt.runtime_context.get_parallel().tp_rank"
            ],
            (),
        ),
    ],
    ids=["0.5.14", "0.5.21", "no-rank"],
)
def test_the_scheduler_check_wants_a_rank_and_the_worker_attribute(init, context, problems, rank_sources):
    scheduler = f"""
        class Scheduler:
            {init}
                self.init_model_worker()

            def init_model_worker(self):
                self.draft_worker = None
    """
    modules = {"sglang__srt__managers__scheduler": scheduler}
    if context:
        modules["sglang__srt__runtime_context"] = "def get_parallel():\n    return None\n"
    facts = targets.observe_scheduler(targets.SCHEDULER_TARGET, sources(**modules))

    assert facts.rank_sources == rank_sources
    assert targets.check_scheduler(targets.SCHEDULER_TARGET, facts) == problems
