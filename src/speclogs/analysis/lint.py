"""Confounders and data-quality checks for a comparison: pure functions returning `Finding`s (warnings as data).
A setting that differs between two compared arms must be explained by a declared factor named after it whose level
determines its value (docs/report.md), else the ratio silently includes its effect."""

from __future__ import annotations

import fnmatch
import math
import os
import re
from collections.abc import Sequence

import numpy as np
import polars as pl

from speclogs.analysis import power, stats
from speclogs.analysis.load import RunTables, load_setup, parse_json_text, resolve_arms
from speclogs.analysis.results import UNSET, Arm, Finding, RatioComparison
from speclogs.analysis.steady import steady_launches
from speclogs.doctor import DoctorFinding, check_settings, parse_runtime, server_settings
from speclogs.redact import redact_value
from speclogs.runrecord import FILE_NAME as RUN_JSON, RunRecord

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
# directory SGLang exports per-request records into, the model's paths, which the 'model' key compares)
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
PLANNED_EFFECT = 0.05  # the difference launches_needed plans for
TREND_ALPHA = 0.01  # family-wise, over every launch and source tested in one comparison (Holm)
TREND_MIN_CHANGE = 0.05
_CODES = {"env": "confounder_env", "server_arg": "confounder_server_args", "version": "confounder_version",
          "hardware": "confounder_hardware", "model": "confounder_model", "draft": "confounder_model"}


def ignored_env(key: str, ignore: Sequence[str] = DEFAULT_IGNORED_ENV) -> bool:
    """True when the env variable `key` matches one of the `ignore` globs (case-sensitive, like the environment)."""
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in ignore)


def run_settings(tables: RunTables, ignore_env: Sequence[str] = DEFAULT_IGNORED_ENV) -> dict[str, dict[str, str]]:
    """Per run: {'<group> <name>': value} for every setting the confounder check compares, secret values redacted.
    Env comes from run.json (runs.env), else from NCCL's own 'NAME set by environment to VALUE' lines."""
    settings: dict[str, dict[str, str]] = {r: {} for r in tables.runs["run_id"].to_list()}
    nccl_env: dict[str, dict[str, str]] = {}
    for run_id, kind, name, value in tables.nccl_settings.filter(pl.col("name") != "").select(
            "run_id", "kind", "name", "value").iter_rows():
        if kind == "env":
            nccl_env.setdefault(run_id, {})[name] = str(value)
        elif kind == "version":
            settings.setdefault(run_id, {})["version nccl"] = str(value)
    for row in tables.runs.iter_rows(named=True):
        s = settings[row["run_id"]]
        env = parse_json_text(row["env"]) or nccl_env.get(row["run_id"], {})
        if env:
            s.update({f"env {k}": str(redact_value(k, v)) for k, v in env.items() if not ignored_env(k, ignore_env)})
            s["_env_known"] = "yes"
        record = RunRecord.from_document(parse_json_text(row["run_json"]))
        for name, value in record.versions.items():
            if name != "speclogs":
                s[f"version {name}"] = str(value)
        if row["sglang_version"]:
            s["version sglang"] = str(row["sglang_version"])
        for key, column in (("hardware gpu_name", "gpu_name"), ("hardware hostname", "hostname"), ("model model_path", "model_path"),
                            ("server_arg tp_size", "tp_size")):
            if row[column] is not None:
                s[key] = str(row[column])
        s["spec speculative_algorithm"] = str(row["speculative_algorithm"] or "none")
        if record.profile is not None:
            s["profile profiled"] = str(record.profile)
        for role, group in (("target", "model"), ("draft", "draft")):
            model = record.models.get(role) or {}
            for field, name in (("config_sha256", "config"), ("weights_sha256", "weights"),
                                ("eagle3_layer_ids", "eagle3_layer_ids"), ("architectures", "architectures")):
                if model.get(field) is not None:
                    value = model[field]
                    s[f"{group} {name}"] = (value[:12] if field.endswith("sha256") else
                                            ",".join(map(str, value)) if isinstance(value, list) else str(value))
    for run_id, name, value in tables.server_args.select("run_id", "name", "value").iter_rows():
        if name in IGNORED_SERVER_ARGS or name == "tp_size":
            continue
        settings.setdefault(run_id, {})[f"server_arg {name}"] = str(redact_value(name, value))
    return settings


