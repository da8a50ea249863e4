"""Check speclogs' profiler targets against the sources of every SGLang release; write the results.

    for v in …; do pip download --no-deps sglang==$v -d /tmp/sglang-dists; done
    python scripts/profile_compat.py /tmp/sglang-dists --out docs/profile_compat.json --docs docs/profiling.md

Opens each wheel or sdist in DISTS (nothing is installed or imported), runs the hook's own
`observe_worker` / `check_worker` (speclogs.profile.targets of this checkout) on its sources for
every worker target and the scheduler, and writes the facts and verdicts to --out (JSON) and the
table between the `profile-compat` markers of --docs. Every version `pip index versions sglang`
lists from 0.5.0 on must have a dist in DISTS (`--listed FILE`: that command's saved output instead
of running it). Exit 0, or 1 with `Error: …` on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's targets
from speclogs.profile import targets  # noqa: E402

FIRST_RELEASE = (0, 5, 0)
SPECULATIVE_PACKAGE = "sglang/srt/speculative/"
TABLE_BEGIN = "<!-- profile-compat:begin (scripts/profile_compat.py writes this table) -->"
TABLE_END = "<!-- profile-compat:end -->"
DIST_NAME = re.compile(r"^sglang-(?P<version>\d+(?:\.\d+)*(?:\.post\d+)?)(?:-|\.tar\.gz$)")
VERSION = re.compile(r"^(?P<release>\d+(?:\.\d+)*)(?:\.post(?P<post>\d+))?$")
TARGET_COLUMNS = {
    "eagle_v2": "`EAGLEWorkerV2`",
    "multi_layer_eagle_v2": "`MultiLayerEagleWorkerV2`",
}


class CompatError(Exception):
    pass


def targets_digest() -> str:
    """A short fingerprint of the hook's declarations: a results file made with other targets is stale."""
    text = repr((targets.WORKER_TARGETS, targets.SCHEDULER_TARGET, targets.MEMBER_CHECKS))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def verdict(target: targets.WorkerTarget, facts: targets.WorkerFacts) -> str:
    """The table's word for `target` in one release: `absent`, `supported`, or `disabled: <why>`."""
    if not facts.module_found:
        return "absent"
    problems = targets.check_worker(target, facts)
    return "disabled: " + "; ".join(problems) if problems else "supported"


def _tuples(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def facts_from_json(cls: type, data: dict[str, Any]) -> Any:
    """WorkerFacts / SchedulerFacts as recorded (other keys, such as the verdict, skipped; lists back to tuples)."""
    names = {field.name for field in dataclasses.fields(cls)}
    facts = {key: _tuples(value) for key, value in data.items() if key in names}
    for key, kind in (("methods", targets.MethodFacts), ("members", targets.MemberFacts)):
        if key in facts:
            facts[key] = {name: kind(**{k: _tuples(v) for k, v in item.items()}) for name, item in facts[key].items()}
    return cls(**facts)


def profiled_as(sources: targets.SourceIndex, cls: targets.ClassDef | None) -> dict[str, Any]:
    """For a subclass of a target's worker or draft class: that class (`subclass_of`), the wrapped methods it overrides,
    and `profiled_as` (the target class when it overrides none), the rule the hook applies when a worker is built."""
    lineage = list(sources.lineage(cls)) if cls is not None else []
    for target in targets.WORKER_TARGETS:
        for class_name in target.classes:
            position = next((i for i, c in enumerate(lineage) if c.module == target.module and c.node.name == class_name), None)
            if position:  # None: not a subclass; 0: the target class itself
                overrides = [method for owner, method in target.wrapped_methods[1:]
                             if owner == class_name and any(method in targets._methods(c.node) for c in lineage[:position])]
                return {"subclass_of": class_name, "overrides": overrides, "profiled_as": None if overrides else class_name}
    return {"subclass_of": None, "overrides": [], "profiled_as": None}


def release_key(version: str) -> tuple[tuple[int, ...], int]:
    """Sort key of an SGLang version (`0.5.3.post2`: release numbers, then the post number)."""
    match = VERSION.match(version)
    if match is None:
        raise CompatError(f"version {version!r} is not N.N.N[.postN]")
    return tuple(int(p) for p in match["release"].split(".")), int(match["post"] or -1)


def listed_versions(pip_index_output: str) -> list[str]:
    """Versions from 0.5.0 on in `pip index versions sglang` output, oldest first."""
    match = re.search(r"^Available versions: (.+)$", pip_index_output, re.MULTILINE)
    if match is None:
        raise CompatError("no 'Available versions:' line in the pip index output")
    versions = [v.strip() for v in match[1].split(",") if v.strip()]
    return sorted((v for v in versions if release_key(v)[0] >= FIRST_RELEASE), key=release_key)


def pip_index_versions() -> str:
    """The output of `python -m pip index versions sglang` (needs the package index)."""
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True, text=True
    )
    if completed.returncode != 0:
        raise CompatError(
            f"pip index versions sglang failed: {completed.stderr.strip()[-300:]} "
            "(save its output elsewhere and pass --listed FILE)"
        )
    return completed.stdout


def dist_reader(path: Path) -> tuple[Callable[[str], str | None], list[str]]:
    """`read_source(module) -> text | None` over one wheel or sdist, and its file names."""
    if path.suffix == ".whl":
        archive = zipfile.ZipFile(path)
        names = archive.namelist()

        def read(name: str) -> bytes:
            return archive.read(name)
    else:
        tar = tarfile.open(path)
        names = [m.name for m in tar.getmembers() if m.isfile()]

        def read(name: str) -> bytes:
            member = tar.extractfile(name)
            return member.read() if member is not None else b""

    anchors = [n for n in names if n == "sglang/version.py" or n.endswith("/sglang/version.py")]
    if not anchors:
        raise CompatError(f"{path.name}: no sglang/version.py inside")
    prefix = min(anchors, key=len)[: -len("sglang/version.py")]
    files = {n[len(prefix):]: n for n in names if n.startswith(prefix)}

    def read_source(module: str) -> str | None:
        stem = module.replace(".", "/")
        for relative in (f"{stem}.py", f"{stem}/__init__.py"):
            if relative in files:
                return read(files[relative]).decode("utf-8", errors="replace")
        return None

    return read_source, sorted(files)


