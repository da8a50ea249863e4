"""What the profiler hooks in SGLang, as data, and the one check that decides whether a release fits.

`observe_*` read facts from SGLang's *source* with `ast` (nothing is executed); `check_*` turn facts into problems
([] = the hook wraps it). The hook and scripts/profile_compat.py (every release) run the same check.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from typing import Callable, Iterator, NamedTuple

# The batch parameter's name: ScheduleBatch since 0.5.13, ModelWorkerBatch in the overlap worker before.
BATCH_PARAMS = ("batch", "model_worker_batch")
MAX_IMPORT_HOPS = 6  # `from a import X` chains followed to find where X is defined


class ClassRef(NamedTuple):
    """A class the wrappers read; `module` is where it lives when the worker module does not import it."""

    name: str
    module: str


class MemberCheck(NamedTuple):
    """The first of `classes` that resolves must have `members`."""

    role: str
    classes: tuple[ClassRef, ...]
    members: tuple[str, ...]


class RankSource(NamedTuple):
    """Where a TP rank is read: an attribute path, an `__init__` argument, or a module getter's result."""

    label: str
    attribute_path: tuple[str, ...] = ()
    argument: str | None = None
    module: str | None = None
    getter: str | None = None


RANK_ATTRIBUTE = RankSource("self.tp_rank", attribute_path=("tp_rank",))
RANK_ARGUMENT = RankSource("__init__ argument tp_rank", argument="tp_rank")
RANK_PARALLEL_STATE = RankSource("self.ps.tp_rank", attribute_path=("ps", "tp_rank"))
RANK_CONTEXT = RankSource(
    "sglang.srt.runtime_context.get_parallel().tp_rank", ("tp_rank",), module="sglang.srt.runtime_context", getter="get_parallel"
)


class Phase(NamedTuple):
    """A phase: its name in the spec_cycle line, the class and method wrapped, the call in the cycle."""

    name: str
    owner: str
    method: str
    call: str


class WorkerTarget(NamedTuple):
    """One overlap-scheduler (v2) EAGLE worker family: the worker verifies, its separate draft worker drafts and extends."""

    key: str
    module: str
    worker_class: str
    draft_class: str
    phases: tuple[Phase, ...]
    cycle_method: str = "forward_batch_generation"
    rank_sources: tuple[RankSource, ...] = (RANK_ATTRIBUTE, RANK_ARGUMENT, RANK_PARALLEL_STATE, RANK_CONTEXT)

    @property
    def wrapped_methods(self) -> tuple[tuple[str, str], ...]:
        """(class, method) of every method the hook replaces, `__init__` and the cycle first."""
        phases = ((phase.owner, phase.method) for phase in self.phases)
        return ((self.worker_class, "__init__"), (self.worker_class, self.cycle_method), *phases)

    @property
    def classes(self) -> tuple[str, ...]:
        return self.worker_class, self.draft_class

    @property
    def verify(self) -> Phase:
        return next(phase for phase in self.phases if phase.name == "verify")


class SchedulerTarget(NamedTuple):
    """The scheduler whose `__init__` the hook wraps to report servers it did not profile."""

    module: str
    class_name: str
    worker_attribute: str
    rank_sources: tuple[RankSource, ...]


_BATCH = MemberCheck(
    "batch",
    (ClassRef("ScheduleBatch", "sglang.srt.managers.schedule_batch"), ClassRef("ModelWorkerBatch", "sglang.srt.managers.schedule_batch")),
    ("forward_mode", "seq_lens", "spec_info", "is_extend_in_batch"),
)
_FORWARD_MODE = MemberCheck(
    "forward_mode", (ClassRef("ForwardMode", "sglang.srt.model_executor.forward_batch_info"),), ("is_extend", "is_idle")
)
_VERIFY_INPUT = MemberCheck("verify_input", (ClassRef("EagleVerifyInput", "sglang.srt.speculative.eagle_info"),), ("draft_token_num",))
# SGLang's per-request accept lengths (bonus token included), a device tensor
_RESULT = MemberCheck("result", (ClassRef("GenerationBatchResult", "sglang.srt.managers.utils"),), ("accept_lens",))
MEMBER_CHECKS = (_BATCH, _FORWARD_MODE, _VERIFY_INPUT, _RESULT)