def _is_spec_key(key: str) -> bool:
    group, _, name = key.partition(" ")
    return group == "spec" or (group == "server_arg" and (name.startswith(SPEC_ARG_PREFIXES) or name in SPEC_ARGS))


def _norm(text: str) -> str:
    return re.sub(r"[\W_]", "", text.lower())


def _tokens(text: str) -> list[str]:
    """Whole words of a name: split at anything not a letter or digit, and at lower→upper case changes."""
    return re.findall(r"[^\W_]+", re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text).lower())


def factor_names(factor: str, key: str) -> bool:
    """Is the setting `key` ('<group> <name>') named after the factor: the factor's whole words are its group or a run
    of consecutive words of its name (`nccl` names NCCL_PROTO, `mode` not model_path)? Versions only by `version` or
    `<name>_version`, so NCCL tuning never excuses a different NCCL library."""
    group, _, name = key.partition(" ")
    words = _tokens(factor)
    if not words:
        return False
    if group == "version":
        return _norm(factor) in ("version", _norm(name) + "version")
    if _norm(factor) == _norm(group):
        return True
    setting = _tokens(name)
    return any(setting[i:i + len(words)] == words for i in range(len(setting) - len(words) + 1))


def _values(settings: dict[str, dict[str, str]], ids: Sequence[str], key: str) -> set[str]:
    return {settings[r].get(key, UNSET) for r in ids}


def _listed(items: Sequence[str], shown: int, sep: str = ", ", more: str = "more") -> str:
    return sep.join(items[:shown]) + (f" and {len(items) - shown} {more}" if len(items) > shown else "")


