"""Confounders and data-quality checks for a comparison: pure functions returning `Finding`s (warnings as data).

Confounders: every setting that differs between two compared arms — environment (NCCL_*, CUDA_*, others), server
args, versions, GPU, model, TP size, host — must be explained by a declared factor (launch-plan factors or
--factor), otherwise the ratio silently includes its effect. A setting is explained by factor f when f is the only
declared factor that differs between the two arms and the setting's value is a function of f's level over all
compared runs. Speculative-decoding settings (`speculative_*` server args, …) are explained by the speculation
itself whenever the arms differ in speculative algorithm.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from speclogs.analysis import stats
from speclogs.analysis.load import RunTables, parse_json_text
from speclogs.analysis.steady import launch_slices
from speclogs.analysis.results import UNSET, Arm, Finding, RatioComparison
from speclogs.redact import redact_value

# Environment variables the confounder check does not compare by default (globs): the shell's own, a driver script's
# bookkeeping (MINUTES, SECONDS_LEFT, OUT …), the container's and the cloud's, package managers', certificate paths and
# proxies: they differ between launches or machines without changing how the server runs. --ignore-env adds names.
DEFAULT_IGNORED_ENV = (
    "PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "TERM", "TERM_*", "COLORTERM", "LS_COLORS", "MAIL", "LOGNAME", "USER",
    "HOME", "SHELL", "COLUMNS", "LINES", "DISPLAY", "EDITOR", "VISUAL", "PAGER", "LESS*", "HIST*", "PS1", "PROMPT_*",
    "SSH_*", "XDG_*", "TMUX*", "SPECLOGS_RUN*", "KITTY_*", "VSCODE_*", "WINDOWID", "OUT", "MINUTES", "SECONDS_LEFT",
    "DEADLINE*", "CONTAINER_NAME", "CONTAINER_ID", "HOSTNAME_*", "IS_SANDBOX", "DEBIAN_FRONTEND", "AWS_*", "GOOGLE_*",
    "GCLOUD_*", "CLOUDSDK_*", "AZURE_*", "PIP_*", "UV_*", "POETRY_*", "RUSTUP_*", "RUST_*", "CARGO_*", "NPM_*", "NODE_*",
    "GIT_*", "NIX_*", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "HTTPLIB2_CA_CERTS", "*_CA_BUNDLE", "*_CA_CERTS*",
    "SSL_CERT_*", "*_CERT_FILE", "PYTHONDONTWRITEBYTECODE", "*_proxy", "*_PROXY", "SLURM_JOB_ID", "SLURM_JOBID",
    "SLURM_TASK_PID",
)
# server args that differ between launches without changing what runs (ports, seeds drawn at start, the launch
# directory SGLang exports per-request records into, paths of the model
# which the 'model' key already compares)
IGNORED_SERVER_ARGS = {"port", "nccl_port", "dist_init_addr", "random_seed", "model_path", "tokenizer_path",
                       "served_model_name", "file_storage_path", "metrics_port", "export_metrics_to_file_dir"}
SPEC_ARG_PREFIXES = ("speculative_",)
SPEC_ARGS = {"max_running_requests", "disable_overlap_schedule", "enable_mixed_chunk", "cuda_graph_max_bs",
             "cuda_graph_bs", "cuda_graph_config", "disable_cuda_graph_padding"}
MAX_VALUE_CHARS = 60
MIN_REQUESTS = 5
MIN_DECODE_ROWS = 10
ACCEPT_LEN_ONE = 1.05
SOURCE_LEVEL_GAP = 0.25


def ignored_env(key: str, ignore: Sequence[str] = DEFAULT_IGNORED_ENV) -> bool:
    """True when the env variable `key` matches one of the `ignore` globs (case-sensitive, like the environment)."""
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in ignore)


def run_settings(tables: RunTables, ignore_env: Sequence[str] = DEFAULT_IGNORED_ENV) -> dict[str, dict[str, str]]:
    """Per run: {'<group> <name>': value} for every setting the confounder check compares.

    Groups: env, server_arg, version, hardware, model. Env comes from run.json (runs.env) and, where that is
    unknown, from NCCL's own 'NAME set by environment to VALUE' lines; names matching `ignore_env` are left out.
    Secret values are redacted (speclogs.redact).
    """
    settings: dict[str, dict[str, str]] = {r: {} for r in tables.runs["run_id"].to_list()}
    nccl_env: dict[str, dict[str, str]] = {}
    for run_id, kind, name, value in tables.nccl_settings.select("run_id", "kind", "name", "value").iter_rows():
        if kind == "env" and name:
            nccl_env.setdefault(run_id, {})[name] = str(value)
        elif kind == "version" and name:
            settings.setdefault(run_id, {})["version nccl"] = str(value)
    for row in tables.runs.iter_rows(named=True):
        run_id = row["run_id"]
        s = settings[run_id]
        env = parse_json_text(row["env"])
        if env:
            s.update({f"env {k}": str(redact_value(k, v)) for k, v in env.items() if not ignored_env(k, ignore_env)})
            s["_env_known"] = "run.json"
        elif run_id in nccl_env:
            s.update({f"env {k}": str(redact_value(k, v)) for k, v in nccl_env[run_id].items()
                      if not ignored_env(k, ignore_env)})
            s["_env_known"] = "NCCL INFO lines"
        run_json = parse_json_text(row["run_json"])
        for name, value in (run_json.get("versions") or {}).items():
            if name != "speclogs":
                s[f"version {name}"] = str(value)
        if row["sglang_version"]:
            s["version sglang"] = str(row["sglang_version"])
        for key, column in (("hardware gpu_name", "gpu_name"), ("hardware hostname", "hostname"), ("model model_path", "model_path"),
                            ("server_arg tp_size", "tp_size")):
            if row[column] is not None:
                s[key] = str(row[column])
        s["spec speculative_algorithm"] = str(row["speculative_algorithm"] or "none")
    for run_id, name, value in tables.server_args.select("run_id", "name", "value").iter_rows():
        if name in IGNORED_SERVER_ARGS or name == "tp_size":
            continue
        settings.setdefault(run_id, {})[f"server_arg {name}"] = str(redact_value(name, value))
    return settings


def _is_spec_key(key: str) -> bool:
    group, _, name = key.partition(" ")
    return group == "spec" or (group == "server_arg" and (name.startswith(SPEC_ARG_PREFIXES) or name in SPEC_ARGS))


def _code_for(key: str) -> str:
    group = key.partition(" ")[0]
    return {"env": "confounder_env", "server_arg": "confounder_server_args", "version": "confounder_version",
            "hardware": "confounder_hardware", "model": "confounder_model"}.get(group, "confounder")


def _values(settings: dict[str, dict[str, str]], ids: Sequence[str], key: str) -> set[str]:
    return {settings[r].get(key, UNSET) for r in ids}


def _fmt(values: set[str]) -> str:
    text = "/".join(sorted(values))
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def _describe(key: str, a: set[str], b: set[str]) -> str:
    return f"{key.partition(' ')[2] or key} ({_fmt(a)} → {_fmt(b)})"


def confounder_findings(
    settings: dict[str, dict[str, str]], arm_runs: dict[str, list[str]], levels: dict[str, dict[str, str]]
) -> list[Finding]:
    findings: list[Finding] = []
    arms = list(arm_runs)
    reference = arms[0]
    all_ids = [r for ids in arm_runs.values() for r in ids]
    keys = sorted({k for r in all_ids for k in settings.get(r, {}) if not k.startswith("_")})
    env_known = {r: settings[r].get("_env_known") for r in all_ids}
    unknown = [r for r in all_ids if not env_known[r]]
    if unknown and len(unknown) < len(all_ids):
        findings.append(Finding(
            "env_unknown", f"{len(unknown)} of {len(all_ids)} runs have no recorded environment (no run.json, no NCCL "
            "'set by environment' lines): their NCCL_*/CUDA_* settings cannot be compared", "warning"))
    inconsistent_keys: set[str] = set()
    for arm in arms:
        inconsistent = [k for k in keys if len(_values(settings, arm_runs[arm], k)) > 1 and not k.startswith("hardware hostname")]
        inconsistent_keys.update(inconsistent)
        if inconsistent:
            shown = ", ".join(f"{k.partition(' ')[2]} ({_fmt(_values(settings, arm_runs[arm], k))})" for k in inconsistent[:8])
            findings.append(Finding(
                "arm_inconsistent", f"the runs of arm {arm!r} are not replicates: they differ in {shown}"
                + (f" and {len(inconsistent) - 8} more" if len(inconsistent) > 8 else ""), "warning", (arm,)))
    for arm in arms[1:]:
        ids_a, ids_b = arm_runs[reference], arm_runs[arm]
        # a setting that already varies inside an arm is reported once, as arm_inconsistent
        differing = [k for k in keys if _values(settings, ids_a, k) != _values(settings, ids_b, k)
                     and k not in inconsistent_keys]
        factors = [f for f, by_run in levels.items() if {by_run[r] for r in ids_a} != {by_run[r] for r in ids_b}]
        spec_differs = _values(settings, ids_a, "spec speculative_algorithm") != _values(settings, ids_b, "spec speculative_algorithm")
        pair = (reference, arm)
        if len(factors) >= 2:
            shown = "; ".join(_describe(k, _values(settings, ids_a, k), _values(settings, ids_b, k))
                              for k in differing if not _is_spec_key(k))[:600]
            findings.append(Finding(
                "confounded_factors", f"{arm} vs {reference}: the arms differ in {len(factors)} declared factors "
                f"({', '.join(factors)}), so this ratio is confounded — it mixes their effects. Settings that differ: "
                f"{shown or 'speculative settings only'}. Use the factorial effects, or compare arms that differ in one "
                "factor.", "warning", pair))
            continue
        explained: dict[str, list[str]] = {}
        unexplained: list[str] = []
        for key in differing:
            if key == "spec speculative_algorithm":
                continue
            if _is_spec_key(key) and (spec_differs or factors):
                explained.setdefault("speculative decoding", []).append(key)
            elif factors and _function_of(settings, levels[factors[0]], all_ids, key):
                explained.setdefault(f"factor {factors[0]}", []).append(key)
            elif key == "hardware hostname" and "hardware gpu_name" not in differing:
                explained.setdefault("host name only", []).append(key)
            else:
                unexplained.append(key)
        by_code: dict[str, list[str]] = {}
        for key in unexplained:
            by_code.setdefault(_code_for(key), []).append(key)
        for code, group in by_code.items():
            shown = "; ".join(_describe(k, _values(settings, ids_a, k), _values(settings, ids_b, k)) for k in group[:10])
            more = f" and {len(group) - 10} more" if len(group) > 10 else ""
            why = (f"the declared factor {factors[0]} does not explain them" if factors
                   else "no declared factor explains them")
            findings.append(Finding(
                code, f"{arm} vs {reference} is confounded: {shown}{more} differ, and {why} — the ratio "
                "includes their effect. Rerun with equal settings, or declare the difference as a factor "
                "(--factor NAME=GLOB, or factors in the launch plan).", "warning", pair))
        for why, group in explained.items():
            shown = "; ".join(_describe(k, _values(settings, ids_a, k), _values(settings, ids_b, k)) for k in group[:12])
            findings.append(Finding(
                "factor_settings", f"{arm} vs {reference}: {why} accounts for {shown}"
                + (f" and {len(group) - 12} more" if len(group) > 12 else ""), "info", pair))
    versions = sorted({settings[r].get("version sglang") for r in all_ids} - {None})
    if len(versions) > 1:
        findings.append(Finding(
            "mixed_versions", f"the compared runs use different SGLang versions ({', '.join(versions)}): log formats and "
            "scheduling differ between versions, so differences may come from the version", "warning"))
    return findings


def _function_of(settings, by_run: dict[str, str], ids: Sequence[str], key: str) -> bool:
    mapping: dict[str, str] = {}
    for r in ids:
        value = settings[r].get(key, UNSET)
        if mapping.setdefault(by_run[r], value) != value:
            return False
    return True


def lint_comparison(
    *, tables: RunTables, decode: pl.DataFrame, clients: pl.DataFrame, arm_runs: dict[str, list[str]],
    arms: Sequence[Arm], comparisons: Sequence[RatioComparison], levels: dict[str, dict[str, str]],
    run_data_rows: dict[str, int], ignore_env: Sequence[str] = (),
) -> list[Finding]:
    """All findings for one comparison, most important first. `ignore_env`: env names (globs) not compared, on top
    of DEFAULT_IGNORED_ENV."""
    names = dict(zip(tables.runs["run_id"].to_list(), tables.runs["run_name"].to_list()))
    arm_of = {r: arm for arm, ids in arm_runs.items() for r in ids}
    ignore = (*DEFAULT_IGNORED_ENV, *ignore_env)
    findings: list[Finding] = []
    findings += confounder_findings(run_settings(tables, ignore), arm_runs, levels)
    findings += _ignored_env_findings(tables, ignore)

    single = [a.name for a in arms if max((e.n_launches for e in (a.client, a.server) if e), default=0) < 2]
    if single:
        findings.append(Finding(
            "single_launch", f"one launch in arm(s) {', '.join(single)}: intervals and tests cover request noise only, "
            "not launch-to-launch variation (warm-up, placement, NCCL init). Repeat launches (≥ 3 per arm, interleaved) "
            "before trusting a small difference.", "warning", tuple(single)))
    few = [(a.name, n) for a in arms if 2 <= (n := max((e.n_launches for e in (a.client, a.server) if e), default=0)) < 5]
    if few:
        findings.append(Finding(
            "few_launches", f"{', '.join(f'{name} ({n})' for name, n in few)} launches: the launch-to-launch variance is "
            "estimated from so few values that the t intervals are wide (t at 97.5 %: 12.7 with 1 degree of freedom, "
            "4.3 with 2, 2.8 with 4); each extra launch narrows them a lot — aim for ≥ 5 per arm", "info",
            tuple(name for name, _ in few)))
    findings += _launches_needed(arms)
    for a in arms:
        if a.client and a.client.n_rows < MIN_REQUESTS:
            findings.append(Finding("too_few_samples", f"arm {a.name}: {a.client.n_rows} client request(s) after warm-up; "
                                    f"≥ {MIN_REQUESTS} per launch give usable intervals", "warning", (a.name,)))
        if a.server and a.server.n_rows < MIN_DECODE_ROWS:
            findings.append(Finding("too_few_samples", f"arm {a.name}: {a.server.n_rows} steady-state decode row(s); "
                                    f"≥ {MIN_DECODE_ROWS} give usable intervals", "warning", (a.name,)))
        if a.speculative_algorithm and a.accept_len is not None and a.accept_len < ACCEPT_LEN_ONE:
            findings.append(Finding(
                "accept_len_one", f"arm {a.name} runs {a.speculative_algorithm} but its accept len is {a.accept_len:.2f}: "
                "the draft is (almost) never accepted — typically an EAGLE-3 draft reading the wrong hidden layers of the "
                "target (mismatched target/draft pair or layer ids), or a draft for another model. Speculation only adds cost "
                "here.", "warning", (a.name,)))
        if a.client and a.server:
            gap = math.log(a.server.value_tok_s / a.client.value_tok_s)
            if abs(gap) > SOURCE_LEVEL_GAP:
                findings.append(Finding(
                    "source_levels", f"arm {a.name}: client {a.client.value_tok_s:.1f} tok/s vs server decode "
                    f"{a.server.value_tok_s:.1f} tok/s ({math.exp(gap) - 1:+.0%}): the client includes prefill, queueing and "
                    "HTTP; a large gap means the two do not measure the same thing (concurrency, long prompts, or client "
                    "overhead)", "info", (a.name,)))
    by_pair: dict[tuple[str, str], dict[str, RatioComparison]] = {}
    for c in comparisons:
        by_pair.setdefault((c.arm_a, c.arm_b), {})[c.source] = c
    for (arm_a, arm_b), sources in by_pair.items():
        if "client" in sources and "server" in sources:
            c, s = sources["client"], sources["server"]
            if c.ci_high < s.ci_low or s.ci_high < c.ci_low:
                findings.append(Finding(
                    "source_disagreement", f"{arm_b} vs {arm_a}: client ratio {c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}] "
                    f"and server ratio {s.ratio:.3f} [{s.ci_low:.3f}, {s.ci_high:.3f}] disagree: one source is measuring "
                    "something else (prefill share, client overhead, a warm-up inside the window)", "warning", (arm_a, arm_b)))

    findings += _launch_round_findings(tables, clients, arm_runs)
    findings += _warmup_findings(decode, arm_of, names)
    findings += _trend_findings(decode, clients, arm_of, names)
    findings += _event_findings(tables, decode, clients, arm_of, names)
    for run_id, n in run_data_rows.items():
        if n == 0 and decode.filter(pl.col("run_id") == run_id).is_empty():
            findings.append(Finding("no_decode_rows", f"run {names[run_id]} has no 'Decode batch' rows: server throughput, "
                                    "acceptance and attribution are unavailable for it", "warning", (arm_of[run_id],)))
    for row in tables.runs.iter_rows(named=True):
        if row["outcome"] not in (None, "ok"):
            findings.append(Finding("run_outcome", f"run {row['run_name']} ended with outcome {row['outcome']!r}: its numbers may "
                                    "be partial", "warning", (arm_of[row["run_id"]],)))
    multi = tables.launches.group_by("run_id").agg(pl.col("launch_no").n_unique().alias("n")).filter(pl.col("n") > 1)
    for run_id, n in multi.iter_rows():
        findings.append(Finding("several_launches_in_file", f"run {names[run_id]} holds {n} server starts in one file; they "
                                "are pooled as one replicate", "info", (arm_of[run_id],)))
    return findings


def _launches_needed(arms: Sequence[Arm], effect: float = 0.05) -> list[Finding]:
    """From the pooled launch-to-launch spread (SD of per-launch log throughput within arms, client source first):
    about how many launches per arm a two-sided 95 % test needs to detect a 5 % difference with 80 % power."""
    from scipy.stats import norm

    deviations, dof = 0.0, 0
    for a in arms:
        estimate = a.client or a.server
        if estimate and len(estimate.per_launch_tok_s) >= 2:
            logs = np.log(np.array(estimate.per_launch_tok_s))
            deviations += float(np.sum((logs - logs.mean()) ** 2))
            dof += len(logs) - 1
    if dof == 0:
        return []
    sd = math.sqrt(deviations / dof)
    z = float(norm.ppf(0.975) + norm.ppf(0.8))
    needed = max(3, math.ceil(2 * (z * sd / math.log(1 + effect)) ** 2))
    return [Finding(
        "launches_needed", f"launch-to-launch spread: {sd:.1%} (pooled SD of per-launch log throughput, {dof} degrees "
        f"of freedom); to detect a {effect:.0%} difference (95 % two-sided, 80 % power) plan ≈ {needed} launches per arm "
        "(normal approximation, at least 3)",
        "info")]


def _ignored_env_findings(tables: RunTables, ignore: Sequence[str]) -> list[Finding]:
    """Say which ignored env variables differ between the compared runs (so ignoring them is a visible choice)."""
    values: dict[str, set[str]] = {}
    runs = 0
    for text in tables.runs["env"].to_list():
        env = parse_json_text(text)
        if not env:
            continue
        runs += 1
        for name, value in env.items():
            values.setdefault(name, set()).add(str(value))
    differing = sorted(name for name, seen in values.items()
                       if ignored_env(name, ignore) and (len(seen) > 1 or 0 < _count_runs_with(tables, name) < runs))
    if not differing:
        return []
    shown = ", ".join(differing[:12]) + (f" and {len(differing) - 12} more" if len(differing) > 12 else "")
    return [Finding("env_ignored", f"not compared (the default ignore list and --ignore-env): {shown} differ between "
                    "the runs; --ignore-env NAME adds names, globs allowed", "info")]


def _count_runs_with(tables: RunTables, name: str) -> int:
    return sum(1 for text in tables.runs["env"].to_list() if name in parse_json_text(text))


def _launch_round_findings(tables: RunTables, clients: pl.DataFrame, arm_runs: dict[str, list[str]]) -> list[Finding]:
    """Does the launch round (launch_index: 1st, 2nd … launch of every cell, run in interleaved rounds) move
    throughput the same way in every arm? A sign test across arms on first-round vs last-round client throughput."""
    used = clients.filter(pl.col("excluded_reason").is_null())
    if used.is_empty():
        return []
    per_run = dict(used.group_by("run_id").agg((pl.col("tokens").sum() / pl.col("seconds").sum()).alias("t")).iter_rows())
    index = dict(zip(tables.runs["run_id"].to_list(), tables.runs["launch_index"].to_list()))
    changes = []
    for arm, ids in arm_runs.items():
        rounds = sorted((index[r], per_run[r]) for r in ids if index.get(r) is not None and r in per_run)
        if len(rounds) >= 2 and rounds[0][0] != rounds[-1][0]:
            changes.append((arm, rounds[-1][1] / rounds[0][1]))
    if len(changes) < 3:
        return []
    slower = sum(1 for _, ratio in changes if ratio < 1)
    if slower not in (0, len(changes)):
        return []
    p_value = 2 * 0.5 ** len(changes)
    median = float(np.median([ratio for _, ratio in changes]))
    direction = "slower" if slower else "faster"
    return [Finding(
        "launch_round_effect", f"in all {len(changes)} arms the last launch round ran {direction} than the first "
        f"(median ×{median:.3f}; sign test p={p_value:.3g}): something that changes between rounds (machine state, "
        "session, thermal, order) moves throughput — interleaving keeps the comparisons fair, but this round-to-round "
        "variation is why the intervals are wide; add rounds rather than requests", "warning" if p_value < 0.1 else "info",
        tuple(arm for arm, _ in changes))]


def _runs_text(runs: list[tuple[str, int]]) -> str:
    shown = ", ".join(f"{name} ({n})" for name, n in runs[:6])
    return shown + (f" and {len(runs) - 6} more runs" if len(runs) > 6 else "")


def _warmup_findings(decode: pl.DataFrame, arm_of, names) -> list[Finding]:
    findings: list[Finding] = []
    if decode.is_empty():
        return findings
    excluded = decode.filter(~pl.col("steady")).group_by("run_id", "excluded_reason").len().sort("run_id")
    by_reason: dict[str, list[tuple[str, int]]] = {}
    arms_by_reason: dict[str, set[str]] = {}
    for run_id, reason, n in excluded.iter_rows():
        by_reason.setdefault(reason, []).append((names[run_id], n))
        arms_by_reason.setdefault(reason, set()).add(arm_of[run_id])
    texts = {
        "no_cuda_graph": ("warmup_in_window", "decode batches without CUDA graph after the server was ready (eager warm-up, "
                          "or batches larger than the captured sizes) in {runs}: excluded from server figures; the client's "
                          "numbers include them"),
        "before_health_200": ("served_before_ready", "decode batches after 'ready' but before the first /health 200 in {runs}: "
                              "a client that did not wait for health measured warm-up; excluded from server figures"),
        "non_finite": ("non_finite_values", "decode rows with NaN/inf/zero gen throughput in {runs}: excluded"),
    }
    for reason, (code, text) in texts.items():
        if reason in by_reason:
            findings.append(Finding(code, text.format(runs=_runs_text(by_reason[reason])), "warning",
                                    tuple(sorted(arms_by_reason[reason]))))
    counts = decode.group_by("excluded_reason").len()
    detail = ", ".join(f"{r or 'steady'} {n}" for r, n in counts.sort("excluded_reason", nulls_last=True).iter_rows())
    findings.append(Finding("steady_state", f"decode rows used / excluded by the steady-state rule: {detail}", "info"))
    return findings


def _trend_findings(decode: pl.DataFrame, clients: pl.DataFrame, arm_of, names) -> list[Finding]:
    findings = []
    steady = decode.filter(pl.col("steady"))
    rates = steady["gen_throughput_tok_s"].cast(pl.Float64).to_numpy()
    for run_id, start, stop in launch_slices(steady):
        trend = stats.trend_test(rates[start:stop])
        if trend and trend.p_value < 0.01 and abs(trend.relative_change) > 0.05:
            findings.append(Finding(
                "non_stationary", f"run {names[run_id]}: server throughput drifts over the run (Kendall tau {trend.tau:+.2f}, "
                f"p={trend.p_value:.1g}, last third vs first third {trend.relative_change:+.1%}, n={trend.n}) — thermal "
                "throttling, growing KV cache or a co-tenant; a mean over a drifting series depends on the run length",
                "warning", (arm_of[run_id],)))
    used = clients.filter(pl.col("excluded_reason").is_null())
    for (run_id,), rows in used.partition_by("run_id", as_dict=True).items():
        rate = (rows["tokens"] / rows["seconds"]).to_numpy()
        trend = stats.trend_test(rate)
        if trend and trend.p_value < 0.01 and abs(trend.relative_change) > 0.05:
            findings.append(Finding(
                "non_stationary", f"run {names[run_id]}: client throughput drifts over the requests (Kendall tau "
                f"{trend.tau:+.2f}, p={trend.p_value:.1g}, {trend.relative_change:+.1%}, n={trend.n})", "warning",
                (arm_of[run_id],)))
    bad = clients.filter(pl.col("excluded_reason") == "non_finite").group_by("run_id").len()
    for run_id, n in bad.iter_rows():
        findings.append(Finding("non_finite_values", f"run {names[run_id]}: {n} client request(s) without usable tokens or "
                                "latency (NaN/inf/0) were excluded", "warning", (arm_of[run_id],)))
    return findings


def _event_findings(tables: RunTables, decode: pl.DataFrame, clients: pl.DataFrame, arm_of, names) -> list[Finding]:
    findings = []
    retracted: dict[str, int] = {}
    for run_id, kind, n in tables.events.iter_rows():
        if kind in ("retract", "retracted_req"):
            retracted[run_id] = retracted.get(run_id, 0) + n
        else:
            findings.append(Finding(f"server_{kind}", f"run {names[run_id]}: {n} '{kind}' event(s) in the server log",
                                    "warning", (arm_of[run_id],)))
    for run_id, n in retracted.items():
        findings.append(Finding(
            "retractions", f"run {names[run_id]}: {n} request retraction(s) (KV cache full): retracted requests are "
            "recomputed, so throughput and latency include rework", "warning", (arm_of[run_id],)))
    return findings

