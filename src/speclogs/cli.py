"""speclogs command line: each command parses its options, makes one library call and renders the result (report/).

Library errors (SpeclogsError) become `Error: …` and exit 1 in one place, main(). Heavy modules are imported inside
the commands: launch runs on GPU boxes that have typer and rich but neither duckdb nor polars.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

import speclogs
from speclogs.errors import AnalysisError, GrammarError, LaunchError, SpeclogsError
from speclogs.report import FORMATS

app = typer.Typer(
    name="speclogs",
    help="Forensics for SGLang speculative-decoding runs: logs → DuckDB → statistics → reports.\n\n"
         "Every command has --help; `speclogs COMMAND --help` lists its options with examples.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help is plain text: `[[cells]]` in a help string stays as written
    epilog="\b\nExamples:\n  speclogs ingest fixtures/h200x2\n"
           "  speclogs report --compare 'baseline_default_[0-9]' 'eagle3_default_[0-9]'",
)

DEFAULT_DB = Path("speclogs.duckdb")


def _check_confidence(value: float) -> float:
    if not 0.5 <= value < 1.0:
        raise typer.BadParameter(f"{value} is not in [0.5, 1): write the coverage as a fraction, e.g. 0.95")
    return value


# Options shared by several commands, defined once.
DbOption = Annotated[Path, typer.Option("--db", help="The speclogs DuckDB file.")]
TextFormat = Literal["text", "json"]
TextFormatOption = Annotated[TextFormat, typer.Option(
    "--format", "-f", help="text (a summary on stderr) or json (the summary as JSON on stdout).")]
GrammarOption = Annotated[Optional[list[Path]], typer.Option(
    "--grammar", "-g", help="An extra grammar file, or a directory of *.toml (repeatable; checked like `speclogs grammars check`).")]
LakeOption = Annotated[Optional[Path], typer.Option(
    "--lake", help="A lake folder (Delta tables) instead of the DuckDB file (docs/fleet.md, 'The lake'); any engine reads it.")]
ReportFormatOption = Annotated[Literal["terminal", "json", "md"], typer.Option("--format", "-f", help="terminal, json or md (stdout).")]
ConfidenceOption = Annotated[float, typer.Option("--confidence", callback=_check_confidence,
                                                 help="Interval coverage, e.g. 0.95 (0.5 ≤ value < 1).")]
TrainedLayersOption = Annotated[Optional[str], typer.Option(
    "--trained-layers", help="The aux hidden-state layer ids the EAGLE-3 draft was trained on, e.g. 2,30,58 (config ids: "
    "k = layer k's output): an offset is named as the cause.")]
# … and those of the commands that print a query result (sql, tables, runs).
SqlFormatOption = Annotated[Literal["table", "csv", "json", "ndjson", "parquet"], typer.Option(
    "--format", "-f", help="table (the first --limit rows; floats to 15 significant digits), csv, json (an array of "
    "objects; NaN is null), ndjson (one object a line) or parquet (needs --output).")]
OutputOption = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write the result to FILE instead of stdout (csv, json, parquet).")]
ForceOption = Annotated[bool, typer.Option("--force", help="Overwrite --output FILE if it exists.")]
LimitOption = Annotated[int, typer.Option(
    "--limit", min=0, help="Table format: show at most N rows, then '… M more rows' (0: all of them).")]


def _examples(*commands: str) -> str:
    """A command's help epilog: real invocations, kept unwrapped (click's \\b)."""
    return "\b\nExamples:\n" + "\n".join(f"  {command}" for command in commands)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"speclogs {speclogs.__version__}")
        raise typer.Exit()


@app.callback()
def _main_options(
    version: Annotated[Optional[bool], typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the speclogs version and exit.")] = None,
) -> None:
    pass


def _stderr_console():
    from speclogs.console import make_console

    return make_console(stderr=True)


def _echo_json(document: object) -> None:
    typer.echo(json.dumps(document, indent=1, default=str))


@app.command(epilog=_examples(
    'speclogs ingest fixtures/h200x2 --db 2x2.duckdb',
    'zcat server.log.gz | speclogs ingest - --run-name eagle3_tp2 --check'))
def ingest(
    paths: list[str] = typer.Argument(
        ..., help="Log files, directories (recursive), .gz files, run.json / bench files, or '-' for stdin."
    ),
    db: DbOption = DEFAULT_DB,
    replace: bool = typer.Option(False, "--replace", help="Re-ingest files already in the database (their rows are deleted first)."),
    verify: bool = typer.Option(False, "--verify", help="Read and hash every file, also those whose size, mtime and inode "
                                "are as stored (skipped unread otherwise)."),
    output_format: TextFormatOption = "text",
    run_name: Optional[str] = typer.Option(None, "--run-name", help="Make every input of this call ONE run with this name "
                                           "(default: the log stem, or run.json in a launch directory)."),
    progress: Optional[bool] = typer.Option(
        None, "--progress/--no-progress", help="Progress bar on stderr (default: when stderr is a terminal and the input is large)."
    ),
    grammar: GrammarOption = None,
    check_after: bool = typer.Option(False, "--check", help="Then run `speclogs check` on the files just ingested "
                                     "(exit 1 if a line lost content)."),
    lake: LakeOption = None,
    ray: Optional[str] = typer.Option(
        None, "--ray", help="With --lake: parse the files as tasks on a Ray cluster: 'local' (one started on this machine "
        "for the call), 'auto' (the running cluster) or its ADDRESS (host:port)."),
    ray_cpus: Optional[int] = typer.Option(None, "--ray-cpus", min=1, help="With --ray local: the CPUs of that cluster (default: all)."),
) -> None:
    """Parse SGLang logs, NCCL lines and benchmark files into DuckDB tables (idempotent), or into a Parquet lake."""
    if ray is not None and lake is None:
        raise typer.BadParameter("--ray writes a lake: give --lake DIR too", param_hint="--ray")
    if lake is not None and replace:
        raise typer.BadParameter("a lake is append-only: nothing in it is replaced (ingest a changed file under a new "
                                 "name, or into a new lake)", param_hint="--replace")
    from speclogs.report.summaries import progress_bar, render_check, render_ingest_summary
    from speclogs.store import ingest_paths

    with progress_bar(progress) as on_progress:
        if lake is not None:
            from speclogs.store.lake import ingest_lake  # the fleet extra (deltalake)

            summary = ingest_lake(paths, lake, run_name=run_name, on_progress=on_progress, grammar_paths=grammar or (),
                                  ray=ray, num_cpus=ray_cpus)
        else:
            summary = ingest_paths(paths, db, replace=replace, run_name=run_name, on_progress=on_progress,
                                   grammar_paths=grammar or (), verify=verify)
    if output_format == "json":
        typer.echo(summary.to_json())
    render_ingest_summary(summary, _stderr_console())
    if summary.failed:
        _print_error(f"{len(summary.failed):,} file(s) failed: " + "; ".join(summary.failed), None)
    if check_after and summary.source_files:
        from speclogs.store.check import check_database  # polars: not paid by an ingest that finds nothing new

        result = check_database(db, lake=lake, sources=summary.source_files, grammar_paths=grammar or ())
        render_check(result, _stderr_console(), shown=10)
        if not result.ok:
            raise typer.Exit(1)
    if summary.failed:
        raise typer.Exit(1)


@app.command(epilog=_examples('speclogs check --db 2x2.duckdb'))
def check(
    db: DbOption = DEFAULT_DB,
    output_format: TextFormatOption = "text",
    show: int = typer.Option(10, "--show", min=0, help="How many of the lines that lost something to print."),
    grammar: GrammarOption = None,
    lake: LakeOption = None,
) -> None:
    """Check that the database holds every line it was given: re-read each ingested file and find every number and word
    of every line in that line's rows (lnav -C style). Exit 1 when a line lost something."""
    from speclogs.report.summaries import render_check
    from speclogs.store.check import check_database

    result = check_database(db, lake=lake, grammar_paths=grammar or ())
    if output_format == "json":
        _echo_json(result.to_dict())
    render_check(result, _stderr_console(), shown=show)
    if not result.ok:
        raise typer.Exit(1)