def _fmt(values: set[str]) -> str:
    text = "/".join(sorted(values))
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def confounder_findings(
    settings: dict[str, dict[str, str]], arm_runs: dict[str, list[str]], levels: dict[str, dict[str, str]]
) -> list[Finding]:
    findings: list[Finding] = []
    arms = list(arm_runs)
    reference = arms[0]
    all_ids = [r for ids in arm_runs.values() for r in ids]
    keys = sorted({k for r in all_ids for k in settings.get(r, {}) if not k.startswith("_")})
    unknown = [r for r in all_ids if not settings[r].get("_env_known")]
    if unknown and len(unknown) < len(all_ids):
        findings.append(Finding(
            "env_unknown", f"{len(unknown)} of {len(all_ids)} runs have no recorded environment (no run.json, no NCCL "
            "'set by environment' lines): their NCCL_*/CUDA_* settings cannot be compared", "warning"))
    inconsistent_keys: set[str] = set()
    for arm in arms:
        inconsistent = [k for k in keys if len(_values(settings, arm_runs[arm], k)) > 1 and not k.startswith("hardware hostname")]
        inconsistent_keys.update(inconsistent)
        if inconsistent:
            shown = _listed([f"{k.partition(' ')[2]} ({_fmt(_values(settings, arm_runs[arm], k))})" for k in inconsistent], 8)
            findings.append(Finding("arm_inconsistent", f"the runs of arm {arm!r} are not replicates: they differ in {shown}",
                                    "warning", (arm,)))
    for arm in arms[1:]:
        ids_a, ids_b = arm_runs[reference], arm_runs[arm]

        def differs(key: str, a=ids_a, b=ids_b) -> bool:
            return _values(settings, a, key) != _values(settings, b, key)

        def describe(key: str, a=ids_a, b=ids_b) -> str:
            return f"{key.partition(' ')[2] or key} ({_fmt(_values(settings, a, key))} → {_fmt(_values(settings, b, key))})"

        # a setting that already varies inside an arm is reported once, as arm_inconsistent
        differing = [k for k in keys if differs(k) and k not in inconsistent_keys]
        factors = [f for f, by_run in levels.items() if {by_run[r] for r in ids_a} != {by_run[r] for r in ids_b}]
        pair = (reference, arm)
        if len(factors) >= 2:
            shown = "; ".join(describe(k) for k in differing if not _is_spec_key(k))[:600]
            findings.append(Finding(
                "confounded_factors", f"{arm} vs {reference}: the arms differ in {len(factors)} declared factors "
                f"({', '.join(factors)}), so this ratio is confounded — it mixes their effects. Settings that differ: "
                f"{shown or 'speculative settings only'}. Use the factorial effects, or compare arms that differ in one "
                "factor.", "warning", pair))
            continue
        explained: dict[str, list[str]] = {}
        by_code: dict[str, list[str]] = {}   # the unexplained ones
        for key in differing:
            if key in ("spec speculative_algorithm", "profile profiled"):
                continue
            named_by = [f for f in factors if factor_names(f, key) and _function_of(settings, levels[f], all_ids, key)]
            if named_by:
                explained.setdefault(f"factor {named_by[0]}", []).append(key)
            elif _is_spec_key(key) and differs("spec speculative_algorithm"):
                explained.setdefault("speculative decoding", []).append(key)
            elif key == "env PYTHONPATH" and differs("profile profiled"):
                explained.setdefault("profiling (python -m speclogs.profile)", []).append(key)
            elif key == "hardware hostname" and "hardware gpu_name" not in differing:
                explained.setdefault("host name only", []).append(key)
            else:
                by_code.setdefault(_CODES.get(key.partition(" ")[0], "confounder"), []).append(key)
        for code, group in by_code.items():
            why = (f"the declared factor {factors[0]} is not named after them" if factors
                   else "no declared factor explains them")
            shown = _listed([describe(k) for k in group], 10, "; ")
            findings.append(Finding(
                code, f"{arm} vs {reference} is confounded: {shown} differ, and {why} — the ratio "
                "includes their effect. Rerun with equal settings, or declare the difference as a factor named after "
                "the setting (--factor NAME=GLOB, or factors in the launch plan; docs/report.md).", "warning", pair))
        for why, group in explained.items():
            findings.append(Finding("factor_settings", f"{arm} vs {reference}: {why} accounts for "
                                    f"{_listed([describe(k) for k in group], 12, '; ')}", "info", pair))
    versions = sorted({settings[r].get("version sglang") for r in all_ids} - {None})
    if len(versions) > 1:
        findings.append(Finding(
            "mixed_versions", f"the compared runs use different SGLang versions ({', '.join(versions)}): log formats and "
            "scheduling differ between versions, so differences may come from the version", "warning"))
    return findings


def _function_of(settings, by_run: dict[str, str], ids: Sequence[str], key: str) -> bool:
    """Is the setting's value a function of the factor's level over `ids`?"""
    return len({(by_run[r], settings[r].get(key, UNSET)) for r in ids}) == len({by_run[r] for r in ids})


