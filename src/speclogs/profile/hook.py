"""Wrap SGLang's EAGLE worker phases at import time, in every process, without editing SGLang.

`install()` puts a finder on `sys.meta_path` that waits for two modules:

- `sglang.srt.speculative.eagle_worker_v2`: once it has executed, its classes are checked against
  `EAGLE_V2_METHODS` (names and leading parameters read from SGLang 0.5.14) and, when they match,
  the methods are replaced *on the classes* (so `from … import EAGLEWorkerV2` anywhere, before or
  after, gets the wrapped methods):
  `EAGLEWorkerV2.forward_batch_generation` (the cycle), `EAGLEWorkerV2.verify`,
  `EagleDraftWorker.draft`, `EagleDraftWorker._draft_extend_for_decode` (the phases) and
  `EAGLEWorkerV2.__init__` (learns `tp_rank`, logs the `active` line on TP rank 0).
- `sglang.srt.managers.scheduler`: `Scheduler.__init__` is wrapped so that, once the scheduler
  has built its workers, TP rank 0 logs `speclogs profiler: disabled: <reason>` when no wrapped
  EAGLE worker serves it (no speculation, another algorithm, an unverified SGLang layout).

An exception raised by SGLang inside a wrapped method propagates unchanged. A failure of the
profiler itself (`PROFILER_FAULTS`) disables the profiler with one warning line; SGLang goes on.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.abc
import inspect
import logging
import os
import sys
import types
from typing import Any, Callable

from speclogs.errors import SpeclogsError
from speclogs.profile.timing import CudaEventSource, CycleProfiler, EventSource, SpecCycleSample

ENV_ENABLE = "SPECLOGS_PROFILE"
ENV_EVERY = "SPECLOGS_PROFILE_EVERY"
DEFAULT_EVERY = 16
# Events a sample holds: gap mark, cycle start/end, 3 phases × 2, host-copy done = 10; a few samples
# are pending at once (resolved a cycle or two later), so this covers the steady state.
PREALLOCATED_EVENTS = 40
VERIFIED_SGLANG_VERSIONS = ("0.5.14",)

EAGLE_V2_MODULE = "sglang.srt.speculative.eagle_worker_v2"
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"

# The logger sits under `sglang.` so SGLang's own root handler (and its `[time TPn]` prefix) applies.
logger = logging.getLogger("sglang.speclogs.profile")

# What a bug in the profiler itself can raise. Caught only around the profiler's own calls, never
# around SGLang's code, and turned into one "disabled" warning so the server keeps running.
PROFILER_FAULTS = (
    RuntimeError,
    AttributeError,
    TypeError,
    ValueError,
    LookupError,
    ArithmeticError,
    OSError,
    ImportError,
)

_WRAPPED_MARK = "__speclogs_wrapped__"


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """A method the profiler wraps or relies on: class, name, leading parameters after self."""

    class_name: str
    method_name: str
    leading_params: tuple[str, ...]


EAGLE_V2_METHODS = (
    MethodSpec("EAGLEWorkerV2", "__init__", ("server_args", "gpu_id", "tp_rank")),
    MethodSpec("EAGLEWorkerV2", "forward_batch_generation", ("batch",)),
    MethodSpec("EAGLEWorkerV2", "verify", ("batch",)),
    MethodSpec("EagleDraftWorker", "draft", ("batch",)),
    MethodSpec("EagleDraftWorker", "_draft_extend_for_decode", ("batch", "batch_result")),
)


def check_eagle_v2_module(module: types.ModuleType) -> list[str]:
    """What `module` lacks for the profiler to wrap it: one phrase per problem, [] when it fits."""
    problems = []
    for spec in EAGLE_V2_METHODS:
        owner = getattr(module, spec.class_name, None)
        if not isinstance(owner, type):
            problems.append(f"class {spec.class_name} not found in {module.__name__}")
            continue
        method = getattr(owner, spec.method_name, None)
        if not callable(method):
            problems.append(f"{spec.class_name}.{spec.method_name} not found")
            continue
        try:
            params = list(inspect.signature(method).parameters)[1:]
        except (TypeError, ValueError):
            problems.append(f"{spec.class_name}.{spec.method_name} has no readable signature")
            continue
        if tuple(params[: len(spec.leading_params)]) != spec.leading_params:
            problems.append(
                f"{spec.class_name}.{spec.method_name}({', '.join(params)}) does not start with "
                f"({', '.join(spec.leading_params)})"
            )
    return problems


def sglang_version() -> str:
    module = sys.modules.get("sglang.version")
    if module is None:
        try:
            import sglang.version as module  # already imported by the worker module
        except ImportError:
            return "unknown"
    return str(getattr(module, "__version__", "unknown"))


class Instrumentation:
    """Per-process profiler state: the sampling period, the event source, the status line."""

    def __init__(self, *, every: int, event_source_factory: Callable[[], EventSource]) -> None:
        self.every = every
        self.event_source_factory = event_source_factory
        self.profiler: CycleProfiler | None = None
        self.disabled_reason: str | None = None
        self.status_logged = False
        self.layout_problems: list[str] = []
        self.wrapped_classes: list[str] = []

    # -- status lines (one per process, TP rank 0 only) ------------------------------------
    def log_active(self, worker_class: str) -> None:
        if self.status_logged:
            return
        self.status_logged = True
        version = sglang_version()
        logger.info(
            "speclogs profiler: active (%s, every=%d, sglang %s)", worker_class, self.every, version
        )
        if version not in VERIFIED_SGLANG_VERSIONS:
            logger.warning(
                "speclogs profiler: sglang %s is not a verified version (verified: %s); its "
                "EAGLE worker has the expected methods, check the phase times before trusting them",
                version,
                ", ".join(VERIFIED_SGLANG_VERSIONS),
            )

    def log_disabled(self, reason: str) -> None:
        if self.status_logged:
            return
        self.status_logged = True
        logger.warning("speclogs profiler: disabled: %s", reason)

    def disable(self, reason: str) -> None:
        """Stop profiling in this process after a fault of the profiler itself."""
        if self.disabled_reason is not None:
            return
        self.disabled_reason = reason
        self.profiler = None
        self.status_logged = False
        self.log_disabled(f"{reason}; the server continues without profiling")

    def guard(self, where: str, call: Callable[..., Any], *args: Any) -> Any:
        """Run one profiler step; its own failure disables profiling instead of reaching SGLang."""
        try:
            return call(*args)
        except PROFILER_FAULTS as error:
            self.disable(f"internal error in {where}: {type(error).__name__}: {error}")
            return None

    # -- the profiler itself ------------------------------------------------------------------
    def start_profiler(self) -> None:
        events = self.event_source_factory()
        self.profiler = CycleProfiler(every=self.every, events=events, emit=_log_sample)
        self.profiler.preallocate(PREALLOCATED_EVENTS)

    def profiler_for(self, worker: Any) -> CycleProfiler | None:
        if self.disabled_reason is not None or getattr(worker, "tp_rank", None) != 0:
            return None
        return self.profiler


def _log_sample(sample: SpecCycleSample) -> None:
    logger.info("%s", sample.to_line())


_state: Instrumentation | None = None


def current() -> Instrumentation | None:
    """The instrumentation installed in this process, if any."""
    return _state


def use_event_source(factory: Callable[[], EventSource]) -> None:
    """Replace the CUDA event source (tests use a stand-in; call before the worker is built)."""
    if _state is None:
        raise SpeclogsError(
            "speclogs profiler hook is not installed in this process",
            hint="start the program through `python -m speclogs.profile -- …`",
        )
    _state.event_source_factory = factory


# -- wrappers ---------------------------------------------------------------------------------
def _mark(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    setattr(wrapper, _WRAPPED_MARK, True)
    return wrapper


def is_wrapped(method: Any) -> bool:
    return bool(getattr(method, _WRAPPED_MARK, False))


def _is_decode_batch(batch: Any) -> bool:
    """Mirrors EAGLEWorkerV2.forward_batch_generation's own branch; idle batches do not count."""
    mode = batch.forward_mode
    if mode.is_extend() or getattr(batch, "is_extend_in_batch", False):
        return False
    return not mode.is_idle()


