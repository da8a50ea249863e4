"""Wrap SGLang's EAGLE worker phases at import time, in every process, without editing SGLang.

`install()` puts a finder on `sys.meta_path` that patches the modules `targets` names once they execute: the methods
are replaced *on the classes*, so every `from … import` sees them. SGLang's own exceptions propagate unchanged; a fault
of the profiler (`PROFILER_FAULTS`) disables it with one warning line and SGLang goes on.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import inspect
import logging
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable

from speclogs.profile import targets
from speclogs.profile.targets import RankSource, SourceIndex, WorkerPlan, WorkerTarget
from speclogs.profile.timing import CudaEventSource, CycleProfiler, EventSource

ENV_ENABLE = "SPECLOGS_PROFILE"
ENV_EVERY = "SPECLOGS_PROFILE_EVERY"
DEFAULT_EVERY = 16
# Events a sample holds: gap mark, cycle start/end, 3 phases × 2, host-copy done = 10; a few samples are pending at
# once (resolved a cycle or two later), so this covers the steady state.
PREALLOCATED_EVENTS = 40
VERIFIED_SGLANG_VERSIONS = ("0.5.14",)  # run on a GPU; the others are checked from their source only

# The logger sits under `sglang.` so SGLang's own root handler (and its `[time TPn]` prefix) applies.
logger = logging.getLogger("sglang.speclogs.profile")

# What a bug in the profiler itself can raise. Caught only around the profiler's own calls, never around SGLang's
# code, and turned into one "disabled" warning so the server keeps running.
PROFILER_FAULTS = (RuntimeError, AttributeError, TypeError, ValueError, LookupError, ArithmeticError, OSError, ImportError)

_WRAPPED_MARK = "__speclogs_wrapped__"


def read_installed_source(module_name: str) -> str | None:
    """The source text of an installed module, or None. Executes nothing: the `.py` file is looked up along its
    top-level package's path (sys.path while that package is not imported)."""
    top, *rest = module_name.split(".")
    package = sys.modules.get(top)
    roots = list(getattr(package, "__path__", [])) if package is not None else [os.path.join(p or os.curdir, top) for p in sys.path]
    for base in (os.path.join(root, *rest) for root in roots):
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                try:
                    return Path(candidate).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    return None
    return None


def sglang_version() -> str:
    try:
        import sglang.version as module  # already imported by the worker module
    except ImportError:
        return "unknown"
    return str(getattr(module, "__version__", "unknown"))