def lint_comparison(
    *, tables: RunTables, decode: pl.DataFrame, clients: pl.DataFrame, cycles: pl.DataFrame,
    arm_runs: dict[str, list[str]],
    arms: Sequence[Arm], comparisons: Sequence[RatioComparison], levels: dict[str, dict[str, str]],
    run_data_rows: dict[str, int], ignore_env: Sequence[str] = (), confidence: float = 0.95, min_effect: float = 0.0,
    reference_acceptance: tuple[float, float] | None = None, accept_intervals: dict[str, tuple[float, float]] | None = None,
    trained_layers: list[int] | None = None,
) -> list[Finding]:
    """All findings for one comparison, most important first. `ignore_env`: env names (globs) not compared, on top
    of DEFAULT_IGNORED_ENV; `reference_acceptance`: the accept length expected of every speculative arm (value, half
    width of its own interval); `trained_layers`: the aux layer ids the drafts were trained on."""
    names = dict(zip(tables.runs["run_id"].to_list(), tables.runs["run_name"].to_list()))
    arm_of = {r: arm for arm, ids in arm_runs.items() for r in ids}
    ignore = (*DEFAULT_IGNORED_ENV, *ignore_env)
    findings = confounder_findings(run_settings(tables, ignore), arm_runs, levels)
    setup = doctor_findings(tables.runs, tables.server_args, tables.runtime, trained_layers)
    causes = {arm: [f for r in ids for f in setup.get(r, []) if f.severity != "info"] for arm, ids in arm_runs.items()}
    findings += _setup_findings(setup, arm_of, names) + _ignored_env_findings(tables, ignore)
    launches = {a.name: max((e.n_launches for e in (a.client, a.server) if e), default=0) for a in arms}
    if single := [name for name, n in launches.items() if n < 2]:
        findings.append(Finding(
            "single_launch", f"one launch in arm(s) {', '.join(single)}: need ≥ 2 launches per arm for a verdict — "
            "one launch shows request noise only, not launch-to-launch variation (warm-up, placement, NCCL init), so no "
            "winner is named. Repeat launches (≥ 3 per arm, interleaved).", "warning", tuple(single)))
    if few := [(name, n) for name, n in launches.items() if 2 <= n < 5]:
        findings.append(Finding(
            "few_launches", f"{', '.join(f'{name} ({n})' for name, n in few)} launches: the launch-to-launch variance is "
            "estimated from so few values that the t intervals are wide (t at 97.5 %: 12.7 with 1 degree of freedom, "
            "4.3 with 2, 2.8 with 4); each extra launch narrows them a lot — aim for ≥ 5 per arm", "info",
            tuple(name for name, _ in few)))
    findings += _launches_needed(arms, comparisons, confidence, min_effect)
    for a in arms:
        for estimate, least, what in ((a.client, MIN_REQUESTS, "client request(s) after warm-up; ≥ {} per launch"),
                                      (a.server, MIN_DECODE_ROWS, "steady-state decode row(s); ≥ {}")):
            if estimate and estimate.n_rows < least:
                findings.append(Finding("too_few_samples", f"arm {a.name}: {estimate.n_rows} {what.format(least)} give "
                                        "usable intervals", "warning", (a.name,)))
        if a.speculative_algorithm and a.accept_len is not None:
            findings += _acceptance_findings(a, causes.get(a.name, []), reference_acceptance,
                                             (accept_intervals or {}).get(a.name))
        if a.client and a.server and abs(gap := math.log(a.server.value_tok_s / a.client.value_tok_s)) > SOURCE_LEVEL_GAP:
            findings.append(Finding(
                "source_levels", f"arm {a.name}: client {a.client.value_tok_s:.1f} tok/s vs server decode "
                f"{a.server.value_tok_s:.1f} tok/s ({math.exp(gap) - 1:+.0%}): the client includes prefill, queueing and "
                "HTTP; a large gap means the two do not measure the same thing (concurrency, long prompts, or client "
                "overhead)", "info", (a.name,)))
    findings += _source_disagreement(comparisons)
    findings += _warmup_findings(decode, clients, cycles, arm_of, names) + _trend_findings(decode, clients, arm_of, names)
    findings += _run_findings(tables, decode, clients, run_data_rows, arm_of, names)
    adaptive = [row["run_name"] for row in tables.runs.iter_rows(named=True)
                if RunRecord.from_document(parse_json_text(row["run_json"])).adaptive]
    if adaptive:
        findings.append(Finding(
            "adaptive_run", f"{_listed(adaptive, 6, more='more runs')} come from an adaptive "
            "plan (speclogs launch --until): when to stop was decided on repeated confidence intervals (adaptive.json "
            "next to the launches). A comparison whose launches all come from that design uses the same repeated "
            "interval (wider than a fixed-sample one, which after a data-dependent stop names false winners more "
            "often than its level)", "info"))
    multi = tables.launches.group_by("run_id", maintain_order=True).agg(pl.col("launch_no").n_unique().alias("n"))
    return findings + [Finding("several_launches_in_file", f"run {names[run_id]} holds {n} server starts in one file; they "
                               "are pooled as one replicate", "info", (arm_of[run_id],))
                       for run_id, n in multi.filter(pl.col("n") > 1).iter_rows()]