def _target(key: str, module: str, worker: str, draft: str) -> WorkerTarget:
    phases = (Phase("draft", draft, "draft", "self.draft_worker.draft"), Phase("verify", worker, "verify", "self.verify"),
              Phase("extend", draft, "_draft_extend_for_decode", "self.draft_worker._draft_extend_for_decode"))
    return WorkerTarget(key, f"sglang.srt.speculative.{module}", worker, draft, phases)


WORKER_TARGETS = (
    _target("eagle_v2", "eagle_worker_v2", "EAGLEWorkerV2", "EagleDraftWorker"),
    _target("multi_layer_eagle_v2", "multi_layer_eagle_worker_v2", "MultiLayerEagleWorkerV2", "MultiLayerEagleDraftWorker"),
)
SCHEDULER_TARGET = SchedulerTarget("sglang.srt.managers.scheduler", "Scheduler", "draft_worker", (RANK_ARGUMENT, RANK_CONTEXT))


Function = ast.FunctionDef | ast.AsyncFunctionDef


class _Module(NamedTuple):
    classes: dict[str, ast.ClassDef]
    functions: frozenset[str]
    imports: dict[str, tuple[str, str]]  # local name -> (module, name there), every `from … import`


class ClassDef(NamedTuple):
    module: str
    node: ast.ClassDef


class SourceIndex:
    """The modules of one SGLang tree, each parsed once; a module whose source is missing or does not parse is None."""

    def __init__(self, read_source: Callable[[str], str | None]) -> None:
        self.module: Callable[[str], _Module | None] = functools.cache(lambda name: _parse_module(name, read_source(name)))

    def find_class(self, module_name: str, class_name: str) -> ClassDef | None:
        """The class `class_name` as seen from `module_name`: defined there or imported into it."""
        for _ in range(MAX_IMPORT_HOPS):
            module = self.module(module_name)
            if module is None or class_name in module.classes:
                return ClassDef(module_name, module.classes[class_name]) if module is not None else None
            if class_name not in module.imports:
                return None
            module_name, class_name = module.imports[class_name]
        return None

    def lineage(self, cls: ClassDef, seen: set[tuple[str, str]] | None = None) -> Iterator[ClassDef]:
        """`cls` and its bases found in the sources, depth first; a base's module is parsed only when reached."""
        seen = set() if seen is None else seen
        if (cls.module, cls.node.name) in seen:
            return
        seen.add((cls.module, cls.node.name))
        yield cls
        for base in cls.node.bases:
            if isinstance(base, ast.Name) and (found := self.find_class(cls.module, base.id)) is not None:
                yield from self.lineage(found, seen)


def _parse_module(name: str, source: str | None) -> _Module | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, TypeError):  # TypeError: no source
        return None
    parts = name.split(".")[:-1]
    imports = {}
    for node in _module_level(tree.body):
        if isinstance(node, ast.ImportFrom):
            package = parts[: len(parts) - node.level + 1] if node.level else []
            source_module = ".".join(package + ([node.module] if node.module else []))
            imports |= {alias.asname or alias.name: (source_module, alias.name) for alias in node.names}
    return _Module(
        classes={n.name: n for n in tree.body if isinstance(n, ast.ClassDef)},
        functions=frozenset(n.name for n in tree.body if isinstance(n, Function)),
        imports=imports,
    )