def _attribute_path(owner: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        owner = getattr(owner, name, None)
    return owner


class Instrumentation:
    """Per-process profiler state: the sampling period, the event source, the status line."""

    def __init__(self, *, every: int, event_source_factory: Callable[[], EventSource], sources: SourceIndex | None = None) -> None:
        self.every = every
        self.event_source_factory = event_source_factory
        self.sources = sources if sources is not None else SourceIndex(read_installed_source)
        self.profiler: CycleProfiler | None = None
        self.profiled_worker: Any = None  # the TP-rank-0 worker whose cycles are timed
        self.disabled_reason: str | None = None
        self.status_logged = False
        self.layout_problems: dict[str, list[str]] = {}  # target key -> why it was not wrapped

    def log_disabled(self, reason: str) -> None:
        """The status line (one per process, TP rank 0 only)."""
        if not self.status_logged:
            self.status_logged = True
            logger.warning("speclogs profiler: disabled: %s", reason)

    def guard(self, where: str, call: Callable[..., Any], *args: Any) -> Any:
        """Run one profiler step; its own failure disables profiling instead of reaching SGLang."""
        try:
            return call(*args)
        except PROFILER_FAULTS as error:
            if self.disabled_reason is None:
                self.disabled_reason = f"internal error in {where}: {type(error).__name__}: {error}"
                self.profiler, self.status_logged = None, False
                self.log_disabled(f"{self.disabled_reason}; the server continues without profiling")
            return None

    def start(self, worker: Any) -> None:
        if self.profiler is None:
            self.profiler = CycleProfiler(every=self.every, events=self.event_source_factory(), preallocate=PREALLOCATED_EVENTS,
                                          emit=lambda sample: logger.info("%s", sample.to_line()))
        self.profiled_worker = worker
        if self.status_logged:
            return
        self.status_logged = True
        version = sglang_version()
        logger.info("speclogs profiler: active (%s, every=%d, sglang %s)", type(worker).__name__, self.every, version)
        if version not in VERIFIED_SGLANG_VERSIONS:
            logger.warning("speclogs profiler: sglang %s is not a verified version (verified: %s); its EAGLE worker has the "
                           "expected methods, check the phase times before trusting them", version, ", ".join(VERIFIED_SGLANG_VERSIONS))


_state: Instrumentation | None = None


def current() -> Instrumentation | None:
    """The instrumentation installed in this process, if any."""
    return _state


def _wraps(original: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """functools.wraps, plus the mark `is_wrapped` reads (SGLang's own decorators set `__wrapped__` too)."""
    def decorate(wrapper: Callable[..., Any]) -> Callable[..., Any]:
        setattr(wrapper, _WRAPPED_MARK, True)
        return functools.wraps(original)(wrapper)
    return decorate


def is_wrapped(method: Any) -> bool:
    return bool(getattr(method, _WRAPPED_MARK, False))


def _batch(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> Any:
    """The batch SGLang passed first (after self) or by keyword `name`."""
    return args[0] if args else kwargs.get(name)


def _wrap_init(state: Instrumentation, where: str, source: RankSource, original: Callable[..., Any],
               after: Callable[[Any, Any], None]) -> Callable[..., Any]:
    """`original`, then `after(self, TP rank)`, the rank read once the object is built (None where a step is missing)."""
    signature = inspect.signature(original)

    def rank(owner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if source.argument is not None:
            bound = signature.bind(owner, *args, **kwargs)
            bound.apply_defaults()
            return bound.arguments.get(source.argument)
        start = getattr(importlib.import_module(source.module), source.getter or "")() if source.module is not None else owner
        return _attribute_path(start, source.attribute_path)

    @_wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        state.guard(where, lambda: after(self, rank(self, args, kwargs)))

    return __init__


def _on_worker_init(state: Instrumentation, plan: WorkerPlan, worker: Any, rank: Any) -> None:
    if state.disabled_reason is not None:
        return
    if not isinstance(rank, int):
        state.log_disabled(f"cannot tell the TP rank of {type(worker).__name__}: {plan.rank_source.label} is {rank!r}")
        return
    target = plan.target
    own_methods = [target.cycle_method] + [p.method for p in target.phases if p.owner == target.worker_class]
    # a subclass with its own cycle or verify is not profiled: the scheduler hook reports it unsupported
    if rank == 0 and all(is_wrapped(getattr(type(worker), name, None)) for name in own_methods):
        state.start(worker)


def _is_decode_batch(batch: Any) -> bool:
    """The branch every supported worker's cycle takes for decode; idle batches do not count."""
    mode = batch.forward_mode
    return not (mode.is_extend() or getattr(batch, "is_extend_in_batch", False) or mode.is_idle())


def _wrap_cycle(state: Instrumentation, plan: WorkerPlan, original: Callable[..., Any]) -> Callable[..., Any]:
    @_wraps(original)
    def forward_batch_generation(self: Any, *args: Any, **kwargs: Any) -> Any:
        profiler = state.profiler if self is state.profiled_worker else None
        if profiler is None:
            return original(self, *args, **kwargs)
        batch = _batch(args, kwargs, plan.cycle_batch_param)
        if not state.guard("batch mode", _is_decode_batch, batch):
            result = original(self, *args, **kwargs)  # prefill / idle: not a cycle
            if state.profiler is profiler:
                state.guard("forward end", profiler.end_forward)  # may start the next gap
            return result
        state.guard("cycle start", lambda: profiler.begin_cycle(len(batch.seq_lens)))  # len() of a device tensor: no sync
        try:
            result = original(self, *args, **kwargs)
        except BaseException:  # whatever SGLang raised (even KeyboardInterrupt): drop the half cycle, re-raise as is
            state.guard("cycle abandon", profiler.abandon_cycle)
            raise
        if state.profiler is profiler:  # not disabled during the cycle
            state.guard("cycle end", profiler.end_cycle, getattr(result, "accept_lens", None))
        return result

    return forward_batch_generation


def _record_verify_width(profiler: CycleProfiler, plan: WorkerPlan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """`draft_token_num` of the verify input the cycle set on the batch."""
    width = getattr(getattr(_batch(args, kwargs, plan.verify_batch_param), "spec_info", None), "draft_token_num", None)
    if isinstance(width, int):
        profiler.set_verify_width(width)


def _wrap_phase(state: Instrumentation, plan: WorkerPlan, phase: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @_wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        profiler = state.profiler
        if profiler is None or not profiler.sampling:
            return original(self, *args, **kwargs)
        if phase == "verify":
            state.guard("verify width", _record_verify_width, profiler, plan, args, kwargs)
        state.guard(f"{phase} start", profiler.begin_phase, phase)
        result = original(self, *args, **kwargs)
        state.guard(f"{phase} end", profiler.end_phase, phase)
        return result

    return wrapped


def patch_worker_module(state: Instrumentation, target: WorkerTarget, module: types.ModuleType) -> None:
    """Wrap `target`'s classes in its freshly executed module, when `targets.check_worker` passes."""
    facts = targets.observe_worker(target, state.sources)
    problems = targets.check_worker(target, facts)
    if problems:
        state.layout_problems[target.key] = problems
        return
    plan = targets.plan_worker(target, facts)
    worker = getattr(module, target.worker_class)
    if is_wrapped(getattr(worker, target.cycle_method)):
        return
    worker.__init__ = _wrap_init(state, "worker init", plan.rank_source, worker.__init__,
                                 lambda self, rank: _on_worker_init(state, plan, self, rank))
    setattr(worker, target.cycle_method, _wrap_cycle(state, plan, getattr(worker, target.cycle_method)))
    for phase in target.phases:
        owner = getattr(module, phase.owner)
        setattr(owner, phase.method, _wrap_phase(state, plan, phase.name, getattr(owner, phase.method)))


def runtime_facts(scheduler: Any) -> dict[str, str]:
    """What the scheduler runs: the speculative worker's class, the algorithm, the layers whose inputs the target
    captures for an EAGLE-3 draft (SGLang captures the input of layer id + 1; `-` when none), the draft's class."""
    worker = getattr(scheduler, targets.SCHEDULER_TARGET.worker_attribute, None)
    algorithm = getattr(scheduler, "spec_algorithm", None) or _attribute_path(scheduler, ("server_args", "speculative_algorithm"))
    model = _attribute_path(scheduler, ("tp_worker", "model_runner", "model"))
    captured = _attribute_path(model, ("model", "layers_to_capture")) if getattr(model, "capture_aux_hidden_states", False) else None
    # the V1 EAGLEWorker (run, not profiled) keeps its draft runner itself; EAGLEWorkerV2 behind its own draft worker
    paths = (("draft_model_runner", "model"), ("draft_worker", "draft_runner", "model"), ("draft_runner", "model"))
    draft_model = next((m for m in (_attribute_path(worker, p) for p in paths) if m is not None), None)
    return {
        "worker": "-" if worker is None else f"{type(worker).__module__}.{type(worker).__name__}",
        "algorithm": getattr(algorithm, "name", str(algorithm)),
        "captured_layers": ",".join(str(i) for i in captured) if captured else "-",
        "draft": "-" if draft_model is None else type(draft_model).__name__,
    }


def _on_scheduler_init(state: Instrumentation, scheduler: Any, rank: Any) -> None:
    """TP rank 0: the runtime line, and the one status line for a server whose worker was not profiled."""
    if rank != 0:
        return
    logger.info("speclogs profiler: runtime: %s", " ".join(f"{k}={v}" for k, v in runtime_facts(scheduler).items()))
    if state.status_logged:
        return
    worker = getattr(scheduler, targets.SCHEDULER_TARGET.worker_attribute, None)
    algorithm = _attribute_path(scheduler, ("server_args", "speculative_algorithm"))
    if worker is None:
        state.log_disabled(f"server started without speculative decoding (speculative_algorithm={algorithm})")
        return
    classes = type(worker).__mro__
    target = next((t for t in targets.WORKER_TARGETS if any(c.__module__ == t.module and c.__name__ == t.worker_class for c in classes)),
                  None)
    if target is not None and target.key in state.layout_problems:
        state.log_disabled(f"sglang {sglang_version()} {target.worker_class} does not have the expected layout: "
                           + "; ".join(state.layout_problems[target.key]))
    else:
        supported = ", ".join(t.worker_class for t in targets.WORKER_TARGETS)
        state.log_disabled(f"speculative worker {type(worker).__module__}.{type(worker).__name__} (speculative_algorithm="
                           f"{algorithm}) is not supported; supported: {supported} and their subclasses that keep the wrapped "
                           "cycle and verify (docs/profiling.md lists the SGLang releases)")


def patch_scheduler(state: Instrumentation, module: types.ModuleType) -> None:
    """Wrap `Scheduler.__init__` when `targets.check_scheduler` passes (else no report, no harm)."""
    target = targets.SCHEDULER_TARGET
    facts = targets.observe_scheduler(target, state.sources)
    scheduler = getattr(module, target.class_name, None)
    if targets.check_scheduler(target, facts) or not isinstance(scheduler, type) or is_wrapped(scheduler.__init__):
        return
    rank_source = next(s for s in target.rank_sources if s.label in facts.rank_sources)
    scheduler.__init__ = _wrap_init(state, "scheduler check", rank_source, scheduler.__init__,
                                    lambda self, rank: _on_scheduler_init(state, self, rank))


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the patcher; everything else is the real loader's."""

    def __init__(self, loader: Any, patch: Callable[[types.ModuleType], None]) -> None:
        self._loader, self._patch = loader, patch

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
        finders = (f for f in sys.meta_path if f is not self and hasattr(f, "find_spec"))
        spec = next((s for s in (f.find_spec(fullname, path, target) for f in finders) if s is not None), None)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def install(*, every: int = DEFAULT_EVERY) -> Instrumentation:
    """Install the import hook in this process (idempotent); patches modules already imported."""
    global _state
    if _state is not None:
        return _state
    state = _state = Instrumentation(every=every, event_source_factory=CudaEventSource)
    patchers = {target.module: functools.partial(state.guard, f"patching {target.module}", patch_worker_module, state, target)
                for target in targets.WORKER_TARGETS}
    patchers[targets.SCHEDULER_TARGET.module] = functools.partial(state.guard, "patching scheduler", patch_scheduler, state)
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
    if not raw_every.isdigit() or int(raw_every) < 1:
        logger.warning("speclogs profiler: disabled: %s=%r is not a positive integer", ENV_EVERY, raw_every)
        return None
    return install(every=int(raw_every))