def _source_disagreement(comparisons: Sequence[RatioComparison]) -> list[Finding]:
    by_pair: dict[tuple[str, str], dict[str, RatioComparison]] = {}
    for c in comparisons:
        by_pair.setdefault((c.arm_a, c.arm_b), {})[c.source] = c
    findings = []
    for (arm_a, arm_b), sources in by_pair.items():
        if "client" not in sources or "server" not in sources:
            continue
        c, s = sources["client"], sources["server"]
        # one launch per arm: both sources measure the same launches, so their request-noise intervals compare
        (c_low, c_high), (s_low, s_high) = (
            (r.ci_low, r.ci_high) if math.isfinite(r.ci_low) else (r.within_low, r.within_high) for r in (c, s))
        if c_high < s_low or s_high < c_low:
            findings.append(Finding(
                "source_disagreement", f"{arm_b} vs {arm_a}: client ratio {c.ratio:.3f} [{c_low:.3f}, {c_high:.3f}] "
                f"and server ratio {s.ratio:.3f} [{s_low:.3f}, {s_high:.3f}] disagree: one source is measuring "
                "something else (prefill share, client overhead, a warm-up inside the window)", "warning", (arm_a, arm_b)))
    return findings


def doctor_findings(runs: pl.DataFrame, server_args: pl.DataFrame, runtime: pl.DataFrame,
                    trained_layers: list[int] | None = None) -> dict[str, list[DoctorFinding]]:
    """speclogs.doctor's checks on each ingested run: the settings the log's ServerArgs printed (over run.json's argv),
    the models as run.json recorded them, what the profiler saw run (its runtime line)."""
    def at(source_file: str, line_no: int) -> str:   # relative to here when below it: reports stay portable
        relative = os.path.relpath(source_file) if os.path.isabs(source_file) else source_file
        return f"{source_file if relative.startswith('..') else relative}:{line_no}"

    logged: dict[str, dict[str, str]] = {}
    where: dict[str, dict[str, str]] = {}
    for run_id, name, value, source_file, line_no in server_args.select(
            "run_id", "name", "value", "source_file", "line_no").iter_rows():
        if value is not None and value != "None":
            logged.setdefault(run_id, {})[name] = value.strip("'\"")
            where.setdefault(run_id, {})[name] = f"{at(source_file, line_no)} (ServerArgs {name})"
    ran = {run_id: {**parse_runtime(message), "source": f"{at(source_file, line_no)} (profiler runtime line)"}
           for run_id, message, source_file, line_no in runtime.select(
               "run_id", "message", "source_file", "line_no").iter_rows() if message}
    out: dict[str, list[DoctorFinding]] = {}
    for run_id, run_json in runs.select("run_id", "run_json").iter_rows():
        record = RunRecord.from_document(parse_json_text(run_json))
        settings = {**server_settings([str(part) for part in record.argv or []]), **logged.get(run_id, {})}
        sources = where.get(run_id, {})
        out[run_id] = check_settings(settings, lambda name, s=sources: s.get(name, f"{RUN_JSON} argv"), trained_layers,
                                     record.models, RUN_JSON, ran.get(run_id))
    return out


def doctor_runs(con, selectors: Sequence[str], trained_layers: list[int] | None = None
                ) -> list[tuple[str, list[DoctorFinding]]]:
    """(run name, the doctor's findings) for every ingested run the selectors (run names or globs) name."""
    ids = sorted({run_id for ids in resolve_arms(con, list(selectors)).values() for run_id in ids})
    runs, server_args, runtime = load_setup(con, ids)
    found = doctor_findings(runs, server_args, runtime, trained_layers)
    return [(name, found[run_id]) for run_id, name in runs.select("run_id", "run_name").iter_rows()]


def _setup_findings(setup: dict[str, list[DoctorFinding]], arm_of, names) -> list[Finding]:
    """The doctor's findings as report warnings, one per distinct message, naming the runs it concerns."""
    grouped: dict[tuple[str, str, str, str], list[str]] = {}
    for run_id, found in setup.items():
        for f in found:
            if f.code != "not_checked":
                grouped.setdefault((f.code, f.severity, f.message, f.fix), []).append(run_id)
    return [Finding(f"doctor_{code}", f"{message}. Fix: {fix} (speclogs doctor)", "info" if severity == "info" else "warning",
                    tuple(sorted({arm_of[r] for r in ids})), tuple(names[r] for r in ids))
            for (code, severity, message, fix), ids in grouped.items()]


