"""`python -m speclogs.profile.selfcheck`: seconds-long check on the GPU box, before long runs.

With the hook installed, imports the installed SGLang's worker modules and scheduler and checks they are wrapped.
Prints one line per check and `selfcheck: OK` (exit 0) or `selfcheck: FAILED …` (exit 1).
"""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple

from speclogs.profile import hook, targets


class Check(NamedTuple):
    name: str
    ok: bool
    detail: str


def check_layout() -> list[Check]:
    """Import real SGLang with the hook installed and check what the profiler relies on."""
    state = hook.install(every=hook.DEFAULT_EVERY)
    present = [t for t in targets.WORKER_TARGETS if hook.read_installed_source(t.module) is not None]
    if not present:
        return [Check("EAGLE worker modules", False, f"none of {', '.join(t.module for t in targets.WORKER_TARGETS)} is installed")]
    checks = []
    for target in present:
        try:
            module = importlib.import_module(target.module)
        except ImportError as error:
            checks.append(Check(f"import {target.module}", False, f"{type(error).__name__}: {error}"))
            continue
        problems = state.layout_problems.get(target.key, [])
        checks.append(Check(f"{target.worker_class} layout", not problems, "; ".join(problems) or "as the hook expects"))
        if not problems:
            methods = {f"{o}.{m}": hook.is_wrapped(getattr(getattr(module, o), m)) for o, m in target.wrapped_methods}
            unwrapped = [name for name, wrapped in methods.items() if not wrapped]
            checks.append(Check(f"{target.worker_class} wrapped", not unwrapped,
                                ", ".join(unwrapped) + " not wrapped" if unwrapped else ", ".join(methods)))
    target = targets.SCHEDULER_TARGET
    try:
        scheduler = getattr(importlib.import_module(target.module), target.class_name)
    except (ImportError, AttributeError) as error:
        return [*checks, Check("Scheduler hook", False, f"{type(error).__name__}: {error}")]
    facts = targets.observe_scheduler(target, state.sources)
    problems = targets.check_scheduler(target, facts)
    ok = not problems and hook.is_wrapped(scheduler.__init__)
    detail = f"Scheduler.__init__ wrapped (TP rank from {', '.join(facts.rank_sources)})"
    return [*checks, Check("Scheduler hook", ok, detail if ok else "; ".join(problems) or "not wrapped")]


def main() -> int:
    checks = check_layout()
    version, verified = hook.sglang_version(), ", ".join(hook.VERIFIED_SGLANG_VERSIONS)
    print(f"sglang {version}: " + ("verified on a GPU" if version in hook.VERIFIED_SGLANG_VERSIONS
                                   else f"checked from its source only (verified on a GPU: {verified})"))
    for check in checks:
        print(f"{'OK  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
    failed = [c.name for c in checks if not c.ok]
    print("selfcheck: OK" if not failed else f"selfcheck: FAILED ({', '.join(failed)})")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