@app.command(epilog=_examples(
    'speclogs sql "SELECT run_name, count(*) FROM decode_batches JOIN runs USING (run_id) GROUP BY 1" --types',
    'speclogs sql "SELECT * FROM drift" --format ndjson -o drift.ndjson'))
def sql(
    query: str = typer.Argument(..., help='SQL to run read-only, e.g. "SELECT run_name, count(*) FROM decode_batches '
                                'JOIN runs USING (run_id) GROUP BY 1"; several statements print one result each; '
                                "'-' reads the SQL from stdin."),
    db: DbOption = DEFAULT_DB,
    output_format: SqlFormatOption = "table",
    output: OutputOption = None,
    force: ForceOption = False,
    limit: LimitOption = 40,
    lake: LakeOption = None,
    show_types: Annotated[bool, typer.Option("--types", help="Table format: each column's DuckDB type under its name.")] = False,
) -> None:
    """Run read-only SQL against the speclogs database (or a lake) and print each statement's result (streamed: any
    size).

    `SHOW TABLES` (or `speclogs tables`) lists the tables and views of the contract (docs/sql.md)."""
    text = sys.stdin.read() if query == "-" else query
    _print_query(db, text, output_format, output, force, limit, lake=lake, show_types=show_types)


@app.command(epilog=_examples('speclogs tables --db 2x2.duckdb'))
def tables(db: DbOption = DEFAULT_DB, output_format: SqlFormatOption = "table", output: OutputOption = None,
           force: ForceOption = False, limit: LimitOption = 0) -> None:
    """List the database's tables and views (the contract in docs/sql.md): kind, columns, rows."""
    from speclogs.store.query import tables_sql

    _print_query(db, tables_sql(db), output_format, output, force, limit)