def _acceptance_findings(arm: Arm, causes: list[DoctorFinding], reference: tuple[float, float] | None,
                         interval: tuple[float, float] | None) -> list[Finding]:
    """Accept length 1.00, or below a reference beyond the arm's interval: the setup's errors named as the cause."""
    sources: dict[str, list[str]] = {}
    for f in causes:
        sources.setdefault(f.message, []).append(f.source)
    cause = "; ".join(f"{message} ({where[0]}" + (f", and {len(where) - 1} more run(s)" if len(where) > 1 else "") + ")"
                      for message, where in sources.items())
    why = (f" The setup names the cause: {cause}." if cause else " The doctor finds nothing wrong in the recorded setup "
           "(flags, configs, layer ids): check the draft was trained for this target and workload "
           "(speclogs doctor --trained-layers).")
    out = []
    if arm.accept_len < ACCEPT_LEN_ONE:
        out.append(Finding("accept_len_one", f"arm {arm.name} runs {arm.speculative_algorithm} but its accept len is "
                           f"{arm.accept_len:.2f}: the draft is (almost) never accepted, speculation only adds cost here."
                           + why, "warning", (arm.name,)))
    elif reference is not None and interval is not None and interval[1] < reference[0] - reference[1]:
        value, width = reference
        out.append(Finding("acceptance_below_reference", f"arm {arm.name}: accept len {arm.accept_len:.2f} "
                           f"[{interval[0]:.2f}, {interval[1]:.2f}] is below the reference {value:.2f}"
                           + (f" ± {width:.2f}" if width else "") + f" ({arm.accept_len / value - 1:+.0%})." + why,
                           "warning", (arm.name,)))
    return out


def _launches_needed(arms: Sequence[Arm], comparisons: Sequence[RatioComparison], confidence: float,
                     min_effect: float) -> list[Finding]:
    """How many launches per arm detect a 5 % difference at the pooled per-launch spread (client source first), and
    whether more launches or more requests would narrow the interval."""
    deviations, dof, within = 0.0, 0, 0.0
    for estimate in (a.client or a.server for a in arms):
        if estimate and len(estimate.per_launch_tok_s) >= 2:
            logs = np.log(np.array(estimate.per_launch_tok_s))
            deviations += float(np.sum((logs - logs.mean()) ** 2))
            within += (len(logs) - 1) * estimate.within_cv ** 2
            dof += len(logs) - 1
    if dof == 0:
        return []
    sd = math.sqrt(deviations / dof)
    within_sd = math.sqrt(within / dof)
    launch_sd = math.sqrt(max(sd**2 - within_sd**2, 0.0))
    needed = power.launches_needed(sd, PLANNED_EFFECT, confidence, min_effect)
    plan = (f"plan ≈ {needed} launches per arm" if needed is not None
            else f"more than {power.MAX_LAUNCHES} launches per arm would be needed")
    threshold = f", with the {min_effect:.0%} threshold" if min_effect > 0 else ""
    detect = sorted({f"{c.arm_b} vs {c.arm_a} ({c.source}) ×{c.min_detectable_ratio:.3f}" for c in comparisons
                     if math.isfinite(c.min_detectable_ratio)})
    detect_text = (f"; with the launches at hand the smallest true ratio detected with 80 % power is {', '.join(detect)}"
                   if detect else "")
    lever = ("more launches narrow the interval; more requests per launch barely help"
             if launch_sd >= within_sd else "more requests per launch would narrow it as much as more launches")
    return [Finding(
        "launches_needed", f"spread of per-launch throughput: {sd:.1%} (pooled SD of per-launch log throughput, {dof} "
        f"degrees of freedom) = launch-to-launch {launch_sd:.1%} + within-launch {within_sd:.1%} (in quadrature): "
        f"{lever}. To detect a {PLANNED_EFFECT:.0%} difference (Welch t, {confidence:.0%} two-sided, 80 % power"
        f"{threshold}) {plan}{detect_text}", "info")]