def _module_level(statements: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, also those under `if TYPE_CHECKING:`, `try:` and `with` (not in defs)."""
    for node in statements:
        yield node
        if isinstance(node, ast.If):
            yield from _module_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            handlers = [statement for handler in node.handlers for statement in handler.body]
            yield from _module_level(node.body + handlers + node.orelse + node.finalbody)
        elif isinstance(node, ast.With):
            yield from _module_level(node.body)


def _methods(node: ast.ClassDef) -> dict[str, Function]:
    return {n.name: n for n in node.body if isinstance(n, Function)}


def _find_method(sources: SourceIndex, cls: ClassDef, name: str) -> tuple[ClassDef, Function] | None:
    return next(((owner, m) for owner in sources.lineage(cls) if (m := _methods(owner.node).get(name)) is not None), None)


def _members_found(sources: SourceIndex, cls: ClassDef, wanted: set[str], *, in_body: bool = True) -> set[str]:
    """Which of `wanted` `cls` or a base has in a class body (fields and methods, when `in_body`) or assigns as `self.X`
    in a method. Stops reading (and parsing bases) once all are found."""
    found: set[str] = set()
    for owner in sources.lineage(cls):
        for child in owner.node.body if in_body else []:
            if isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
                found.add(child.target.id)
            elif isinstance(child, ast.Assign):
                found.update(t.id for t in child.targets if isinstance(t, ast.Name))
            elif isinstance(child, Function):
                found.add(child.name)
        found |= {node.attr for method in _methods(owner.node).values() for node in ast.walk(method) if isinstance(node, ast.Attribute)
                  and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id == "self"}
        found &= wanted
        if found >= wanted:
            break
    return found


def _positional_params(function: Function) -> tuple[str, ...]:
    return tuple(a.arg for a in [*function.args.posonlyargs, *function.args.args][1:])


@dataclasses.dataclass(frozen=True)
class MethodFacts:
    """A method as found: the class defining it, its positional parameters after `self` (`*args` as `*name`), the
    first one's annotation, and (cycle only) which phase calls it makes."""

    defined_in: str
    params: tuple[str, ...]
    first_annotation: str | None = None
    self_calls: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class MemberFacts:
    """The class checked for a role, its module, and which of the wanted members it has."""

    class_name: str
    module: str
    members: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class WorkerFacts:
    """What the sources of one tree say about one worker target."""

    target: str
    module_found: bool
    classes: tuple[str, ...] = ()
    methods: dict[str, MethodFacts] = dataclasses.field(default_factory=dict)
    rank_sources: tuple[str, ...] = ()
    members: dict[str, MemberFacts] = dataclasses.field(default_factory=dict)


def _method_facts(function: Function, owner: ClassDef, phase_calls: set[str]) -> MethodFacts:
    args = function.args
    first = [*args.posonlyargs, *args.args][1:2]
    return MethodFacts(
        defined_in=owner.node.name,
        params=_positional_params(function) + ((f"*{args.vararg.arg}",) if args.vararg is not None else ()),
        first_annotation=ast.unparse(first[0].annotation) if first and first[0].annotation is not None else None,
        self_calls=tuple(sorted({ast.unparse(node.func) for node in ast.walk(function) if isinstance(node, ast.Call)} & phase_calls)),
    )


def observe_worker(target: WorkerTarget, sources: SourceIndex) -> WorkerFacts:
    """Read, from the sources, every fact `check_worker` needs about `target`."""
    if sources.module(target.module) is None:
        return WorkerFacts(target=target.key, module_found=False)
    classes = {name: sources.find_class(target.module, name) for name in target.classes}
    methods = {}
    for class_name, method_name in target.wrapped_methods:
        cls = classes[class_name]
        found = _find_method(sources, cls, method_name) if cls is not None else None
        if found is not None:
            phase_calls = {p.call for p in target.phases} if method_name == target.cycle_method else set()
            methods[f"{class_name}.{method_name}"] = _method_facts(found[1], found[0], phase_calls)
    cycle = methods.get(f"{target.worker_class}.{target.cycle_method}")
    init = methods.get(f"{target.worker_class}.__init__")
    members = {check.role: _observe_members(check, sources, target.module, cycle) for check in MEMBER_CHECKS}
    return WorkerFacts(
        target=target.key,
        module_found=True,
        classes=tuple(name for name, cls in classes.items() if cls is not None),
        methods=methods,
        rank_sources=_rank_sources(target.rank_sources, sources, classes[target.worker_class], init.params if init else ()),
        members={role: facts for role, facts in members.items() if facts is not None},
    )


def _observe_members(check: MemberCheck, sources: SourceIndex, module: str, cycle: MethodFacts | None) -> MemberFacts | None:
    refs = list(check.classes)
    if cycle is not None:  # the batch class the cycle's annotation names first
        refs.sort(key=lambda ref: ref.name != cycle.first_annotation)
    parsed = sources.module(module)
    imported = [ref for ref in refs if parsed is not None and (ref.name in parsed.imports or ref.name in parsed.classes)]
    for ref, where in [(ref, module) for ref in imported] + [(ref, ref.module) for ref in refs]:
        cls = sources.find_class(where, ref.name)
        if cls is not None:
            present = _members_found(sources, cls, set(check.members))
            return MemberFacts(ref.name, cls.module, tuple(m for m in check.members if m in present))
    return None


def _rank_sources(
    declared: tuple[RankSource, ...], sources: SourceIndex, cls: ClassDef | None, init_params: tuple[str, ...]
) -> tuple[str, ...]:
    heads = {s.attribute_path[0] for s in declared if s.attribute_path and s.module is None}
    attributes = _members_found(sources, cls, heads, in_body=False) if cls is not None else set()

    def available(source: RankSource) -> bool:
        if source.argument is not None:
            return source.argument in init_params
        if source.module is not None:
            module = sources.module(source.module)
            return module is not None and (source.getter or "") in module.functions
        return source.attribute_path[0] in attributes

    return tuple(source.label for source in declared if available(source))


def check_worker(target: WorkerTarget, facts: WorkerFacts) -> list[str]:
    """Why the hook cannot wrap `target` given `facts`: one phrase per problem; [] when it can."""
    if not facts.module_found:
        return [f"no readable source for {target.module}"]
    problems = [f"class {name} not found in {target.module}" for name in target.classes if name not in facts.classes]
    if problems:
        return problems
    problems = [f"{c}.{m} not found" for c, m in target.wrapped_methods if f"{c}.{m}" not in facts.methods]
    for class_name, method_name in ((target.worker_class, target.cycle_method), (target.verify.owner, target.verify.method)):
        method = facts.methods.get(f"{class_name}.{method_name}")
        if method is not None and (not method.params or method.params[0] not in BATCH_PARAMS):
            problems.append(f"{class_name}.{method_name}({', '.join(method.params)}) does not start with "
                            + " or ".join(f"({name})" for name in BATCH_PARAMS))
    cycle_name = f"{target.worker_class}.{target.cycle_method}"
    cycle = facts.methods.get(cycle_name)
    if cycle is not None and cycle.defined_in != target.worker_class:
        problems.append(f"{cycle_name} is inherited from {cycle.defined_in}, not a speculative cycle")
    elif cycle is not None:
        problems += [f"{cycle_name} does not call {phase.call}" for phase in target.phases if phase.call not in cycle.self_calls]
    if not facts.rank_sources:
        problems.append(f"no TP rank: {target.worker_class} has none of " + ", ".join(source.label for source in target.rank_sources))
    for check in MEMBER_CHECKS:
        found = facts.members.get(check.role)
        missing = [m for m in check.members if found is not None and m not in found.members]
        if found is None:
            problems.append(f"class {' / '.join(ref.name for ref in check.classes)} ({check.role}) not found")
        elif missing:
            problems.append(f"{found.class_name} has no {', '.join(missing)}")
    return problems


class WorkerPlan(NamedTuple):
    """How the hook wraps a target that passed `check_worker`."""

    target: WorkerTarget
    cycle_batch_param: str
    verify_batch_param: str
    rank_source: RankSource


def plan_worker(target: WorkerTarget, facts: WorkerFacts) -> WorkerPlan:
    """The wrapping plan for a target whose `check_worker(target, facts)` is []."""
    return WorkerPlan(
        target=target,
        cycle_batch_param=facts.methods[f"{target.worker_class}.{target.cycle_method}"].params[0],
        verify_batch_param=facts.methods[f"{target.verify.owner}.{target.verify.method}"].params[0],
        rank_source=next(s for s in target.rank_sources if s.label in facts.rank_sources),
    )


@dataclasses.dataclass(frozen=True)
class SchedulerFacts:
    module_found: bool
    class_found: bool = False
    init_params: tuple[str, ...] = ()
    rank_sources: tuple[str, ...] = ()
    assigns_worker_attribute: bool = False


def observe_scheduler(target: SchedulerTarget, sources: SourceIndex) -> SchedulerFacts:
    cls = sources.find_class(target.module, target.class_name)
    if cls is None:
        return SchedulerFacts(module_found=sources.module(target.module) is not None)
    init = _find_method(sources, cls, "__init__")
    params = _positional_params(init[1]) if init is not None else ()
    return SchedulerFacts(
        module_found=True,
        class_found=True,
        init_params=params,
        rank_sources=_rank_sources(target.rank_sources, sources, None, params),
        assigns_worker_attribute=bool(_members_found(sources, cls, {target.worker_attribute}, in_body=False)),
    )


def check_scheduler(target: SchedulerTarget, facts: SchedulerFacts) -> list[str]:
    """Why the hook cannot watch the scheduler; [] when it can."""
    if not facts.module_found:
        return [f"no readable source for {target.module}"]
    if not facts.class_found:
        return [f"class {target.class_name} not found in {target.module}"]
    problems = []
    if not facts.rank_sources:
        labels = ", ".join(source.label for source in target.rank_sources)
        problems.append(f"no TP rank: {target.class_name}.__init__({', '.join(facts.init_params)}) has none of {labels}")
    if not facts.assigns_worker_attribute:
        problems.append(f"{target.class_name} never assigns self.{target.worker_attribute}")
    return problems