@app.command(epilog=_examples('speclogs runs --db 2x2.duckdb --format csv'))
def runs(db: DbOption = DEFAULT_DB, output_format: SqlFormatOption = "table", output: OutputOption = None,
         force: ForceOption = False, limit: LimitOption = 0) -> None:
    """List the runs: name, folder, cell and launch, SGLang / torch / NCCL versions, launcher outcome, files, lines, id."""
    from speclogs.store.query import RUNS_SQL

    _print_query(db, RUNS_SQL, output_format, output, force, limit)


def _print_query(db: Path, text: str, output_format: str, output: Path | None, force: bool, limit: int, *,
                 lake: Path | None = None, show_types: bool = False) -> None:
    """Every statement's result of `text` in the chosen format, on stdout or in --output, streamed."""
    from speclogs.report.summaries import render_query_table
    from speclogs.store.export import write_results
    from speclogs.store.query import statements

    if output_format == "parquet" and output is None:
        raise typer.BadParameter("--format parquet writes a file: add --output FILE", param_hint="'--output'")
    if output is not None and output_format == "table":
        raise typer.BadParameter("--output writes csv, json or parquet: add --format csv|json|parquet", param_hint="'--format'")
    if output is not None and output.exists() and not force:
        raise typer.BadParameter(f"{output} exists: pass --force to overwrite it", param_hint="'--output'")
    with statements(db, text, lake=lake) as results:
        if output_format == "parquet" and len(results) > 1:
            raise typer.BadParameter("a Parquet file holds one result: give one statement", param_hint="'--format'")
        if output_format != "table":
            write_results(results, output_format, output)
            return
        for index, result in enumerate(results):
            render_query_table(result, limit, first=index == 0, show_types=show_types)


def main(argv: list[str] | None = None) -> int:
    """Entry point (`speclogs`, `python -m speclogs`): SpeclogsError → `Error: message` (+ `hint: …`) on stderr, exit
    1; bad usage → typer's message, exit 2; Ctrl-C → exit 130. No traceback for any of these."""
    try:
        app(args=argv, prog_name="speclogs")
    except SpeclogsError as error:
        _print_error(str(error), error.hint)
        return 1
    except SystemExit as exit_:
        if exit_.code == 130:  # typer turns Ctrl-C into a silent exit 130: say what it left
            cause: BaseException | None = exit_
            while cause is not None and not isinstance(cause, KeyboardInterrupt):
                cause = cause.__cause__ or cause.__context__
            _print_error(str(cause or "") or "interrupted", None)
        return exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
    return 0


def _print_error(message: str, hint: str | None) -> None:
    from rich.text import Text

    console = _stderr_console()
    console.print(Text.assemble(("Error:", "bold red"), " ", message), soft_wrap=True)
    if hint:
        console.print(Text(f"  hint: {hint}"), soft_wrap=True)


# --- speclogs launch ---
@app.command(epilog=_examples(
    'speclogs launch plans/h200x2.toml --out runs/ --resume',
    "speclogs launch plans/h200-adaptive.toml --until 'ci_width<=5%' --max-launches 12"))