def _ignored_env_findings(tables: RunTables, ignore: Sequence[str]) -> list[Finding]:
    """Say which ignored env variables differ between the compared runs (so ignoring them is a visible choice)."""
    envs = [env for text in tables.runs["env"].to_list() if (env := parse_json_text(text))]
    differing = sorted(name for name in {name for env in envs for name in env} if ignored_env(name, ignore)
                       and len({str(env[name]) if name in env else None for env in envs}) > 1)
    if not differing:
        return []
    return [Finding("env_ignored", f"not compared (the default ignore list and --ignore-env): {_listed(differing, 12)} differ between "
                    "the runs; --ignore-env NAME adds names, globs allowed", "info")]


# per run, the decode rows a steady-state rule set apart (excluded_reason, or steady but eager by configuration)
_SET_APART = {
    "no_cuda_graph": ("warmup_in_window", "decode batches without CUDA graph after the server was ready, with CUDA "
                      "graphs configured and the batch within the captured sizes (eager warm-up) in {runs}: excluded "
                      "from server figures; the client's numbers include them", "warning"),
    "before_health_200": ("served_before_ready", "decode batches after 'ready' but before the first /health 200 in {runs}: "
                          "a client that did not wait for health measured warm-up; excluded from server figures", "warning"),
    "non_finite": ("non_finite_values", "decode rows with NaN/inf/zero gen throughput in {runs}: excluded", "warning"),
    "eager_by_config": ("eager_by_config", "decode batches without CUDA graph by configuration (disable_cuda_graph, or more "
                        "running requests than the largest captured batch) in {runs}: not warm-up — they count, and their "
                        "step time is the eager one", "info"),
}


def _warmup_findings(decode: pl.DataFrame, clients: pl.DataFrame, cycles: pl.DataFrame, arm_of, names) -> list[Finding]:
    if decode.is_empty():
        return []
    # lazy: the filters copy only the columns the counts read, not every column of millions of rows
    apart = (decode.lazy().filter(~pl.col("steady") | pl.col("eager_by_config")).select(
        pl.col("run_id").cast(pl.Utf8), pl.when(pl.col("eager_by_config")).then(pl.lit("eager_by_config"))
        .otherwise(pl.col("excluded_reason").cast(pl.Utf8)).alias("reason")).group_by("run_id", "reason").len()
        .sort("run_id").collect())
    findings = _detected_warmup_findings(decode, clients, arm_of, names)
    for reason, (code, text, severity) in _SET_APART.items():
        rows = apart.filter(pl.col("reason") == reason)
        if rows.height:
            runs = _listed([f"{names[run_id]} ({n})" for run_id, _, n in rows.iter_rows()], 6, more="more runs")
            findings.append(Finding(code, text.format(runs=runs), severity, tuple(sorted({arm_of[r] for r in rows["run_id"]}))))
    detail = ", ".join(f"{r or 'steady'} {n}" for r, n in decode.group_by("excluded_reason").len()
                       .sort("excluded_reason", nulls_last=True).iter_rows())
    if not cycles.is_empty():
        detail += "; profiled cycles (spec_cycles) " + ", ".join(
            f"{r or 'used'} {n}" for r, n in cycles.group_by("excluded_reason").len().sort("excluded_reason", nulls_last=True).iter_rows())
    return findings + [Finding("steady_state", f"decode rows used / excluded by the steady-state rule: {detail}", "info")]


def _detected_warmup_findings(decode: pl.DataFrame, clients: pl.DataFrame, arm_of, names) -> list[Finding]:
    """Warm-up found in the data (slow start with CUDA graphs on), per run: how long, how much slower, what was cut."""
    slow, tok_s = pl.col("excluded_reason") == "warmup_detected", pl.col("gen_throughput_tok_s").cast(pl.Float64)
    detected = (decode.lazy().group_by(pl.col("run_id").cast(pl.Utf8)).agg(
        slow.sum().alias("n"), (tok_s.filter(slow).mean() / tok_s.filter(pl.col("steady")).mean() - 1.0).alias("change"),
        ((pl.col("ts").filter(slow).max() - pl.col("ts").filter(slow).min()).dt.total_milliseconds() / 1000).alias("s"))
        .filter(pl.col("n") > 0).sort("run_id").collect())
    cut_requests = dict(clients.filter(slow).group_by("run_id").len().iter_rows())
    return [Finding(
        "warmup_detected", f"run {names[run_id]}: its first {n} steady-looking decode rows (~{seconds:.0f} s) ran "
        f"{math.nan if change is None else change:+.1%} against the rest — a warm-up with CUDA graphs on (least-squares "
        "change point, t test p < 0.01 over the cuts searched): excluded from the server figures and its profiled cycles"
        + (f", and {cut_requests[run_id]} client request(s) in that window from the client's" if cut_requests.get(run_id)
           else "; the client's requests could not be matched to it and still include it"), "warning", (arm_of[run_id],))
        for run_id, n, change, seconds in detected.iter_rows()]


