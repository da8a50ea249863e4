"""NCCL evidence: which NCCL settings each run really had, what NCCL served, and what communication costs.

Entry point: `nccl_evidence(con, run_ids, hidden_size=None, num_layers=None) -> NcclEvidence`: a thin
loader (`load_nccl_frames`) reads DuckDB into polars frames, and the pure `compute_nccl_evidence(frames, …)`
does the rest. Reports render NcclEvidence and compute nothing.

NcclEvidence (frozen; every tuple is in run order as given):
  runs:          RunNccl per run —
                   nccl_version, info_lines (lines with NCCL's INFO head), processes (distinct pids), ranks;
                   settings: NcclSetting per variable — log_value ("NAME set by environment to VALUE"; None when
                     NCCL never said), env_value (runs.env NCCL_* from run.json; None when not recorded there),
                     agrees (False = the log and the recorded env disagree; None = one side is missing);
                   coll_channels / p2p_channels ("24 coll channels, … 32 p2p channels" line), transports
                     (TransportUse: 'P2P/IPC', 'SHM', 'NET/Socket' … with the channels and peer pairs using it);
                   collectives: CollectiveUse per (collective, algo, proto, phase) from the tuning lines
                     ("AllReduce: 33554432 Bytes -> Algo RING proto SIMPLE …"), bytes as NCCL prints them
                     (AllGather: bytes each rank sends); phase = 'init' | 'capture <graph>' | 'startup' | 'serving';
                   allreduce_verdict: one sentence on whether NCCL or SGLang's custom all-reduce served TP all-reduces.
  settings_diff: SettingDiff per setting whose value differs between the runs (log value, else recorded env value;
                 'effective …' rows are what NCCL chose: coll channels, algo/proto per collective).
  estimates:     CommShareEstimate per run that has spec_cycles and a matching probe: all-reduce latency at the
                 verify message size × all-reduces per verify forward / median verify_ms, with its assumptions.
  findings:      Finding(code, message, severity 'warning'|'info', runs=run names) — the
                 analysis' one finding type (speclogs.analysis.results) — warnings as data; codes:
                 nccl_no_info_lines, nccl_single_gpu, nccl_env_mismatch, nccl_env_not_in_log, nccl_set_in_process,
                 nccl_no_env_recorded, nccl_ranks_disagree, nccl_launches_differ, nccl_version_differs, nccl_settings_differ,
                 nccl_no_tuning_lines, nccl_allreduce_bypassed, nccl_allreduce_served, nccl_estimate_unavailable,
                 nccl_probe_mismatch, nccl_estimate_implausible.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from speclogs.analysis.results import UNSET, Finding
from speclogs.errors import AnalysisError

# variables NCCL never echoes as "set by environment" (logging switches; NCCL_VERSION is an informational label
# NVIDIA's containers set, not a setting), so their absence proves nothing
_NOT_ECHOED = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_VERSION"})
# SGLang sets these inside the server process (from --enable-symm-mem / --enable-nccl-nvls)
_SET_BY_SGLANG = frozenset({"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"})
# an estimated communication share above this is not believable for a verify pass that also computes every layer
_IMPLAUSIBLE_SHARE = 0.5
_TINY_ALLREDUCE_BYTES = 64          # init-time sanity all-reduces (a 4 B AllReduce at communicator setup)
_COLLECTIVE_NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather"}


@dataclass(frozen=True)
class NcclSetting:
    name: str
    log_value: str | None
    env_value: str | None
    agrees: bool | None


@dataclass(frozen=True)
class TransportUse:
    transport: str
    channels: int
    peer_pairs: tuple[str, ...]        # '0->1'


@dataclass(frozen=True)
class CollectiveUse:
    collective: str                    # as NCCL prints it: AllReduce, AllGather, …
    algo: str
    proto: str
    phase: str
    lines: int
    min_bytes: int
    max_bytes: int


@dataclass(frozen=True)
class RunNccl:
    run_id: str
    run_name: str
    tp_size: int | None
    nccl_version: str | None
    info_lines: int
    processes: int
    ranks: tuple[int, ...]
    settings: tuple[NcclSetting, ...]
    coll_channels: int | None
    p2p_channels: int | None
    transports: tuple[TransportUse, ...]
    collectives: tuple[CollectiveUse, ...]
    tuning_lines: int
    allreduce_verdict: str


@dataclass(frozen=True)
class SettingDiff:
    name: str
    values: tuple[tuple[str, str | None], ...]      # (run_name, value) in run order


@dataclass(frozen=True)
class CommShareEstimate:
    run_id: str
    run_name: str
    probe_id: str
    env_set: str
    env_set_matches: bool              # the probe env set has the run's NCCL settings
    verify_tokens: int
    message_bytes: int
    allreduce_latency_us: float
    latency_source: str                # "cuda_graph" (replayed, as verify runs) | "eager" (per call, host launch included)
    allreduces_per_verify: int
    comm_ms: float
    verify_ms: float
    share: float                       # comm_ms / verify_ms
    assumptions: tuple[str, ...]


@dataclass(frozen=True)
class NcclEvidence:
    runs: tuple[RunNccl, ...]
    settings_diff: tuple[SettingDiff, ...]
    estimates: tuple[CommShareEstimate, ...]
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class NcclFrames:
    """What compute_nccl_evidence reads (column names as in schema.sql)."""

    runs: pl.DataFrame           # run_id, run_name, tp_size, env (JSON text or None)
    nccl_events: pl.DataFrame    # nccl_events columns
    markers: pl.DataFrame        # server_events: run_id, source_file, line_no, tp_rank, kind, graph
    server_args: pl.DataFrame    # run_id, name, value
    spec_cycles: pl.DataFrame    # run_id, batch_size, verify_ms
    probe: pl.DataFrame          # nccl_probe columns


# --- loader -----------------------------------------------------------------------------------------

def load_nccl_frames(con: Any, run_ids: list[str]) -> NcclFrames:
    """Read the rows of `run_ids` (and every nccl_probe row) from a speclogs DuckDB connection."""
    if not run_ids:
        raise AnalysisError("no runs to examine", hint="name runs, e.g. speclogs report --compare baseline eagle3")
    where = "WHERE run_id IN (SELECT unnest(?::VARCHAR[]))"

    def select(sql: str, parameters: list | None = None) -> pl.DataFrame:
        return pl.DataFrame(con.sql(sql, params=[run_ids] if parameters is None else parameters))

    runs = select(f"SELECT run_id, run_name, tp_size, CAST(env AS VARCHAR) AS env FROM runs {where}")
    missing = sorted(set(run_ids) - set(runs["run_id"].to_list()))
    if missing:
        raise AnalysisError(f"unknown run ids: {', '.join(missing)}",
                            hint='see `speclogs sql "SELECT run_id, run_name FROM runs"`')
    return NcclFrames(
        runs=runs,
        nccl_events=select(f"SELECT * FROM nccl_events {where}"),
        markers=select(f"""SELECT run_id, source_file, line_no, tp_rank, kind, graph FROM server_events {where}
                          AND kind IN ('ready', 'cuda_graph_begin', 'cuda_graph_end', 'init_dist_begin', 'init_dist_end')"""),
        server_args=select(f"""SELECT DISTINCT run_id, name, value FROM server_args {where} AND name IN
                              ('tp_size', 'disable_custom_all_reduce', 'speculative_num_draft_tokens', 'enable_symm_mem',
                               'enable_nccl_nvls', 'speculative_algorithm')"""),
        spec_cycles=select(f"SELECT run_id, batch_size, verify_ms FROM spec_cycles {where}"),
        probe=select("SELECT * EXCLUDE (env), CAST(env AS VARCHAR) AS env FROM nccl_probe", []),
    )


def nccl_evidence(con: Any, run_ids: list[str], *, hidden_size: int | None = None,
                  num_layers: int | None = None) -> NcclEvidence:
    """NCCL evidence for `run_ids` from a speclogs database (see the module docstring)."""
    return compute_nccl_evidence(load_nccl_frames(con, run_ids), hidden_size=hidden_size, num_layers=num_layers)


# --- pure part --------------------------------------------------------------------------------------

def compute_nccl_evidence(frames: NcclFrames, *, hidden_size: int | None = None,
                          num_layers: int | None = None) -> NcclEvidence:
    findings: list[Finding] = []
    runs: list[RunNccl] = []
    for run in frames.runs.iter_rows(named=True):
        run_id = run["run_id"]
        events = frames.nccl_events.filter(pl.col("run_id") == run_id)
        args = _server_args(frames.server_args, run_id)
        tp_size = run.get("tp_size") or _int_or_none(args.get("tp_size"))
        env = _recorded_nccl_env(run.get("env"))
        run_nccl, run_findings = _examine_run(run_id, run["run_name"], tp_size, env, events,
                                              frames.markers.filter(pl.col("run_id") == run_id), args, hidden_size)
        runs.append(run_nccl)
        findings += run_findings

    versions = {run.nccl_version for run in runs if run.nccl_version}
    if len(versions) > 1:
        findings.append(Finding(
            "nccl_version_differs",
            "the runs used different NCCL versions: " + ", ".join(f"{run.run_name} {run.nccl_version}" for run in runs),
            runs=tuple(run.run_name for run in runs)))
    settings_diff = _settings_diff(runs)
    if settings_diff and len(runs) > 1:
        shown = "; ".join(
            f"{diff.name}: " + ", ".join(f"{name}={value if value is not None else UNSET}" for name, value in diff.values)
            for diff in settings_diff)
        findings.append(Finding("nccl_settings_differ", f"NCCL settings differ between the compared runs: {shown}",
                                    runs=tuple(run.run_name for run in runs)))
    estimates, estimate_findings = _estimates(frames, runs, hidden_size, num_layers)
    return NcclEvidence(runs=tuple(runs), settings_diff=tuple(settings_diff), estimates=tuple(estimates),
                        findings=tuple(findings + estimate_findings))


def _examine_run(run_id: str, run_name: str, tp_size: int | None, env: dict[str, str] | None,
                 events: pl.DataFrame, markers: pl.DataFrame, args: dict[str, str],
                 hidden_size: int | None) -> tuple[RunNccl, list[Finding]]:
    findings: list[Finding] = []
    # NCCL's own lines ('host:pid:tid [rank] NCCL INFO …'), not SGLang's "sglang is using nccl==…" nor the headless
    # rows of NCCL's algorithm table: a log with only those proves nothing about the NCCL settings
    info_lines = events.filter(pl.col("nccl_rank").is_not_null()).height
    version = _nccl_version(events)
    log_settings, disagreeing = _log_settings(events)
    for name, values in disagreeing.items():
        findings.append(Finding("nccl_ranks_disagree",
                                    f"{run_name}: NCCL processes report different {name}: {', '.join(sorted(values))}",
                                    runs=(run_name,)))
    settings = _settings(run_name, log_settings, env, info_lines, findings)
    lost = _launch_differences(events)
    if lost:
        findings.append(Finding(
            "nccl_launches_differ",
            f"{run_name}: THE SERVER STARTS IN THIS RUN HAD DIFFERENT NCCL SETTINGS — {lost} (a restart without the "
            "same environment loses NCCL tuning silently)", runs=(run_name,)))

    if info_lines == 0:
        if tp_size == 1:
            findings.append(Finding("nccl_single_gpu", f"{run_name}: single GPU (tp_size 1): no NCCL communicator "
                                        "for tensor parallelism, so NCCL settings do not matter", "info", runs=(run_name,)))
        else:
            findings.append(Finding(
                "nccl_no_info_lines",
                f"{run_name}: NO NCCL INFO LINES — nothing can be proven about the NCCL settings this run really had "
                "(a recorded env is only what was asked for). Run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING.",
                runs=(run_name,)))

    coll_channels, p2p_channels = _channel_counts(events)
    transports = _transports(events)
    collectives = _collectives(events, markers)
    tuning_lines = sum(use.lines for use in collectives)
    verdict = _allreduce_verdict(run_name, tp_size, info_lines, collectives, args, hidden_size, findings)
    ranks = tuple(sorted({int(rank) for rank in events["nccl_rank"].drop_nulls().to_list()})) if info_lines else ()
    processes = events["pid"].drop_nulls().n_unique() if info_lines else 0
    return RunNccl(run_id=run_id, run_name=run_name, tp_size=tp_size, nccl_version=version, info_lines=info_lines,
                   processes=processes, ranks=ranks, settings=tuple(settings), coll_channels=coll_channels,
                   p2p_channels=p2p_channels, transports=tuple(transports), collectives=tuple(collectives),
                   tuning_lines=tuning_lines, allreduce_verdict=verdict), findings


def _nccl_version(events: pl.DataFrame) -> str | None:
    """NCCL's own line ("NCCL version 2.28.9+cuda13.0", has a rank) before SGLang's "sglang is using nccl==2.28.9"."""
    versions = events.filter((pl.col("kind") == "version") & pl.col("value").is_not_null()
                             & (pl.col("name").is_null() | (pl.col("name") == "nccl")))
    if versions.is_empty():
        return None
    return str(versions.sort(pl.col("nccl_rank").is_null(), "line_no")["value"][0])


def _log_settings(events: pl.DataFrame) -> tuple[dict[str, str], dict[str, set[str]]]:
    """NAME → VALUE from "set by environment" lines; names whose processes report different values."""
    seen: dict[str, set[str]] = {}
    env = events.filter((pl.col("kind") == "env") & pl.col("name").is_not_null() & pl.col("value").is_not_null())
    for name, value in env.select("name", "value").iter_rows():
        seen.setdefault(str(name), set()).add(str(value))
    settings = {name: sorted(values)[0] for name, values in seen.items()}
    return settings, {name: values for name, values in seen.items() if len(values) > 1}


def _launch_differences(events: pl.DataFrame) -> str | None:
    """Describe how the NCCL settings of the server starts (launch_no) within one run differ; None when they agree."""
    if events.is_empty() or "launch_no" not in events.columns:
        return None
    launches = sorted({int(launch) for launch in events["launch_no"].drop_nulls().to_list()})
    if len(launches) < 2:
        return None
    per_launch = {launch: _log_settings(events.filter(pl.col("launch_no") == launch))[0] for launch in launches}
    names = sorted({name for settings in per_launch.values() for name in settings})
    differing = [name for name in names if len({per_launch[launch].get(name) for launch in launches}) > 1]
    if not differing:
        return None
    return "; ".join(
        f"{name}: " + ", ".join(f"launch {launch} {per_launch[launch].get(name) or 'not set'}" for launch in launches)
        for name in differing)


def _settings(run_name: str, log_settings: dict[str, str], env: dict[str, str] | None, info_lines: int,
              findings: list[Finding]) -> list[NcclSetting]:
    names = sorted(set(log_settings) | set(env or {}))
    settings = []
    if env is None and info_lines:
        findings.append(Finding("nccl_no_env_recorded", f"{run_name}: no recorded environment (a plain log, no "
                                    "run.json): NCCL settings come from the log alone", "info", runs=(run_name,)))
    mismatches, unconfirmed, in_process = [], [], []
    for name in names:
        log_value = log_settings.get(name)
        env_value = None if env is None else env.get(name)
        agrees = None if log_value is None or env_value is None else log_value == env_value
        settings.append(NcclSetting(name=name, log_value=log_value, env_value=env_value, agrees=agrees))
        if agrees is False:
            mismatches.append(f"{name}: log says {log_value}, recorded env says {env_value}")
        elif env is not None and log_value is None and info_lines and name not in _NOT_ECHOED:
            unconfirmed.append(f"{name}={env_value}")
        elif env is not None and env_value is None and log_value is not None:
            in_process.append(f"{name}={log_value}")
    if mismatches:
        findings.append(Finding(
            "nccl_env_mismatch",
            f"{run_name}: THE LOG AND THE RECORDED ENV DISAGREE — " + "; ".join(mismatches)
            + ". NCCL used the log's values (something in the server process changed them).", runs=(run_name,)))
    if unconfirmed:
        findings.append(Finding(
            "nccl_env_not_in_log",
            f"{run_name}: the recorded env sets {', '.join(unconfirmed)} but NCCL never reported reading it "
            "(no 'set by environment' line): it may not have reached the NCCL processes", runs=(run_name,)))
    if in_process:
        by_sglang = all(item.split("=")[0] in _SET_BY_SGLANG for item in in_process)
        findings.append(Finding(
            "nccl_set_in_process",
            f"{run_name}: NCCL reports {', '.join(in_process)} although the recorded env lacks it: set inside the "
            "server process" + (" (SGLang sets NCCL_CUMEM_ENABLE / NCCL_NVLS_ENABLE from --enable-symm-mem / "
                                "--enable-nccl-nvls)" if by_sglang else ""),
            "info" if by_sglang else "warning", runs=(run_name,)))
    return settings


def _channel_counts(events: pl.DataFrame) -> tuple[int | None, int | None]:
    """(coll channels, p2p channels) from the counts line ("24 coll channels, … 32 p2p channels": nchannels,
    p2p_channels); without one, the coll channels from the ring lines ("Channel 00/24 : 0 1": nchannels)."""
    channels = events.filter((pl.col("kind") == "channels") & pl.col("nchannels").is_not_null())
    if channels.is_empty():
        return None, None
    counts = channels.filter(pl.col("channel").is_null())
    coll = (counts if not counts.is_empty() else channels)["nchannels"].max()
    p2p = counts["p2p_channels"].max() if not counts.is_empty() else None
    return (int(coll) if coll is not None else None), (int(p2p) if p2p is not None else None)


def _transports(events: pl.DataFrame) -> list[TransportUse]:
    """Per transport ('P2P/IPC', 'SHM/direct/direct', 'NET/Socket' …): the channels and peer pairs using it."""
    rows = events.filter((pl.col("kind") == "transport") & pl.col("transport").is_not_null())
    uses = []
    for transport in sorted(set(rows["transport"].to_list())):
        mine = rows.filter(pl.col("transport") == transport)
        pairs = {f"{peer_from}->{peer_to}" for peer_from, peer_to in mine.select("peer_from", "peer_to").iter_rows()}
        uses.append(TransportUse(transport=str(transport), channels=mine["channel"].n_unique(),
                                 peer_pairs=tuple(sorted(pairs))))
    return uses


def _tuning_frame(events: pl.DataFrame) -> pl.DataFrame:
    """Tuning lines ("AllReduce: 33554432 Bytes -> Algo RING proto SIMPLE …") as
    (source_file, line_no, collective, bytes, algo, proto)."""
    return (events.filter((pl.col("kind") == "tuning") & pl.col("collective").is_not_null() & pl.col("bytes").is_not_null())
            .select(pl.col("source_file").cast(pl.String), pl.col("line_no").cast(pl.Int64),
                    pl.col("collective").cast(pl.String), pl.col("bytes").cast(pl.Int64),
                    pl.col("algo").cast(pl.String).str.to_uppercase(), pl.col("proto").cast(pl.String).str.to_uppercase()))


def _phase_frame(markers: pl.DataFrame) -> pl.DataFrame:
    """Lifecycle markers of rank 0 (NCCL logs tuning on rank 0) as (source_file, line_no, phase)."""
    schema = {"source_file": pl.String, "line_no": pl.Int64, "phase": pl.String}
    if markers.is_empty():
        return pl.DataFrame(schema=schema)
    rows = []
    for row in markers.filter(pl.col("tp_rank").is_null() | (pl.col("tp_rank") == 0)).iter_rows(named=True):
        kind = row["kind"]
        if kind == "ready":
            phase = "serving"
        elif kind == "cuda_graph_begin":
            phase = f"capture {row.get('graph') or 'graph'}"
        elif kind == "init_dist_begin":
            phase = "init"
        else:
            phase = "startup"
        rows.append({"source_file": row["source_file"], "line_no": int(row["line_no"]), "phase": phase})
    return pl.DataFrame(rows, schema=schema).sort("source_file", "line_no")


def _collectives(events: pl.DataFrame, markers: pl.DataFrame) -> list[CollectiveUse]:
    tuning = _tuning_frame(events)
    if tuning.is_empty():
        return []
    phases = _phase_frame(markers)
    tuning = tuning.sort("source_file", "line_no")
    if phases.is_empty():
        tuning = tuning.with_columns(pl.lit("startup").alias("phase"))
    else:
        tuning = tuning.join_asof(phases, on="line_no", by="source_file", strategy="backward",
                                check_sortedness=False).with_columns(
            pl.col("phase").fill_null("startup"))
    grouped = (tuning.group_by("collective", "algo", "proto", "phase")
               .agg(pl.len().alias("lines"), pl.col("bytes").min().alias("min_bytes"), pl.col("bytes").max().alias("max_bytes"),
                    pl.col("line_no").min().alias("first_line"))
               .sort("first_line"))
    return [CollectiveUse(collective=row["collective"], algo=row["algo"], proto=row["proto"], phase=row["phase"],
                          lines=row["lines"], min_bytes=row["min_bytes"], max_bytes=row["max_bytes"])
            for row in grouped.iter_rows(named=True)]


def _size(message_bytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if message_bytes >= scale:
            value = message_bytes / scale
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{message_bytes} B"


def _allreduce_verdict(run_name: str, tp_size: int | None, info_lines: int, collectives: list[CollectiveUse],
                       args: dict[str, str], hidden_size: int | None, findings: list[Finding]) -> str:
    if tp_size == 1:
        return "single GPU: no tensor-parallel all-reduce"
    if info_lines == 0:
        return "unknown: no NCCL INFO lines"
    if not collectives:
        findings.append(Finding(
            "nccl_no_tuning_lines",
            f"{run_name}: no NCCL tuning lines (NCCL_DEBUG_SUBSYS without TUNING?): which collectives NCCL served, and with "
            "which algorithm/protocol, cannot be told", "info", runs=(run_name,)))
        return "unknown: no NCCL tuning lines (add TUNING to NCCL_DEBUG_SUBSYS)"
    custom = args.get("disable_custom_all_reduce")
    custom_note = {"False": "SGLang's custom all-reduce was enabled (disable_custom_all_reduce=False)",
                   "True": "SGLang's custom all-reduce was DISABLED (disable_custom_all_reduce=True)"}.get(
        str(custom), "whether SGLang's custom all-reduce was enabled is unknown (no server_args)")
    allreduce = [use for use in collectives if use.collective == "AllReduce" and use.max_bytes > _TINY_ALLREDUCE_BYTES]
    others = []
    for collective in sorted({use.collective for use in collectives if use.collective != "AllReduce"}):
        uses = [use for use in collectives if use.collective == collective]
        low, high = min(use.min_bytes for use in uses), max(use.max_bytes for use in uses)
        sizes = _size(low) if low == high else f"{_size(low)}–{_size(high)}"
        others.append(f"{collective} ({sizes}, {sum(use.lines for use in uses)} tuning lines)")
    served_note = f" Besides, NCCL served {', '.join(others)}." if others else ""
    serving = sum(use.lines for use in collectives if use.phase == "serving")
    replay_note = (" NCCL logs a tuning line when a collective is enqueued — eagerly or while a CUDA graph is captured — "
                   "not when a captured graph replays, so decode/verify under CUDA graphs shows up only in the capture "
                   f"phases ({serving} tuning lines after the server was ready).")
    if not allreduce:
        verdict = (f"NCCL served no tensor-parallel all-reduce (only init-time AllReduce of ≤ {_TINY_ALLREDUCE_BYTES} B). "
                   f"{custom_note}: TP all-reduces, decode and verify included, went through it (or another non-NCCL path), "
                   f"so NCCL settings cannot have changed all-reduce cost in this run.{served_note}")
        findings.append(Finding("nccl_allreduce_bypassed", f"{run_name}: {verdict}{replay_note}", "info", runs=(run_name,)))
        return verdict
    smallest = min(use.min_bytes for use in allreduce)
    phases = sorted({use.phase for use in allreduce})
    choices = sorted({f"{use.algo}/{use.proto}" for use in allreduce})
    decode_note = ""
    if hidden_size:
        decode_max = hidden_size * 64 * 2
        decode_note = (f" Decode/verify all-reduces (hidden {hidden_size} × ≤ 64 tokens × 2 B ≤ {_size(decode_max)}) "
                       + ("are below that, so they did NOT go through NCCL." if smallest > decode_max
                          else "overlap those sizes: NCCL settings do affect decode/verify."))
    verdict = (f"NCCL served AllReduce only at ≥ {_size(smallest)} ({', '.join(choices)}; during {', '.join(phases)}); "
               f"smaller all-reduces never appear in NCCL's tuning lines. {custom_note}.{decode_note}{served_note}")
    findings.append(Finding("nccl_allreduce_served", f"{run_name}: {verdict}{replay_note}", "info", runs=(run_name,)))
    return verdict


def _effective(run: RunNccl) -> dict[str, str]:
    values: dict[str, str] = {}
    if run.coll_channels is not None:
        values["effective coll channels"] = str(run.coll_channels)
    for collective in sorted({use.collective for use in run.collectives}):
        choices = sorted({f"{use.algo}/{use.proto}" for use in run.collectives if use.collective == collective
                          and not (collective == "AllReduce" and use.max_bytes <= _TINY_ALLREDUCE_BYTES)})
        if choices:
            values[f"effective {collective} algo/proto"] = ", ".join(choices)
    if run.transports:
        values["effective transport"] = ", ".join(use.transport for use in run.transports)
    return values


def _settings_diff(runs: list[RunNccl]) -> list[SettingDiff]:
    per_run: list[dict[str, str]] = []
    for run in runs:
        values = {setting.name: setting.log_value if setting.log_value is not None else setting.env_value
                  for setting in run.settings}
        values.update(_effective(run))
        per_run.append({name: value for name, value in values.items() if value is not None})
    names = sorted({name for values in per_run for name in values}, key=lambda name: (name.startswith("effective"), name))
    diffs = []
    for name in names:
        column = [values.get(name) for values in per_run]
        if len(set(column)) > 1:
            diffs.append(SettingDiff(name=name, values=tuple((run.run_name, value) for run, value in zip(runs, column))))
    return diffs


# --- communication share of verify time --------------------------------------------------------------

def _estimates(frames: NcclFrames, runs: list[RunNccl], hidden_size: int | None,
               num_layers: int | None) -> tuple[list[CommShareEstimate], list[Finding]]:
    estimates: list[CommShareEstimate] = []
    findings: list[Finding] = []
    probe = frames.probe.filter(pl.col("collective") == "all_reduce") if not frames.probe.is_empty() else frames.probe
    for run in runs:
        cycles = frames.spec_cycles.filter(pl.col("run_id") == run.run_id).drop_nulls("verify_ms")
        if cycles.is_empty():
            continue                       # not a profiled EAGLE run: nothing to estimate, nothing to say
        why = None
        args = _server_args(frames.server_args, run.run_id)
        draft_tokens = _int_or_none(args.get("speculative_num_draft_tokens"))
        probe_hidden = _probe_hidden_size(probe)
        hidden = hidden_size or probe_hidden
        if probe.is_empty():
            why = "no NCCL probe results in the database (run `speclogs probe nccl` on the GPU machine, then ingest its JSON)"
        elif draft_tokens is None:
            why = "speculative_num_draft_tokens is unknown (no server_args)"
        elif num_layers is None:
            why = "the target's layer count is unknown: pass num_layers (e.g. --num-layers 16)"
        elif hidden is None:
            why = "the hidden size is unknown: pass hidden_size (e.g. --hidden-size 2048)"
        if why:
            findings.append(Finding("nccl_estimate_unavailable",
                                        f"{run.run_name}: no estimate of the communication share of verify time: {why}",
                                        "info", runs=(run.run_name,)))
            continue
        batch_size = int(cycles["batch_size"].drop_nulls().median() or 1)
        verify_ms = float(cycles["verify_ms"].median())
        verify_tokens = batch_size * draft_tokens
        message_bytes = hidden * verify_tokens * 2
        env_set, matches = _matching_env_set(probe, run)
        rows = probe.filter(pl.col("env_set") == env_set)
        probe_id = str(rows["probe_id"][0])
        in_graph = rows.drop_nulls("graph_latency_us") if "graph_latency_us" in rows.columns else rows.clear()
        source = "cuda_graph" if not in_graph.is_empty() else "eager"
        timed = in_graph if source == "cuda_graph" else rows
        latency_us = interpolate_latency_us(
            timed["bytes"].to_list(), timed["graph_latency_us" if source == "cuda_graph" else "latency_us"].to_list(), message_bytes
        )
        per_verify = 2 * num_layers
        comm_ms = latency_us * per_verify / 1000.0
        assumptions = [
            f"{per_verify} all-reduces per verify forward: 2 per layer (attention output, MLP output) × {num_layers} layers",
            f"verify message = hidden {hidden} × {verify_tokens} tokens (batch {batch_size} × {draft_tokens} draft tokens) × 2 B (bf16) "
            f"= {_size(message_bytes)}",
            f"all-reduce latency = probe median at that size (env set '{env_set}'"
            + ("" if matches else ", which does NOT match this run's NCCL settings") + "), interpolated in log size",
            f"verify_ms = median of {cycles.height} spec_cycles rows",
            ("the probe replayed the all-reduces from a CUDA graph, as verify does"
             if source == "cuda_graph" else
             "the probe timed eager NCCL calls (host launch and rank skew included); verify replays a CUDA graph")
            + "; SGLang's custom all-reduce may serve these sizes instead of NCCL (see allreduce_verdict): read the share "
            "as what NCCL all-reduces would cost",
        ]
        if hidden_size is None:
            assumptions.append(f"hidden size {hidden} taken from the probe's decode sizes (bytes / tokens / 2)")
        world_sizes = set(rows["world_size"].to_list())
        if run.tp_size is not None and world_sizes and run.tp_size not in world_sizes:
            findings.append(Finding("nccl_probe_mismatch", f"{run.run_name}: tp_size {run.tp_size} but the probe ran with "
                                        f"{sorted(world_sizes)} ranks: the estimate does not transfer", runs=(run.run_name,)))
        if not matches:
            findings.append(Finding("nccl_probe_mismatch", f"{run.run_name}: no probe env set has this run's NCCL settings; "
                                        f"the estimate uses '{env_set}'", runs=(run.run_name,)))
        if verify_ms > 0 and comm_ms > _IMPLAUSIBLE_SHARE * verify_ms:
            findings.append(Finding(
                "nccl_estimate_implausible",
                f"{run.run_name}: {per_verify} NCCL all-reduces at the probe's {latency_us:.1f} µs "
                f"({'in a CUDA graph' if source == 'cuda_graph' else 'eager'}) would take "
                f"{comm_ms:.2f} ms, {comm_ms / verify_ms:.0%} of the whole measured verify ({verify_ms:.2f} ms, which also "
                "computes every layer): "
                + ("NCCL all-reduces cost more than verify can hold, so verify's come from elsewhere (SGLang's custom "
                   "all-reduce)" if source == "cuda_graph" else
                   "the probe's per-call latency (host launch and rank skew included) overstates what all-reduces cost "
                   "inside verify's CUDA graph, where SGLang's custom all-reduce serves them")
                + " — read the share as an upper bound only",
                "warning", runs=(run.run_name,)))
        estimates.append(CommShareEstimate(
            run_id=run.run_id, run_name=run.run_name, probe_id=probe_id, env_set=env_set, env_set_matches=matches,
            verify_tokens=verify_tokens, message_bytes=message_bytes, allreduce_latency_us=latency_us,
            latency_source=source, allreduces_per_verify=per_verify, comm_ms=comm_ms, verify_ms=verify_ms,
            share=comm_ms / verify_ms if verify_ms > 0 else math.nan, assumptions=tuple(assumptions)))
    return estimates, findings


def interpolate_latency_us(sizes_bytes: list[int], latencies_us: list[float], message_bytes: int) -> float:
    """Latency at `message_bytes` by linear interpolation in log2(size) between measured sizes (clamped at the ends;
    several measurements at one size → their median)."""
    if not sizes_bytes:
        raise AnalysisError("no probe measurements to interpolate", hint="run `speclogs probe nccl` and ingest its JSON")
    by_size: dict[int, list[float]] = {}
    for size, latency in zip(sizes_bytes, latencies_us):
        by_size.setdefault(int(size), []).append(float(latency))
    points = sorted((size, sorted(values)[len(values) // 2] if len(values) % 2 else
                     (sorted(values)[len(values) // 2 - 1] + sorted(values)[len(values) // 2]) / 2)
                    for size, values in by_size.items())
    if message_bytes <= points[0][0]:
        return points[0][1]
    if message_bytes >= points[-1][0]:
        return points[-1][1]
    for (low_size, low_latency), (high_size, high_latency) in zip(points, points[1:]):
        if low_size <= message_bytes <= high_size:
            fraction = (math.log2(message_bytes) - math.log2(low_size)) / (math.log2(high_size) - math.log2(low_size))
            return low_latency + (high_latency - low_latency) * fraction
    return points[-1][1]


def _matching_env_set(probe: pl.DataFrame, run: RunNccl) -> tuple[str, bool]:
    """The probe env set whose NCCL tuning variables equal the run's (from its log, else its recorded env)."""
    wanted = {setting.name: (setting.log_value if setting.log_value is not None else setting.env_value)
              for setting in run.settings if setting.name not in _NOT_ECHOED | _SET_BY_SGLANG}
    wanted = {name: value for name, value in wanted.items() if value is not None}
    env_sets = probe.select("env_set", "env").unique(subset="env_set", keep="first", maintain_order=True)
    for row in env_sets.iter_rows(named=True):
        env = _recorded_nccl_env(row["env"]) or {}
        tuning = {name: value for name, value in env.items() if name not in _NOT_ECHOED | _SET_BY_SGLANG}
        if tuning == wanted:
            return row["env_set"], True
    names = env_sets["env_set"].to_list()
    return ("default" if "default" in names else names[0]), False


def _probe_hidden_size(probe: pl.DataFrame) -> int | None:
    if probe.is_empty():
        return None
    decode = probe.drop_nulls("tokens").filter(pl.col("tokens") > 0)
    sizes = {int(row["bytes"]) // (int(row["tokens"]) * 2) for row in decode.iter_rows(named=True)}
    return sizes.pop() if len(sizes) == 1 else None


def _server_args(server_args: pl.DataFrame, run_id: str) -> dict[str, str]:
    if server_args.is_empty():
        return {}
    return {row["name"]: str(row["value"]) for row in server_args.filter(pl.col("run_id") == run_id).iter_rows(named=True)}


def _recorded_nccl_env(env: Any) -> dict[str, str] | None:
    if env is None:
        return None
    if isinstance(env, str):
        try:
            env = json.loads(env)
        except json.JSONDecodeError:
            return None
    if not isinstance(env, dict):
        return None
    return {str(key): str(value) for key, value in env.items() if str(key).startswith("NCCL_")}


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None or value == "None" else int(value)
    except (TypeError, ValueError):
        return None