def launch(
    plan: Path = typer.Argument(..., help="Launch plan (TOML): server command, [[cells]] with name/args/env/factors, [bench]."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: runs/<plan name>); DIR/<cell>/<launch>/."),
    resume: bool = typer.Option(False, "--resume", help="Skip launches whose run.json is complete; redo the rest."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="With --resume, also redo failed launches."),
    only: list[str] = typer.Option([], "--only", help="Run only these cells (repeatable or comma-separated)."),
    max_launches: Optional[int] = typer.Option(None, "--max-launches", help="Run at most N launches in this call; adaptive "
                                               "(--until or [adaptive]): the whole run's budget, all cells."),
    max_minutes: Optional[float] = typer.Option(None, "--max-minutes", help="Stop before a launch would not fit; interrupt at M minutes."),
    until: Optional[str] = typer.Option(None, "--until", help="Adaptive: add interleaved rounds until every cell vs the "
                                        "reference is decided or its interval spans ≤ P, e.g. 'ci_width<=5%' (repeated "
                                        "confidence intervals; docs/launcher.md)."),
    force: bool = typer.Option(False, "--force", help="Launch although `speclogs doctor` finds an error in a cell's setup."),
    no_ingest: bool = typer.Option(False, "--no-ingest", help="Do not ingest the outputs at the end (GPU box without duckdb)."),
    db: DbOption = DEFAULT_DB,
    output_format: TextFormatOption = "text",
) -> None:
    """Start the SGLang server per plan launch, wait for /health 200, benchmark, stop, record run.json."""
    from speclogs.launcher import Interrupted, LaunchOptions, launch_plan, load_plan
    from speclogs.launcher.adaptive import parse_until
    from speclogs.report.summaries import render_launch_summary

    console = _stderr_console()
    loaded = load_plan(plan)
    options = LaunchOptions(out_dir=out or Path("runs") / loaded.name, resume=resume, retry_failed=retry_failed,
                            only=tuple(only), max_launches=max_launches, max_minutes=max_minutes,
                            until=parse_until(until) if until is not None else None, force=force)
    try:
        summary = launch_plan(loaded, options, progress=lambda message: console.print(message, soft_wrap=True))
    except Interrupted as stop:
        _print_error(f"interrupted ({stop.args[0] if stop.args else 'Ctrl-C'}): the server was stopped, the launch is "
                     f"marked interrupted in its run.json", "run again with --resume to continue")
        raise typer.Exit(130) from None
    if output_format == "json":
        _echo_json(summary.to_dict())
    render_launch_summary(summary, console)
    if not no_ingest:
        try:
            from speclogs.store import ingest_paths
        except ImportError as missing:
            raise LaunchError(f"the launches are recorded under {summary.out_dir}, but ingest is unavailable here "
                              f"({missing})", hint=f"run `speclogs ingest {summary.out_dir}` where duckdb is installed, "
                              "or pass --no-ingest") from missing
        ingested = ingest_paths([summary.out_dir], db)
        console.print(f"ingested {summary.out_dir} into {db}: {ingested.files_ingested} file(s), "
                      f"{ingested.files_unchanged} unchanged, runs: {', '.join(ingested.runs) or '-'}", highlight=False)
    if summary.failed:
        raise LaunchError(f"{len(summary.failed)} launch(es) did not end ok: "
                          + ", ".join(f"{r.run_name} ({r.outcome})" for r in summary.failed),
                          hint=f"see server.log and run.json under {summary.out_dir}")


# --- speclogs report / doctor / whatif ---
def _check_min_effect(value: str) -> str:
    from speclogs.analysis import parse_percent

    try:
        parse_percent(value, "--min-effect")
    except AnalysisError as error:
        raise typer.BadParameter(str(error)) from None
    return value


def _check_outputs(paths: list[Path]) -> list[Path]:
    for path in paths:
        if path.suffix.lower() not in FORMATS:
            raise typer.BadParameter(f"{path}: the suffix names no report format; use one of {', '.join(sorted(FORMATS))}")
    return paths


def _trained_layers(text: str | None) -> list[int] | None:
    try:
        return [int(item) for item in text.split(",") if item.strip()] if text else None
    except ValueError:
        raise typer.BadParameter(f"--trained-layers {text!r} is not a comma-separated list of integers") from None


@app.command(epilog=_examples(
    "speclogs report --compare 'baseline_nccl_[0-9]' 'eagle3_nccl_[0-9]' --html report.html",
    "speclogs report -c baseline_default -c baseline_nccl -c eagle3_default -c eagle3_nccl --factor nccl='*_nccl' --factor spec='eagle3*'"))
