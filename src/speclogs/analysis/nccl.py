"""NCCL evidence: which NCCL settings each run really had and what NCCL served (docs/nccl.md lists the fields and the
finding codes). `nccl_evidence(con, run_ids)` reads the rows; `compute_nccl_evidence(frames)` is pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from speclogs.analysis.load import IN_RUNS, parse_json_text, select
from speclogs.analysis.results import UNSET, Finding
from speclogs.doctor import int_or_none
from speclogs.errors import AnalysisError

# variables NCCL never echoes as "set by environment" (logging switches; NCCL_VERSION is an informational label
# NVIDIA's containers set, not a setting), so their absence proves nothing
_NOT_ECHOED = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_VERSION"})
# SGLang sets these inside the server process (from --enable-symm-mem / --enable-nccl-nvls)
_SET_BY_SGLANG = frozenset({"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"})
_TINY_ALLREDUCE_BYTES = 64          # init-time sanity all-reduces (a 4 B AllReduce at communicator setup)


@dataclass(frozen=True)
class NcclSetting:
    name: str
    log_value: str | None
    env_value: str | None
    agrees: bool | None           # False: the log and the recorded env disagree; None: one side is missing


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
    phase: str                         # 'init' | 'capture <graph>' | 'startup' | 'serving'
    lines: int
    min_bytes: int                     # as NCCL prints them (AllGather: bytes each rank sends)
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
    allreduce_verdict: str


@dataclass(frozen=True)
class SettingDiff:
    name: str
    values: tuple[tuple[str, str | None], ...]      # (run_name, value) in run order


@dataclass(frozen=True)
class NcclEvidence:
    runs: tuple[RunNccl, ...]
    settings_diff: tuple[SettingDiff, ...]
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class NcclFrames:
    runs: pl.DataFrame           # run_id, run_name, tp_size, env (JSON text or None)
    nccl_events: pl.DataFrame    # nccl_events columns
    markers: pl.DataFrame        # server_events: run_id, source_file, line_no, tp_rank, kind, graph
    server_args: pl.DataFrame    # run_id, name, value


def load_nccl_frames(con: Any, run_ids: list[str]) -> NcclFrames:
    if not run_ids:
        raise AnalysisError("no runs to examine", hint="name runs, e.g. speclogs report --compare baseline eagle3")
    runs = select(con, f"SELECT run_id, run_name, tp_size, CAST(env AS VARCHAR) AS env FROM runs WHERE {IN_RUNS}", [run_ids])
    missing = sorted(set(run_ids) - set(runs["run_id"].to_list()))
    if missing:
        raise AnalysisError(f"unknown run ids: {', '.join(missing)}",
                            hint='see `speclogs sql "SELECT run_id, run_name FROM runs"`')
    return NcclFrames(
        runs=runs,
        nccl_events=select(con, f"SELECT * FROM nccl_events WHERE {IN_RUNS}", [run_ids]),
        markers=select(con, f"""SELECT run_id, source_file, line_no, tp_rank, kind, graph FROM server_events WHERE {IN_RUNS}
                                AND kind IN ('ready', 'cuda_graph_begin', 'cuda_graph_end', 'init_dist_begin', 'init_dist_end')""",
                       [run_ids]),
        server_args=select(con, f"""SELECT DISTINCT run_id, name, value FROM server_args WHERE {IN_RUNS} AND name IN
                                    ('tp_size', 'disable_custom_all_reduce')""", [run_ids]),
    )


def nccl_evidence(con: Any, run_ids: list[str], *, hidden_size: int | None = None) -> NcclEvidence:
    return compute_nccl_evidence(load_nccl_frames(con, run_ids), hidden_size=hidden_size)


def compute_nccl_evidence(frames: NcclFrames, *, hidden_size: int | None = None) -> NcclEvidence:
    findings: list[Finding] = []
    runs: list[RunNccl] = []
    args = {run_id: {} for run_id in frames.runs["run_id"]}
    for run_id, name, value in frames.server_args.select("run_id", "name", "value").iter_rows():
        args.setdefault(run_id, {})[name] = str(value)
    for run_id, run_name, tp_size, env in frames.runs.select("run_id", "run_name", "tp_size", "env").iter_rows():
        nccl_env = None if env is None else {k: str(v) for k, v in parse_json_text(env).items() if k.startswith("NCCL_")}
        runs.append(_examine_run(run_id, run_name, tp_size or int_or_none(args[run_id].get("tp_size")),
                                 nccl_env, frames.nccl_events.filter(pl.col("run_id") == run_id),
                                 frames.markers.filter(pl.col("run_id") == run_id), args[run_id], hidden_size, findings))
    names = tuple(run.run_name for run in runs)
    if len({run.nccl_version for run in runs if run.nccl_version}) > 1:
        findings.append(Finding(
            "nccl_version_differs",
            "the runs used different NCCL versions: " + ", ".join(f"{run.run_name} {run.nccl_version}" for run in runs),
            runs=names))
    settings_diff = _settings_diff(runs)
    if settings_diff and len(runs) > 1:
        shown = "; ".join(
            f"{diff.name}: " + ", ".join(f"{name}={value if value is not None else UNSET}" for name, value in diff.values)
            for diff in settings_diff)
        findings.append(Finding("nccl_settings_differ", f"NCCL settings differ between the compared runs: {shown}", runs=names))
    return NcclEvidence(runs=tuple(runs), settings_diff=tuple(settings_diff), findings=tuple(findings))


def _examine_run(run_id: str, run_name: str, tp_size: int | None, env: dict[str, str] | None, events: pl.DataFrame,
                 markers: pl.DataFrame, args: dict[str, str], hidden_size: int | None, findings: list[Finding]) -> RunNccl:
    def say(code: str, text: str, severity: str = "warning") -> None:
        findings.append(Finding(code, f"{run_name}: {text}", severity, runs=(run_name,)))

    # NCCL's own lines ('host:pid:tid [rank] NCCL INFO …'), not SGLang's "sglang is using nccl==…" nor the headless
    # rows of NCCL's algorithm table: a log with only those proves nothing about the NCCL settings
    info_lines = events.filter(pl.col("nccl_rank").is_not_null()).height
    seen = _log_values(events)
    for name, values in seen.items():
        if len(values) > 1:
            say("nccl_ranks_disagree", f"NCCL processes report different {name}: {', '.join(sorted(values))}")
    settings = _settings({name: sorted(values)[0] for name, values in seen.items()}, env, info_lines, say)
    if lost := _launch_differences(events):
        say("nccl_launches_differ", f"THE SERVER STARTS IN THIS RUN HAD DIFFERENT NCCL SETTINGS — {lost} (a restart "
            "without the same environment loses NCCL tuning silently)")
    if info_lines == 0 and tp_size == 1:
        say("nccl_single_gpu", "single GPU (tp_size 1): no NCCL communicator for tensor parallelism, so NCCL settings do "
            "not matter", "info")
    elif info_lines == 0:
        say("nccl_no_info_lines", "NO NCCL INFO LINES — nothing can be proven about the NCCL settings this run really "
            "had (a recorded env is only what was asked for). Run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING.")
    collectives = _collectives(events, markers)
    coll_channels, p2p_channels = _channel_counts(events)
    transports = (events.filter((pl.col("kind") == "transport") & pl.col("transport").is_not_null())
                  .group_by("transport").agg(pl.col("channel").n_unique(), pl.format("{}->{}", "peer_from", "peer_to")
                                             .unique().sort()).sort("transport"))
    return RunNccl(
        run_id=run_id, run_name=run_name, tp_size=tp_size, nccl_version=_nccl_version(events), info_lines=info_lines,
        processes=events["pid"].drop_nulls().n_unique() if info_lines else 0,
        ranks=tuple(sorted({int(rank) for rank in events["nccl_rank"].drop_nulls()})) if info_lines else (),
        settings=tuple(settings), coll_channels=coll_channels, p2p_channels=p2p_channels,
        transports=tuple(TransportUse(str(t), n, tuple(pairs)) for t, n, pairs in transports.iter_rows()),
        collectives=tuple(collectives), allreduce_verdict=_allreduce_verdict(tp_size, info_lines, collectives, args, hidden_size, say))


def _nccl_version(events: pl.DataFrame) -> str | None:
    """NCCL's own line ("NCCL version 2.28.9+cuda13.0", has a rank) before SGLang's "sglang is using nccl==2.28.9"."""
    versions = events.filter((pl.col("kind") == "version") & pl.col("value").is_not_null()
                             & (pl.col("name").is_null() | (pl.col("name") == "nccl")))
    return None if versions.is_empty() else str(versions.sort(pl.col("nccl_rank").is_null(), "line_no")["value"][0])


def _log_values(events: pl.DataFrame) -> dict[str, set[str]]:
    """NAME → the VALUEs of its "set by environment" lines (more than one: the processes disagree)."""
    env = events.filter((pl.col("kind") == "env") & pl.col("name").is_not_null() & pl.col("value").is_not_null())
    return {str(name): set(map(str, values)) for name, values in env.group_by("name").agg("value").iter_rows()}


def _launch_differences(events: pl.DataFrame) -> str | None:
    """Describe how the NCCL settings of the server starts (launch_no) within one run differ; None when they agree."""
    launches = sorted({int(launch) for launch in events["launch_no"].drop_nulls()}) if "launch_no" in events.columns else []
    per_launch = {launch: {name: sorted(values)[0] for name, values in
                           _log_values(events.filter(pl.col("launch_no") == launch)).items()} for launch in launches}
    names = sorted({name for settings in per_launch.values() for name in settings})
    differing = [name for name in names if len({per_launch[launch].get(name) for launch in launches}) > 1]
    return "; ".join(
        f"{name}: " + ", ".join(f"launch {launch} {per_launch[launch].get(name) or 'not set'}" for launch in launches)
        for name in differing) or None


def _settings(log_settings: dict[str, str], env: dict[str, str] | None, info_lines: int, say) -> list[NcclSetting]:
    if env is None and info_lines:
        say("nccl_no_env_recorded", "no recorded environment (a plain log, no run.json): NCCL settings come from the log "
            "alone", "info")
    settings, mismatches, unconfirmed, in_process = [], [], [], []
    for name in sorted(set(log_settings) | set(env or {})):
        log_value, env_value = log_settings.get(name), (env or {}).get(name)
        agrees = None if log_value is None or env_value is None else log_value == env_value
        settings.append(NcclSetting(name=name, log_value=log_value, env_value=env_value, agrees=agrees))
        if agrees is False:
            mismatches.append(f"{name}: log says {log_value}, recorded env says {env_value}")
        elif env is not None and log_value is None and info_lines and name not in _NOT_ECHOED:
            unconfirmed.append(f"{name}={env_value}")
        elif env is not None and env_value is None and log_value is not None:
            in_process.append(f"{name}={log_value}")
    if mismatches:
        say("nccl_env_mismatch", "THE LOG AND THE RECORDED ENV DISAGREE — " + "; ".join(mismatches)
            + ". NCCL used the log's values (something in the server process changed them).")
    if unconfirmed:
        say("nccl_env_not_in_log", f"the recorded env sets {', '.join(unconfirmed)} but NCCL never reported reading it "
            "(no 'set by environment' line): it may not have reached the NCCL processes")
    if in_process:
        by_sglang = all(item.split("=")[0] in _SET_BY_SGLANG for item in in_process)
        say("nccl_set_in_process", f"NCCL reports {', '.join(in_process)} although the recorded env lacks it: set inside "
            "the server process" + (" (SGLang sets NCCL_CUMEM_ENABLE / NCCL_NVLS_ENABLE from --enable-symm-mem / "
                                    "--enable-nccl-nvls)" if by_sglang else ""), "info" if by_sglang else "warning")
    return settings


def _channel_counts(events: pl.DataFrame) -> tuple[int | None, int | None]:
    """(coll channels, p2p channels) from the counts line ("24 coll channels, … 32 p2p channels": nchannels,
    p2p_channels); without one, the coll channels from the ring lines ("Channel 00/24 : 0 1": nchannels)."""
    channels = events.filter((pl.col("kind") == "channels") & pl.col("nchannels").is_not_null())
    counts = channels.filter(pl.col("channel").is_null())
    coll = (counts if not counts.is_empty() else channels)["nchannels"].max()
    p2p = counts["p2p_channels"].max() if not counts.is_empty() else None
    return (int(coll) if coll is not None else None), (int(p2p) if p2p is not None else None)


def _collectives(events: pl.DataFrame, markers: pl.DataFrame) -> list[CollectiveUse]:
    """Tuning lines ("AllReduce: 33554432 Bytes -> Algo RING proto SIMPLE …") grouped by collective, algo, proto and
    the phase of the lifecycle marker before them (rank 0's: NCCL logs tuning on rank 0)."""
    tuning = (events.filter((pl.col("kind") == "tuning") & pl.col("collective").is_not_null() & pl.col("bytes").is_not_null())
              .select(pl.col("source_file").cast(pl.String), pl.col("line_no").cast(pl.Int64),
                      pl.col("collective").cast(pl.String), pl.col("bytes").cast(pl.Int64),
                      pl.col("algo").cast(pl.String).str.to_uppercase(), pl.col("proto").cast(pl.String).str.to_uppercase())
              .sort("source_file", "line_no"))
    kind = pl.col("kind")
    phases = markers.filter(pl.col("tp_rank").is_null() | (pl.col("tp_rank") == 0)).select(
        pl.col("source_file").cast(pl.String), pl.col("line_no").cast(pl.Int64),
        pl.when(kind == "ready").then(pl.lit("serving"))
        .when(kind == "cuda_graph_begin").then(pl.lit("capture ") + pl.col("graph").fill_null("graph"))
        .when(kind == "init_dist_begin").then(pl.lit("init")).otherwise(pl.lit("startup")).alias("phase"),
    ).sort("source_file", "line_no")
    grouped = (tuning.join_asof(phases, on="line_no", by="source_file", strategy="backward", check_sortedness=False)
               .with_columns(pl.col("phase").fill_null("startup"))
               .group_by("collective", "algo", "proto", "phase")
               .agg(pl.len().alias("lines"), pl.col("bytes").min().alias("min_bytes"), pl.col("bytes").max().alias("max_bytes"),
                    pl.col("line_no").min().alias("first_line"))
               .sort("first_line"))
    return [CollectiveUse(**row) for row in grouped.drop("first_line").iter_rows(named=True)]


def _size(message_bytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if message_bytes >= scale:
            value = message_bytes / scale
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{message_bytes} B"


def _allreduce_verdict(tp_size: int | None, info_lines: int, collectives: list[CollectiveUse], args: dict[str, str],
                       hidden_size: int | None, say) -> str:
    if tp_size == 1:
        return "single GPU: no tensor-parallel all-reduce"
    if info_lines == 0:
        return "unknown: no NCCL INFO lines"
    if not collectives:
        say("nccl_no_tuning_lines", "no NCCL tuning lines (NCCL_DEBUG_SUBSYS without TUNING?): which collectives NCCL "
            "served, and with which algorithm/protocol, cannot be told", "info")
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
        say("nccl_allreduce_bypassed", verdict + replay_note, "info")
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
    say("nccl_allreduce_served", verdict + replay_note, "info")
    return verdict


def _settings_diff(runs: list[RunNccl]) -> list[SettingDiff]:
    """The settings (log value, else recorded env value) and what NCCL chose ('effective …') that differ between runs."""
    per_run: list[dict[str, str]] = []
    for run in runs:
        values = {s.name: s.env_value if s.log_value is None else s.log_value for s in run.settings  # the log's first
                  if (s.log_value, s.env_value) != (None, None)}
        if run.coll_channels is not None:
            values["effective coll channels"] = str(run.coll_channels)
        for collective in sorted({use.collective for use in run.collectives}):
            choices = sorted({f"{use.algo}/{use.proto}" for use in run.collectives if use.collective == collective
                              and not (collective == "AllReduce" and use.max_bytes <= _TINY_ALLREDUCE_BYTES)})
            if choices:
                values[f"effective {collective} algo/proto"] = ", ".join(choices)
        if run.transports:
            values["effective transport"] = ", ".join(use.transport for use in run.transports)
        per_run.append(values)
    names = sorted({name for values in per_run for name in values}, key=lambda name: (name.startswith("effective"), name))
    return [SettingDiff(name=name, values=tuple((run.run_name, values.get(name)) for run, values in zip(runs, per_run)))
            for name in names if len({values.get(name) for values in per_run}) > 1]
