"""A stand-in for speclogs.probe.worker where there is no GPU: same command line, same files, fake clock.

Used by tests/test_nccl_probe_runner.py to drive the REAL runner (processes, stage files, timeouts,
JSON) on a CPU machine. STANDIN_GPUS sets the GPU count it reports; STANDIN_MODE (set through an env
set) picks a behaviour: ok (default), hang_init (NCCL init never returns), crash_init (init raises),
graph_fail (the CUDA-graph capture raises).
Latency model: 5 µs + bytes / 100 GB/s, +1 µs on rank 1, jitter 0..0.9 µs by iteration; replayed from a
CUDA graph (spec graph_calls > 0): 2 µs + bytes / 100 GB/s, +0.5 µs on rank 1, same jitter.
"""

import json
import os
import sys
import time
from pathlib import Path


def main(argv):
    if argv and argv[0] == "--preflight":
        count = int(os.environ.get("STANDIN_GPUS", "2"))
        sys.stdout.write(json.dumps({
            "torch_version": "0.0+standin", "cuda_version": "13.0", "cuda_available": count > 0,
            "device_count": count, "gpu_names": ["Standin H200"] * count,
            "nccl_version": "2.28.9", "nccl_available": True,
        }) + "\n")
        return 0
    spec_path = Path(argv[0])
    spec = json.loads(spec_path.read_text())
    out_dir = spec_path.parent
    rank = int(os.environ["RANK"])
    mode = os.environ.get("STANDIN_MODE", "ok")
    (out_dir / f"rank{rank}.stage").write_text("init_begin")
    print(f"vm:{os.getpid()}:1 [{rank}] NCCL INFO NCCL version 2.28.9+cuda13.0", flush=True)
    for key, value in sorted(os.environ.items()):
        if key.startswith("NCCL_") and key not in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"):
            print(f"vm:{os.getpid()}:1 [{rank}] NCCL INFO {key} set by environment to {value}", flush=True)
    if mode == "hang_init":
        time.sleep(3600)
    if mode == "crash_init" and rank == 1:
        print("torch.distributed.DistBackendError: NCCL error: unhandled system error", flush=True)
        return 1
    if mode == "crash_init":
        time.sleep(3600)          # rank 0 waits for its dead peer, as a real rank would
    (out_dir / f"rank{rank}.stage").write_text("init_done")
    measurements = []
    for item in spec["measurements"]:
        base_us = 5.0 + item["bytes"] / 100e9 * 1e6 + rank
        samples = [base_us + (index % 10) / 10 for index in range(spec["iters"])]
        entry = {**item, "samples_us": samples, "span_mean_us": sum(samples) / len(samples)}
        graph_calls = int(spec.get("graph_calls", 0))
        if graph_calls and mode == "graph_fail":
            entry.update(graph_calls=graph_calls, graph_error="RuntimeError: CUDA graph capture is not supported here")
        elif graph_calls:
            in_graph_us = 2.0 + item["bytes"] / 100e9 * 1e6 + 0.5 * rank
            entry.update(graph_calls=graph_calls,
                         graph_samples_us=[in_graph_us + (index % 10) / 10 for index in range(spec["iters"])])
        measurements.append(entry)
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "world_size": int(os.environ["WORLD_SIZE"]),
                                                         "gpu_name": "Standin H200", "measurements": measurements}))
    (out_dir / f"rank{rank}.stage").write_text("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