def report(
    compare: list[str] = typer.Option(
        ..., "--compare", "-c", help="Arms: run names or globs over run names ('baseline_nccl_[0-9]'), FOLDER/GLOB, or "
        "'cell:NAME', 'plan:NAME', 'folder:NAME' terms (space-separated terms must all match), each optionally "
        "LABEL=SELECTOR (base='baseline_*'); repeat, or list after one --compare. The first arm is the reference."
    ),
    arms: list[str] = typer.Argument(None, help="More arms (so `--compare A B C` works)."),
    db: DbOption = DEFAULT_DB,
    output_format: ReportFormatOption = "terminal",
    output: list[Path] = typer.Option(
        [], "--output", "-o", callback=_check_outputs, help="Also write the report to FILE, its format from the suffix "
        "(.json, .md, .html, .txt); repeatable: every file comes from the one computation."),
    html: Optional[Path] = typer.Option(None, "--html", help="Also write one self-contained HTML file with charts (= -o FILE.html)."),
    factor: list[str] = typer.Option(
        [], "--factor", help="name=glob (repeatable): runs matching the glob are level 'on', others 'off'; "
        "default: the launch plan's factors (runs.factors)."
    ),
    ignore_env: list[str] = typer.Option(
        [], "--ignore-env", help="Do not compare this environment variable between runs (repeatable; globs: 'MY_*'). "
        "Driver-script, shell, container and cloud variables (MINUTES, AWS_*, CONTAINER_NAME …) are ignored already."),
    confidence: ConfidenceOption = 0.95,
    min_effect: str = typer.Option("0%", "--min-effect", callback=_check_min_effect, help="Practical threshold, e.g. 2%: a "
                                   "winner's interval must lie beyond ±2 %; inside it, 'equivalent'."),
    hidden_size: Optional[int] = typer.Option(None, "--hidden-size", min=1,
                                              help="Target model hidden size (which all-reduce sizes decode/verify send)."),
    reference_acceptance: Optional[str] = typer.Option(
        None, "--reference-acceptance", help="The accept length this target/draft/workload reached before, e.g. 2.0 "
        "or 2.0±0.05 (with its interval): a speculative arm whose interval lies below it is a finding, with the "
        "setup's cause if the doctor finds one."),
    trained_layers: TrainedLayersOption = None,
    lake: LakeOption = None,
    brief: bool = typer.Option(False, "--brief", help="Terminal: only the ranking and the verdicts (≤ 15 lines)."),
    mixed_arms: bool = typer.Option(False, "--mixed-arms", help="Allow an arm to pool launches of different plans or folders."),
) -> None:
    """Compare runs: which is faster, by how much, how sure, and why — ratios with intervals, attribution, factorial
    effects, warnings ranked by whether they change the answer."""
    from speclogs.analysis import compare_runs, parse_factor_options, parse_percent, parse_reference
    from speclogs.console import report_console
    from speclogs.report import render, render_terminal, write_report
    from speclogs.store import connect

    if lake is not None:
        from speclogs.store.lake import connect_lake
    with connect_lake(lake) if lake is not None else connect(db, read_only=True) as connection:
        comparison = compare_runs(connection, list(compare) + list(arms or []), parse_factor_options(factor),
                                  confidence, min_effect=parse_percent(min_effect, "--min-effect"), hidden_size=hidden_size,
                                  ignore_env=tuple(ignore_env), allow_mixed=mixed_arms,
                                  reference_acceptance=parse_reference(reference_acceptance) if reference_acceptance else None,
                                  trained_layers=_trained_layers(trained_layers))
    if output_format == "terminal":
        render_terminal(comparison, report_console(), brief=brief)
    else:
        sys.stdout.write(render(comparison, output_format))
    for path in [*output, *([html] if html is not None else [])]:
        write_report(comparison, path)
        _stderr_console().print(f"wrote {path}")


@app.command(epilog=_examples("speclogs doctor plans/h200-doctor.toml",
                             "speclogs doctor -- python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 "
                             "--speculative-draft-model-path D"))
