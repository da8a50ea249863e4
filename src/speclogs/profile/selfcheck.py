"""`python -m speclogs.profile.selfcheck [--no-cuda]`: seconds-long check on the GPU box, before long runs.

Layout: with the hook installed, imports the installed SGLang's worker modules and scheduler and checks they are
wrapped. Timing (CUDA): drives `CycleProfiler` with real events around GPU work of known relative sizes and checks the
host never waits, phases add up, the heaviest phase is heaviest, and `gap_ms` covers queued work and GPU idle time.
Prints one line per check and `selfcheck: OK` (exit 0) or `selfcheck: FAILED …` (exit 1).
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import Any, NamedTuple

from speclogs.profile import hook, targets
from speclogs.profile.timing import CudaEventSource, CycleProfiler, SpecCycleSample


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


def check_cuda_timing(torch: Any, cycles: int = 32, every: int = 4) -> list[Check]:
    """Real CUDA events around real GPU work: draft (small) < extend (medium) < verify (large)."""
    samples: list[SpecCycleSample] = []
    profiler = CycleProfiler(every=every, events=CudaEventSource(), emit=samples.append)
    # Few, large kernels: ~17 launches a cycle keeps the whole loop under CUDA's launch-queue depth,
    # so the host never blocks for a reason other than the profiler.
    mats = {k: torch.randn(n, n, device="cuda", dtype=torch.float16) for k, n in (("draft", 1024), ("verify", 8192), ("extend", 2048))}
    accept_lens = torch.tensor([3, 1, 4, 2], device="cuda", dtype=torch.int32)
    stream = torch.cuda.Stream()
    for mat in mats.values():
        mat @ mat  # warm-up: cuBLAS handles and workspaces are created outside the timed loop
    torch.cuda.synchronize()
    host_started = time.perf_counter()
    with torch.cuda.stream(stream):
        for _ in range(cycles):
            profiler.begin_cycle(4)
            profiler.set_verify_width(4)
            for phase in ("draft", "verify", "extend"):
                profiler.begin_phase(phase)
                for _ in range(2):
                    mats[phase] @ mats[phase]
                profiler.end_phase(phase)
            profiler.end_cycle(accept_lens)
            mats["verify"] @ mats["verify"]  # work between cycles: the next gap_ms must cover it
        host_loop_s = time.perf_counter() - host_started
    emitted_in_loop = len(samples)
    stream.synchronize()
    gpu_done_s = time.perf_counter() - host_started
    profiler.resolve_ready()
    checks = [
        Check("host loop never waited for the GPU", host_loop_s < 0.5 * gpu_done_s,
              f"host loop {host_loop_s * 1000:.1f} ms, GPU finished after {gpu_done_s * 1000:.1f} ms, "
              f"{emitted_in_loop} samples resolved during the loop"),
        Check("every sampled cycle resolved", [s.cycle for s in samples] == list(range(every, cycles + 1, every)),
              f"{len(samples)} samples for {cycles} cycles every {every}"),
    ]
    if not samples:
        return checks
    last = samples[-1]
    phases_us = last.draft_us + last.verify_us + last.extend_us
    accepted = (last.accepted_tokens, last.proposed_tokens)
    return checks + [
        Check("verify is the heaviest phase", last.verify_us > last.extend_us > last.draft_us, last.to_line()),
        Check("phases cover the cycle", 0 <= last.cycle_us - phases_us <= 0.1 * last.cycle_us,
              f"phases {phases_us} us of cycle {last.cycle_us} us"),
        Check("gap covers the work between cycles", 0.4 * last.verify_us <= last.gap_us <= 0.6 * last.verify_us,
              f"gap {last.gap_us} us for one verify matmul between cycles; verify phase (two) {last.verify_us} us"),
        Check("accepted / proposed", accepted == (6, 12), f"accepted={accepted[0]} proposed={accepted[1]} (expected 6 / 12)"),
    ]


def check_cuda_idle_gap(torch: Any, cycles: int = 6, idle_s: float = 0.003) -> list[Check]:
    """The GPU idles `idle_s` before each cycle (the host sleeps after a sync): gap_ms must show it."""
    samples: list[SpecCycleSample] = []
    profiler = CycleProfiler(every=1, events=CudaEventSource(), emit=samples.append)
    mat = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    accept_lens = torch.tensor([2], device="cuda", dtype=torch.int32)
    for _ in range(cycles):
        torch.cuda.synchronize()  # the test drains the GPU on purpose: the profiler never does
        time.sleep(idle_s)
        profiler.begin_cycle(1)
        profiler.begin_phase("verify")
        mat @ mat
        profiler.end_phase("verify")
        profiler.end_cycle(accept_lens)
    torch.cuda.synchronize()
    profiler.resolve_ready()
    gaps_us = [s.gap_us for s in samples[1:]]  # the first cycle has no previous forward
    ok = len(gaps_us) == cycles - 1 and all(0.9 * idle_s * 1e6 <= g <= 3 * idle_s * 1e6 for g in gaps_us)
    return [Check("gap measures GPU idle between cycles", ok, f"host slept {idle_s * 1e6:.0f} us before each cycle; gap_us={gaps_us}")]


def check_cuda() -> list[Check]:
    try:
        import torch
    except ImportError:
        return [Check("CUDA", False, "torch is not importable")]
    if not torch.cuda.is_available():
        return [Check("CUDA", False, "no CUDA device visible")]
    return check_cuda_timing(torch) + check_cuda_idle_gap(torch)


def main() -> int:
    checks = check_layout()
    version, verified = hook.sglang_version(), ", ".join(hook.VERIFIED_SGLANG_VERSIONS)
    print(f"sglang {version}: " + ("verified on a GPU" if version in hook.VERIFIED_SGLANG_VERSIONS
                                   else f"checked from its source only (verified on a GPU: {verified})"))
    if "--no-cuda" not in sys.argv[1:]:
        checks += check_cuda()
    for check in checks:
        print(f"{'OK  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
    failed = [c.name for c in checks if not c.ok]
    print("selfcheck: OK" if not failed else f"selfcheck: FAILED ({', '.join(failed)})")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