def _wrap_worker_init(state: Instrumentation, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if getattr(self, "tp_rank", None) == 0 and state.disabled_reason is None:
            state.guard("worker init", _on_worker_ready, state, self)

    return _mark(__init__)


def _on_worker_ready(state: Instrumentation, worker: Any) -> None:
    if not is_wrapped(type(worker).forward_batch_generation):
        return  # a subclass with its own cycle: the scheduler hook reports it unsupported
    if state.profiler is None:
        state.start_profiler()
    state.log_active(type(worker).__name__)


def _begin_cycle(profiler: CycleProfiler, batch: Any) -> None:
    profiler.begin_cycle(len(batch.seq_lens))  # a device tensor's len() is its shape: no sync


def _end_cycle(profiler: CycleProfiler, result: Any) -> None:
    profiler.end_cycle(getattr(result, "accept_lens", None))


def _wrap_cycle(state: Instrumentation, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def forward_batch_generation(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        profiler = state.profiler_for(self)
        if profiler is None:
            return original(self, batch, *args, **kwargs)
        if not state.guard("batch mode", _is_decode_batch, batch):
            result = original(self, batch, *args, **kwargs)  # prefill / idle: not a cycle
            if state.profiler is profiler:
                state.guard("forward end", profiler.end_forward)  # may start the next gap
            return result
        state.guard("cycle start", _begin_cycle, profiler, batch)
        try:
            result = original(self, batch, *args, **kwargs)
        except BaseException:  # whatever SGLang raised (even KeyboardInterrupt): drop the half cycle, re-raise as is
            state.guard("cycle abandon", profiler.abandon_cycle)
            raise
        if state.profiler is profiler:  # not disabled during the cycle
            state.guard("cycle end", _end_cycle, profiler, result)
        return result

    return _mark(forward_batch_generation)


def _wrap_phase(
    state: Instrumentation, phase: str, original: Callable[..., Any]
) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapped(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        profiler = state.profiler
        if profiler is None or not profiler.sampling:
            return original(self, batch, *args, **kwargs)
        if phase == "verify":
            width = getattr(getattr(batch, "spec_info", None), "draft_token_num", None)
            if isinstance(width, int):
                state.guard("verify width", profiler.set_verify_width, width)
        state.guard(f"{phase} start", profiler.begin_phase, phase)
        result = original(self, batch, *args, **kwargs)
        state.guard(f"{phase} end", profiler.end_phase, phase)
        return result

    return _mark(wrapped)


def patch_eagle_v2(state: Instrumentation, module: types.ModuleType) -> None:
    """Wrap the worker classes of a freshly executed eagle_worker_v2 module (when they fit)."""
    problems = check_eagle_v2_module(module)
    if problems:
        state.layout_problems = problems
        return
    worker = module.EAGLEWorkerV2
    draft_worker = module.EagleDraftWorker
    if is_wrapped(worker.forward_batch_generation):
        return
    worker.__init__ = _wrap_worker_init(state, worker.__init__)
    worker.forward_batch_generation = _wrap_cycle(state, worker.forward_batch_generation)
    worker.verify = _wrap_phase(state, "verify", worker.verify)
    draft_worker.draft = _wrap_phase(state, "draft", draft_worker.draft)
    draft_worker._draft_extend_for_decode = _wrap_phase(
        state, "extend", draft_worker._draft_extend_for_decode
    )
    state.wrapped_classes = [worker.__name__, draft_worker.__name__]


def _wrap_scheduler_init(
    state: Instrumentation, original: Callable[..., Any]
) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        state.guard("scheduler check", _report_unprofiled, state, self, signature, args, kwargs)

    return _mark(__init__)


def _report_unprofiled(
    state: Instrumentation,
    scheduler: Any,
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    tp_rank = signature.bind(scheduler, *args, **kwargs).arguments.get("tp_rank", 0)
    if tp_rank != 0 or state.status_logged:
        return
    worker = getattr(scheduler, "draft_worker", None)
    server_args = getattr(scheduler, "server_args", None)
    algorithm = getattr(server_args, "speculative_algorithm", None)
    if worker is None:
        state.log_disabled(
            f"server started without speculative decoding (speculative_algorithm={algorithm})"
        )
    elif state.layout_problems:
        state.log_disabled(
            f"sglang {sglang_version()} EAGLE worker does not have the expected layout: "
            + "; ".join(state.layout_problems)
        )
    else:
        worker_class = type(worker)
        state.log_disabled(
            f"speculative worker {worker_class.__module__}.{worker_class.__name__} "
            f"(speculative_algorithm={algorithm}) is not supported; supported: EAGLEWorkerV2 "
            f"(sglang {', '.join(VERIFIED_SGLANG_VERSIONS)})"
        )


def patch_scheduler(state: Instrumentation, module: types.ModuleType) -> None:
    scheduler = getattr(module, "Scheduler", None)
    if not isinstance(scheduler, type) or is_wrapped(scheduler.__init__):
        return
    scheduler.__init__ = _wrap_scheduler_init(state, scheduler.__init__)


# -- the import hook ---------------------------------------------------------------------------
class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the patcher; everything else is the real loader's."""

    def __init__(self, loader: Any, patch: Callable[[types.ModuleType], None]) -> None:
        self._loader = loader
        self._patch = patch

    def create_module(self, spec: Any) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds modules with the other finders and patches the named ones after they execute."""

    def __init__(self, patchers: dict[str, Callable[[types.ModuleType], None]]) -> None:
        self._patchers = patchers

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = self._patchers.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def install(*, every: int = DEFAULT_EVERY) -> Instrumentation:
    """Install the import hook in this process (idempotent); patches modules already imported."""
    global _state
    if _state is not None:
        return _state
    state = Instrumentation(every=every, event_source_factory=CudaEventSource)

    def guarded(where: str, patch: Callable[[Instrumentation, types.ModuleType], None]) -> Any:
        return lambda module: state.guard(where, patch, state, module)

    patchers = {
        EAGLE_V2_MODULE: guarded("patching eagle_worker_v2", patch_eagle_v2),
        SCHEDULER_MODULE: guarded("patching scheduler", patch_scheduler),
    }
    _state = state
    for name, patch in patchers.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, PatchOnImport(patchers))
    return state


def install_from_env(environ: dict[str, str] | None = None) -> Instrumentation | None:
    """sitecustomize's entry: install when SPECLOGS_PROFILE=1, with SPECLOGS_PROFILE_EVERY."""
    env = os.environ if environ is None else environ
    if env.get(ENV_ENABLE) != "1":
        return None
    raw_every = env.get(ENV_EVERY, str(DEFAULT_EVERY))
    try:
        every = int(raw_every)
    except ValueError:
        every = 0
    if every < 1:
        logger.warning(
            "speclogs profiler: disabled: %s=%r is not a positive integer", ENV_EVERY, raw_every
        )
        return None
    return install(every=every)
