"""Pure arithmetic of the NCCL probe (stdlib only). Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = bytes /
time; busbw = algbw × 2(n−1)/n for all_reduce and × (n−1)/n for all_gather, whose `bytes` is the TOTAL gathered size
(n × per-rank chunk). GB/s are decimal gigabytes (1e9 bytes) per second, as nccl-tests prints them."""

from __future__ import annotations

import math
import statistics
from typing import Sequence

from speclogs.errors import ProbeError

COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather")
BF16_BYTES = 2


def bus_bandwidth_factor(collective: str, world_size: int) -> float:
    """nccl-tests' busbw / algbw ratio for `collective` over `world_size` ranks."""
    if world_size < 1:
        raise ProbeError(f"world size {world_size} is not a rank count", hint="use --gpus 2 or more")
    if collective not in COLLECTIVES:
        raise ProbeError(f"unknown collective {collective!r}", hint=f"one of {', '.join(COLLECTIVES)}")
    return (2.0 if collective == "all_reduce" else 1.0) * (world_size - 1) / world_size


def alg_bandwidth_gb_s(message_bytes: int, latency_us: float) -> float | None:
    """Algorithm bandwidth in GB/s; None when the latency is not positive."""
    return message_bytes / latency_us / 1e3 if latency_us > 0 else None


def bus_bandwidth_gb_s(collective: str, message_bytes: int, latency_us: float, world_size: int) -> float | None:
    algbw = alg_bandwidth_gb_s(message_bytes, latency_us)
    return None if algbw is None else algbw * bus_bandwidth_factor(collective, world_size)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); `values` not empty."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize_latencies_us(samples_us: Sequence[float]) -> dict[str, float]:
    """`iters` and the median (`latency_us`), p10, p90, mean, min, max of per-iteration latencies."""
    if not samples_us:
        raise ProbeError("no timed iterations to summarize", hint="use --iters 1 or more")
    return {"iters": len(samples_us), "latency_us": percentile(samples_us, 50.0), "latency_us_p10": percentile(samples_us, 10.0),
            "latency_us_p90": percentile(samples_us, 90.0), "latency_us_mean": statistics.fmean(samples_us),
            "latency_us_min": min(samples_us), "latency_us_max": max(samples_us)}


def combine_rank_samples_us(per_rank_samples_us: Sequence[Sequence[float]]) -> list[float]:
    """Per-iteration latency of a collective: it completes when its last rank does, so the slowest rank's time."""
    lengths = {len(samples) for samples in per_rank_samples_us}
    if len(lengths) != 1:
        raise ProbeError(f"ranks timed different iteration counts {sorted(lengths)}",
                         hint="a rank failed part-way; see the rank logs in the probe's JSON")
    return [max(values) for values in zip(*per_rank_samples_us)]


def decode_message_bytes(hidden_size: int, tokens: int, dtype_bytes: int = BF16_BYTES) -> int:
    """Bytes of the activation a TP decode/verify step all-reduces: hidden_size × tokens × dtype bytes."""
    if hidden_size < 1 or tokens < 1:
        raise ProbeError(f"hidden size {hidden_size} and tokens {tokens} must be positive",
                         hint="e.g. --hidden-size 2048 --tokens 1,2,4,8")
    return hidden_size * tokens * dtype_bytes


def sweep_message_bytes(smallest_bytes: int = 8, largest_bytes: int = 64 * 1024 * 1024) -> list[int]:
    """Sizes smallest, ×2, … up to largest (inclusive), like nccl-tests' -b 8 -e 64M -f 2."""
    return [smallest_bytes << i for i in range((largest_bytes // smallest_bytes).bit_length())]


def element_count(collective: str, message_bytes: int, world_size: int, dtype_bytes: int = BF16_BYTES) -> int:
    """Elements of the full buffer (all_gather: the gathered output), rounded up so every rank gets whole elements."""
    elements = max(1, math.ceil(message_bytes / dtype_bytes))
    return math.ceil(elements / world_size) * world_size if collective == "all_gather" else elements
