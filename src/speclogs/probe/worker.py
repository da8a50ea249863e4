"""One rank of the NCCL probe: `python -m speclogs.probe.worker SPEC.json` (torch + stdlib only).

The runner starts one per GPU with the rendezvous variables and the env set in its environment (NCCL reads it at init).
A rank writes `rank<R>.stage` as it goes and `rank<R>.json` (per-iteration latencies, µs) at the end; `--preflight`
prints the machine's torch / CUDA / GPU facts as JSON. Eager calls are timed one by one between CUDA events; with
`graph_calls` > 0 the collective is also replayed from a CUDA graph, as a CUDA-graph decode step runs it (no launch
cost, no rank skew). A capture that fails is recorded (`graph_error`), not fatal.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path


def preflight() -> dict:
    """torch / CUDA / NCCL facts of this machine; torch_version None when torch is not installed."""
    facts: dict = {"torch_version": None, "cuda_version": None, "cuda_available": False, "device_count": 0, "gpu_names": [],
                   "nccl_version": None, "nccl_available": False}
    try:
        import torch
        import torch.distributed as dist
    except ImportError as err:
        return {**facts, "torch_import_error": str(err)}
    facts.update(torch_version=torch.__version__, cuda_version=torch.version.cuda, cuda_available=torch.cuda.is_available(),
                 nccl_available=bool(dist.is_available() and dist.is_nccl_available()))
    if facts["cuda_available"]:
        facts["device_count"] = torch.cuda.device_count()
        facts["gpu_names"] = [torch.cuda.get_device_name(index) for index in range(facts["device_count"])]
        if facts["nccl_available"]:
            version = torch.cuda.nccl.version()
            facts["nccl_version"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return facts


def run_rank(spec: dict, out_dir: Path) -> None:
    import torch
    import torch.distributed as dist

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    (out_dir / f"rank{rank}.stage").write_text("init_begin", encoding="utf-8")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    # device_id: eager NCCL communicator init, so a failure or hang shows up here, not later
    dist.init_process_group(backend="nccl", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=float(spec["init_timeout_s"])), device_id=device)
    dist.all_reduce(torch.ones(1, device=device))
    torch.cuda.synchronize(device)
    (out_dir / f"rank{rank}.stage").write_text("init_done", encoding="utf-8")
    iters, graph_calls = int(spec["iters"]), int(spec.get("graph_calls", 0))
    measurements = []
    for item in spec["measurements"]:
        output = torch.zeros(int(item["elements"]), dtype=torch.bfloat16, device=device)
        if item["collective"] == "all_reduce":
            def call(output=output):
                dist.all_reduce(output)
        else:
            shard = torch.zeros(output.numel() // world_size, dtype=torch.bfloat16, device=device)

            def call(output=output, shard=shard):
                dist.all_gather_into_tensor(output, shard)

        for _ in range(int(spec["warmup_iters"])):
            call()
        torch.cuda.synchronize(device)
        dist.barrier()  # the ranks start each size's timed calls together
        torch.cuda.synchronize(device)
        samples_us, span_us = _time_on_stream(call, iters, device)
        entry = {**item, "samples_us": samples_us, "span_mean_us": span_us / iters}
        measurements.append({**entry, **_graph_timing(call, graph_calls, iters, device)} if graph_calls > 0 else entry)
    dist.barrier()
    dist.destroy_process_group()
    result = {"rank": rank, "world_size": world_size, "gpu_name": torch.cuda.get_device_name(device),
              "env": {key: value for key, value in os.environ.items() if key.startswith("NCCL_")}, "measurements": measurements}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    (out_dir / f"rank{rank}.stage").write_text("done", encoding="utf-8")


def _time_on_stream(call, iters: int, device) -> tuple[list[float], float]:
    """`iters` back-to-back calls, each between two CUDA events: per-call µs and the span of them all."""
    import torch

    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in pairs:
        start.record()
        call()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) * 1000.0 for start, end in pairs], pairs[0][0].elapsed_time(pairs[-1][1]) * 1000.0


def _graph_timing(call, graph_calls: int, iters: int, device) -> dict:
    """Per-call latency of `call` replayed from a CUDA graph of `graph_calls` captured calls (the ranks replay together
    after a barrier): graph_samples_us (one per replay) or graph_error."""
    import torch
    import torch.distributed as dist

    try:
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up off the capture, as torch's docs ask
            for _ in range(3):
                call()
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(graph_calls):
                call()
        torch.cuda.synchronize(device)
        graph.replay()  # one untimed replay
        torch.cuda.synchronize(device)
        dist.barrier()
        torch.cuda.synchronize(device)
        samples, _ = _time_on_stream(graph.replay, iters, device)
        return {"graph_calls": graph_calls, "graph_samples_us": [sample / graph_calls for sample in samples]}
    except Exception as error:  # noqa: BLE001 — any capture failure is a result to report, not a crash
        torch.cuda.synchronize(device)
        first_line = (str(error).splitlines() or [""])[0][:300]
        return {"graph_calls": graph_calls, "graph_error": f"{type(error).__name__}: {first_line}"}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--preflight"]:
        sys.stdout.write(json.dumps(preflight()) + "\n")
        return 0
    if len(argv) != 1:
        sys.stderr.write("usage: python -m speclogs.probe.worker SPEC.json | --preflight\n")
        return 2
    spec_path = Path(argv[0])
    (spec_path.parent / f"rank{os.environ['RANK']}.stage").write_text("started", encoding="utf-8")
    run_rank(json.loads(spec_path.read_text(encoding="utf-8")), spec_path.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