def _trend_findings(decode: pl.DataFrame, clients: pl.DataFrame, arm_of, names) -> list[Finding]:
    findings = []
    tests: list[tuple[str, str, stats.Trend]] = []
    for run_id, rows in steady_launches(decode, ["gen_throughput_tok_s", "segment"]):
        trend = stats.request_trend(rows["gen_throughput_tok_s"].cast(pl.Float64).to_numpy(), rows["segment"].to_numpy())
        if trend:
            tests.append(("server", run_id, trend))
    used = clients.filter(pl.col("excluded_reason").is_null())
    for (run_id,), rows in sorted(used.partition_by("run_id", as_dict=True).items()):
        trend = stats.trend_test((rows["tokens"] / rows["seconds"]).to_numpy())
        if trend:
            tests.append(("client", run_id, trend))
    adjusted = stats.holm([trend.p_value for _, _, trend in tests]) if tests else []
    for (source, run_id, trend), p_value in zip(tests, adjusted):
        if p_value >= TREND_ALPHA or abs(trend.relative_change) <= TREND_MIN_CHANGE:
            continue
        what = ("server throughput drifts over the run" if source == "server"
                else "client throughput drifts over the requests")
        findings.append(Finding(
            "non_stationary", f"run {names[run_id]}: {what} (Kendall tau {trend.tau:+.2f}, p={trend.p_value:.1g}, "
            f"Holm-adjusted over the {len(tests)} series tested {p_value:.1g}, last third vs first third "
            f"{trend.relative_change:+.1%}, n={trend.n}) — thermal throttling, growing KV cache or a co-tenant; a mean "
            "over a drifting series depends on the run length", "warning", (arm_of[run_id],)))
    return findings


def _run_findings(tables: RunTables, decode: pl.DataFrame, clients: pl.DataFrame, run_data_rows: dict[str, int], arm_of,
                  names) -> list[Finding]:
    """Per run: client requests without numbers, server events, retractions, no decode rows, an outcome other than ok."""
    events = tables.events.with_columns(pl.col("kind").replace({"retracted_req": "retract"})).group_by(
        "run_id", "kind", maintain_order=True).agg(pl.col("n").sum())
    bad = clients.filter(pl.col("excluded_reason") == "non_finite").group_by("run_id", maintain_order=True).len()
    found = [("non_finite_values", run_id, f": {n} client request(s) without usable tokens or latency (NaN/inf/0) were "
              "excluded") for run_id, n in bad.iter_rows()]
    found += [(f"server_{kind}", run_id, f": {n} '{kind}' event(s) in the server log") for run_id, kind, n in events.iter_rows()
             if kind != "retract"]
    found += [("retractions", run_id, f": {n} request retraction(s) (KV cache full): retracted requests are recomputed, so "
               "throughput and latency include rework") for run_id, kind, n in events.iter_rows() if kind == "retract"]
    found += [("no_decode_rows", run_id, " has no 'Decode batch' rows: server throughput, acceptance and attribution are "
               "unavailable for it") for run_id, n in run_data_rows.items()
              if n == 0 and decode.filter(pl.col("run_id") == run_id).is_empty()]
    found += [("run_outcome", run_id, f" ended with outcome {outcome!r}: its numbers may be partial")
              for run_id, outcome in tables.runs.select("run_id", "outcome").iter_rows() if outcome not in (None, "ok")]
    return [Finding(code, f"run {names[run_id]}{text}", "warning", (arm_of[run_id],)) for code, run_id, text in found]