def worker_classes(sources: targets.SourceIndex, files: list[str]) -> list[dict[str, object]]:
    """Every class named *Worker* in sglang/srt/speculative/, and which target (if any) profiles it."""
    found = []
    for relative in files:
        if not (relative.startswith(SPECULATIVE_PACKAGE) and relative.endswith(".py")):
            continue
        module_name = relative[: -len(".py")].replace("/", ".")
        module = sources.module(module_name)
        for class_name in module.classes if module is not None else []:
            if "Worker" not in class_name:
                continue
            cls = sources.find_class(module_name, class_name)
            found.append(
                {"module": module_name, "name": class_name, **profiled_as(sources, cls)}
            )
    return found


def check_release(version: str, path: Path) -> dict[str, object]:
    read_source, files = dist_reader(path)
    sources = targets.SourceIndex(read_source)
    workers = {}
    for target in targets.WORKER_TARGETS:
        facts = targets.observe_worker(target, sources)
        workers[target.key] = {**dataclasses.asdict(facts), "verdict": verdict(target, facts)}
    scheduler = targets.observe_scheduler(targets.SCHEDULER_TARGET, sources)
    return {
        "version": version,
        "dist": path.name,
        "dist_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "worker_classes": worker_classes(sources, files),
        "workers": workers,
        "scheduler": {
            **dataclasses.asdict(scheduler),
            "problems": targets.check_scheduler(targets.SCHEDULER_TARGET, scheduler),
        },
    }


def find_dists(folder: Path) -> dict[str, Path]:
    """version -> dist file (a wheel preferred over an sdist of the same version)."""
    dists: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        match = DIST_NAME.match(path.name)
        if match is None or not (path.suffix == ".whl" or path.name.endswith(".tar.gz")):
            continue
        version = match["version"]
        if version not in dists or path.suffix == ".whl":
            dists[version] = path
    return dists


def _classes_cell(classes: list[dict[str, object]]) -> str:
    parts = []
    for cls in classes:
        name = f"`{cls['name']}`"
        if cls["profiled_as"]:
            name += f" (as {cls['profiled_as']})"
        elif cls["subclass_of"]:
            name += f" (own {', '.join(cls['overrides'])}: not profiled)"
        parts.append(name)
    return ", ".join(parts)


def dump_results(results: dict[str, object]) -> str:
    """JSON with one release per line (a regenerated file's diff shows the releases that changed)."""
    head = {key: value for key, value in results.items() if key != "releases"}
    lines = [json.dumps(head)[:-1] + ', "releases": [']
    lines += [json.dumps(release) + "," for release in results["releases"]]
    lines[-1] = lines[-1].rstrip(",")
    return "\n".join(lines) + "\n]}\n"


def render_table(results: dict[str, object]) -> str:
    """The Markdown table of docs/profiling.md: one row per release, one verdict column per target."""
    header = ["SGLang", "worker classes in `sglang/srt/speculative/`", *TARGET_COLUMNS.values(), "scheduler hook"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for release in results["releases"]:
        scheduler_problems = release["scheduler"]["problems"]
        cells = [
            release["version"],
            _classes_cell(release["worker_classes"]),
            *(release["workers"][key]["verdict"] for key in TARGET_COLUMNS),
            "ok" if not scheduler_problems else "no: " + "; ".join(scheduler_problems),
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def replace_table(doc: str, table: str) -> str:
    begin, end = doc.find(TABLE_BEGIN), doc.find(TABLE_END)
    if begin < 0 or end < begin:
        raise CompatError(f"the docs lack the markers {TABLE_BEGIN!r} … {TABLE_END!r}")
    return doc[: begin + len(TABLE_BEGIN)] + "\n" + table + "\n" + doc[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dists", type=Path, help="folder of sglang wheels / sdists (pip download --no-deps)")
    parser.add_argument("--listed", type=Path, help="saved output of `pip index versions sglang` (default: run it)")
    parser.add_argument("--out", type=Path, required=True, help="JSON results file to write")
    parser.add_argument("--docs", type=Path, help="Markdown file whose profile-compat table is rewritten")
    args = parser.parse_args(argv)
    try:
        listed = listed_versions(args.listed.read_text() if args.listed else pip_index_versions())
        dists = find_dists(args.dists)
        missing = [v for v in listed if v not in dists]
        if missing:
            raise CompatError(
                f"no dist in {args.dists} for {', '.join(missing)}: pip download --no-deps sglang==<v> -d {args.dists}"
            )
        results = {
            "generated_by": "scripts/profile_compat.py",
            "targets_digest": targets_digest(),
            "listed_versions": listed,
            "releases": [check_release(v, dists[v]) for v in listed],
        }
        args.out.write_text(dump_results(results))
        if args.docs is not None:
            args.docs.write_text(replace_table(args.docs.read_text(), render_table(results)))
    except (CompatError, OSError, zipfile.BadZipFile, tarfile.TarError) as error:
        sys.stderr.write(f"Error: {error}\n")
        return 1
    supported = {
        key: sum(r["workers"][key]["verdict"] == "supported" for r in results["releases"])
        for key in TARGET_COLUMNS
    }
    print(f"{len(listed)} releases ({listed[0]} … {listed[-1]}) → {args.out}; supported per target: {supported}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