def doctor(
    targets: list[str] = typer.Argument(None, help="A plan file (PLAN.toml); or, after --, a server command line "
                                        "(-- python -m sglang.launch_server …); or, with --db, run names or globs."),
    db: Optional[Path] = typer.Option(None, "--db", help="Check ingested runs of this speclogs DuckDB file (run.json "
                                      "models + the logged server args)."),
    trained_layers: TrainedLayersOption = None,
    output_format: TextFormat = typer.Option("text", "--format", "-f", help="text, or json (the findings)."),
) -> None:
    """Check a speculative-decoding setup before the launch: algorithm flag vs the draft's architecture, aux layer
    ids vs the target's layers, hidden/vocab sizes, draft-token settings. Exit 1 when a finding is an error."""
    from speclogs.console import make_console
    from speclogs.doctor import check_command
    from speclogs.launcher import doctor_plan, load_plan
    from speclogs.report.doctor import doctor_json, render_doctor

    layers = _trained_layers(trained_layers)
    if not targets:
        raise typer.BadParameter("give a plan file, -- and a server command line, or --db DB and run names")
    if db is not None:
        from speclogs.analysis.lint import doctor_runs
        from speclogs.store import connect

        with connect(db, read_only=True) as connection:
            checked = doctor_runs(connection, targets, layers)
    elif len(targets) == 1 and targets[0].endswith(".toml"):
        checked = [(f"cell {cell}", found) for cell, found in doctor_plan(load_plan(targets[0]), trained_layers=layers).items()]
    else:
        checked = [("command line", check_command(list(targets), layers))]
    if output_format == "json":
        typer.echo(doctor_json(checked))
    else:
        render_doctor(checked, make_console())
    if any(finding.severity == "error" for _, found in checked for finding in found):
        raise typer.Exit(1)


@app.command(epilog=_examples("speclogs whatif 'a_s5_[0-9]' 'baseline_[0-9]' --db sweep.duckdb",
                             "speclogs whatif 'a_s[0-9]_[0-9]' --format json"))
def whatif(
    runs: list[str] = typer.Argument(..., help="Run names or globs: the profiled run(s) to model from, plus any runs of "
                                     "other settings (checked against the model) and baselines (calibrate the target's step)."),
    db: DbOption = DEFAULT_DB,
    output_format: ReportFormatOption = "terminal",
    confidence: ConfidenceOption = 0.95,
) -> None:
    """Predict other --speculative-num-steps / --speculative-num-draft-tokens settings (topk 1) and no speculation from
    one profiled run: throughput with intervals, ranked, and the next setting worth launching (docs/whatif.md)."""
    from speclogs.analysis.whatif import whatif_for
    from speclogs.console import report_console
    from speclogs.report.jsonout import to_json
    from speclogs.report.markdown import md_sections
    from speclogs.report.terminal import render_sections
    from speclogs.report.whatif import whatif_document
    from speclogs.store import connect

    with connect(db, read_only=True) as connection:
        result = whatif_for(connection, runs, confidence)
    if output_format == "json":
        sys.stdout.write(to_json(result) + "\n")
    elif output_format == "md":
        sys.stdout.write(md_sections(whatif_document(result)))
    else:
        render_sections(whatif_document(result), report_console())


# --- speclogs grammars check / list ---
grammars_app = typer.Typer(help="Line grammars: validate your own grammar files, list the loaded patterns.", no_args_is_help=True,
                           rich_markup_mode=None)
app.add_typer(grammars_app, name="grammars")


@grammars_app.command("check", epilog=_examples('speclogs grammars check my_format.toml'))
def grammars_check(
    paths: list[Path] = typer.Argument(None, help="Grammar files (.toml) or directories of them; default: the bundled grammars."),
) -> None:
    """Validate grammar files: every sample must match its pattern, give its expected values and not be claimed earlier."""
    from speclogs.grammar import check_grammar_files

    problems = check_grammar_files(paths or [])
    console = _stderr_console()
    for problem in problems:
        console.print(str(problem), soft_wrap=True)
    if problems:
        raise GrammarError(f"{len(problems)} grammar problem(s)", hint="each line above names file:line; fix the sample or the template")
    console.print(f"ok: {len(paths) if paths else 'all bundled'} grammar file(s) valid")


@grammars_app.command("list", epilog=_examples('speclogs grammars list --format json'))
def grammars_list(
    extra: GrammarOption = None,
    output_format: Annotated[TextFormat, typer.Option("--format", "-f", help="text (a table) or json.")] = "text",
) -> None:
    """List families and patterns in priority order (first match wins), with table, scope and SGLang versions."""
    from speclogs.grammar import load_grammars
    from speclogs.report.summaries import render_rows

    grammars = load_grammars(extra or [])
    keys = ("family", "pattern", "table", "scope", "versions", "gate")
    rows = [dict(zip(keys, (p.family, p.name, p.table, p.scope, p.versions, p.gate)))
            for p in [*grammars.wrappers, *grammars.prefixes, *grammars.patterns]]
    if output_format == "json":
        _echo_json(rows)
    else:
        render_rows(keys[:5], [[row[key] for key in keys[:5]] for row in rows])
