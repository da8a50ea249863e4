"""Launch plans (TOML): the server command, a matrix of cells, the benchmark. `load_plan(path)` returns a frozen `Plan`.

Each TOML table becomes its dataclass (fields: the keys allowed, with their defaults and types); errors name file:line.
"""

from __future__ import annotations

import random
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from speclogs.errors import PlanError

PYTHON_PLACEHOLDER = "{python}"
# What a server inherits from the launcher's environment by default (NAME, or PREFIX*): what a Python GPU
# server needs to run and the knobs of its libraries; not whatever else the calling shell holds. ["*"]: all
# (but proxies: http_proxy, HTTPS_PROXY, ALL_PROXY, NO_PROXY … are inherited only when named here).
DEFAULT_INHERIT_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR", "XDG_*",
    "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "VIRTUAL_ENV", "CONDA_*",
    "CUDA_*", "NVIDIA_*", "NCCL_*", "NVSHMEM_*", "GLOO_*", "TORCH_*", "PYTORCH_*", "TRITON_*", "SGLANG_*", "FLASHINFER_*",
    "HF_*", "HUGGING_FACE_*", "TRANSFORMERS_*", "TOKENIZERS_*", "OMP_*", "MKL_*",
    "SSL_CERT_*", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
)
# Flags whose value is a model directory: checked up front when it looks like a local path.
MODEL_PATH_FLAGS = ("--model-path", "--speculative-draft-model-path", "--tokenizer-path")
DEVICE_TIMER_ENV = "SGLANG_ENABLE_METRICS_DEVICE_TIMER"
# The smallest (and largest) value of a numeric key, in whichever table it is.
_RANGES = {
    "port": (1, 65535), "dist_init_port": (1, 65535), "health_timeout_s": (0.1,), "health_poll_s": (0.01,),
    "stop_grace_s": (0,), "port_wait_s": (0,), "min_free_mb": (0,), "progress_every_s": (0.01,), "launch_estimate_s": (0,),
    "launches": (1,), "profile_every": (1,), "requests": (0,), "warmup_requests": (0,), "max_new_tokens": (1,),
    "prompt_tokens": (1,), "vocab_size": (2,), "request_timeout_s": (0.1,), "temperature": (0,), "timeout_s": (1,),
    "scrape_every_s": (0,), "scrape_timeout_s": (0.1,), "max_launches": (2,), "confidence": (0.5,),
}
_CHOICES = {"order": ("interleaved", "shuffle")}
# What a value of each kind must be, and an example of one (plan errors).
_KINDS = {bool: ("true or false", "true"), int: ("an integer", "2"), float: ("a number", "30"), str: ("a string", '"…"')}


@dataclass(frozen=True)
class BenchSpec:   # [bench]: the seeds' single-stream method, `requests` sequential /generate calls, warm-up first
    requests: int = 11
    warmup_requests: int = 1
    max_new_tokens: int = 500
    prompt_tokens: int = 64
    vocab_size: int = 2048
    prompts: tuple[str, ...] = ()  # text prompts instead of random input_ids (cycled)
    seed: int = 0
    request_timeout_s: float = 300.0
    temperature: float = 0.0


@dataclass(frozen=True)
class BenchServingSpec:   # [bench_serving]: `python -m sglang.bench_serving` after the single-stream benchmark
    args: tuple[str, ...] = ()
    timeout_s: float = 600.0


@dataclass(frozen=True)
class AdaptiveSpec:   # [adaptive] (speclogs.launcher.adaptive): stop when every cell vs the reference is decided
    until: float | None = None          # ci_width bound (fraction, from "ci_width<=5%"); --until overrides
    max_launches: int | None = None     # budget over all cells; --max-launches overrides
    reference: str | None = None        # default: the first cell
    min_effect: float = 0.0             # from "2%"
    confidence: float = 0.95


@dataclass(frozen=True)
class MetricsSpec:   # [metrics]: SGLang's own signals for every launch (docs/launcher.md, "SGLang's signals")
    enable: bool = False              # add --enable-metrics to the server args
    scrape_every_s: float = 0.0       # also scrape every N s while a window is open (0: before and after only)
    scrape_timeout_s: float = 10.0
    device_timer: bool = False        # SGLANG_ENABLE_METRICS_DEVICE_TIMER=1: forward_execution_seconds_total{category}
    request_export: bool = False      # --export-metrics-to-file --export-metrics-to-file-dir <launch dir>


@dataclass(frozen=True)
class Cell:
    name: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    factors: dict[str, str] = field(default_factory=dict)
    launches: int = 2
    profile: bool = False
    profile_every: int = 16
    model_path: str | None = None
    line_no: int = 0   # its table's header line


@dataclass(frozen=True)
class LaunchSpec:   # one server start: cell × launch number, at position `order_index` of the plan's launch order
    cell: Cell
    launch: int
    order_index: int

    @property
    def run_name(self) -> str:
        return f"{self.cell.name}_{self.launch}"


@dataclass(frozen=True)
class NodesSpec:   # nodes = ["user@host1", …]: SGLang on every node (node 0 first: it serves HTTP), over ssh
    nodes: tuple[str, ...] = ()
    dist_init_port: int = 20000          # node 0's port for torch.distributed's rendezvous (--dist-init-addr)
    ssh_options: tuple[str, ...] = ()    # e.g. ["-p", "2222", "-i", "~/.ssh/cluster"]
    remote_python: str = "python3"       # Python ≥ 3.11 on the nodes; also what {python} in `command` means there
    remote_dir: str = ".speclogs-remote"  # working directory on each node (speclogs is unpacked there)

    @property
    def http_host(self) -> str:   # where node 0 serves HTTP: its host as the plan writes it, without user@
        return self.nodes[0].rsplit("@", 1)[-1]


@dataclass(frozen=True)
class Plan:
    name: str = ""
    path: Path = Path("plan.toml")
    command: tuple[str, ...] = (PYTHON_PLACEHOLDER, "-m", "sglang.launch_server")
    model_path: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    inherit_env: tuple[str, ...] = DEFAULT_INHERIT_ENV
    drop_inherited_env: tuple[str, ...] = ("NCCL_",)
    host: str = "127.0.0.1"
    port: int = 30000
    health_timeout_s: float = 1800.0
    health_poll_s: float = 1.0
    stop_grace_s: float = 30.0
    port_wait_s: float = 10.0
    min_free_mb: float = 100.0
    progress_every_s: float = 10.0
    launch_estimate_s: float = 0.0   # --max-minutes: expected spawn → stop before any launch was measured
    launches: int = 2                # per cell, unless the cell says
    profile_every: int = 16
    order: str = "interleaved"
    seed: int = 0
    bench: BenchSpec = BenchSpec()
    bench_serving: BenchServingSpec | None = None
    cells: tuple[Cell, ...] = ()
    text: str = field(repr=False, default="")
    adaptive: AdaptiveSpec | None = None
    metrics: MetricsSpec = MetricsSpec()
    nodes: NodesSpec | None = None   # a multi-node launch (speclogs.launcher.multinode)

    def launch_order(self) -> list[LaunchSpec]:
        """Interleaved rounds (A1 B1 C1 A2 B2 C2 …); with order = "shuffle" each round is shuffled with `seed`."""
        order: list[LaunchSpec] = []
        for launch in range(1, max(cell.launches for cell in self.cells) + 1):
            cells = [cell for cell in self.cells if cell.launches >= launch]
            if self.order == "shuffle":
                random.Random(self.seed * 1000 + launch).shuffle(cells)
            order += [LaunchSpec(cell=cell, launch=launch, order_index=len(order) + i) for i, cell in enumerate(cells)]
        return order


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read plan {path}: {exc.strerror}", hint="check the path") from exc
    return parse_plan(text, path)


def parse_plan(text: str, path: Path) -> Plan:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:   # its message ends with "(at line N, column M)"
        line = match.group(1) if (match := re.search(r"at line (\d+)", str(exc))) else "?"
        raise PlanError(f"{path}:{line}: TOML syntax error: {exc}", hint="fix the TOML syntax at that line") from exc
    check = _Checker(path, text)
    node_keys = {key: data.pop(key) for key in [f.name for f in fields(NodesSpec)] if key in data}
    tables = {
        "bench": check.build(BenchSpec, data.get("bench", {}), "bench"),
        "bench_serving": check.build(BenchServingSpec, data["bench_serving"], "bench_serving") if "bench_serving" in data else None,
        "metrics": check.build(MetricsSpec, data.get("metrics", {}), "metrics"),
        "adaptive": _parse_adaptive(data["adaptive"], check) if "adaptive" in data else None,
    }
    bench = tables["bench"]
    if bench.warmup_requests > bench.requests:
        check.fail("warmup_requests", _header_line(text, "bench"), f"warmup_requests ({bench.warmup_requests}) exceeds "
                   f"requests ({bench.requests})", "requests counts the warm-up requests too")
    plan = check.build(Plan, data, None, path=path, text=text, cells=(), **tables)
    if not plan.command:
        check.fail("command", 0, "command is empty",
                   "give the server command, e.g. command = [\"{python}\", \"-m\", \"sglang.launch_server\"]")
    cells = _parse_cells(data.get("cells", []), check, plan)
    return replace(plan, name=plan.name or path.stem, cells=cells,
                   nodes=_parse_nodes(node_keys, check, plan.adaptive is not None, cells))


def _parse_nodes(table: dict, check: _Checker, adaptive: bool, cells: tuple[Cell, ...]) -> NodesSpec | None:
    """The keys of a launch over ssh: `nodes` (one ssh destination or more) and its companions, which need it."""
    if "nodes" not in table:
        for key in table:
            check.fail(key, 0, f"{key} needs nodes = [\"user@host\", …]", "add nodes, or drop the key")
        return None
    spec = check.build(NodesSpec, table, None)
    if not spec.nodes:
        check.fail("nodes", 0, "nodes is empty", "list every node, node 0 first (one: a remote box)")
    if adaptive:
        check.fail("nodes", 0, "nodes cannot be combined with [adaptive] yet", "drop [adaptive] for a multi-node plan")
    for cell in cells:
        if cell.profile:
            check.fail("profile", cell.line_no, f"cell {cell.name}: profile = true is not supported with nodes",
                       "profile on one node (a plain plan)")
    return spec


def _percent(value: object, key: str, check: _Checker, line: int) -> float:   # '2%' → 0.02; a bare number is a fraction
    text = str(value).strip()
    try:
        fraction = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        check.fail(key, line, f"{key} = {value!r} is not a percentage", f"write {key} = \"2%\"")
    if not 0.0 <= fraction < 1.0:
        check.fail(key, line, f"{key} = {value!r} is outside [0 %, 100 %)", f"write {key} = \"2%\"")
    return fraction


def _parse_adaptive(raw: object, check: _Checker) -> AdaptiveSpec:
    from speclogs.launcher.adaptive import parse_until

    header = _header_line(check.text, "adaptive")
    table = dict(check.table(raw, "adaptive", 0))
    if "until" in table:
        try:
            table["until"] = parse_until(check.value(table["until"], str, "until", header))
        except PlanError as exc:
            check.fail("until", header, str(exc), exc.hint or "")
    if "min_effect" in table:
        table["min_effect"] = _percent(table["min_effect"], "min_effect", check, header)
    spec = check.build(AdaptiveSpec, table, "adaptive")
    if spec.confidence >= 1.0:
        check.fail("confidence", header, f"confidence = {spec.confidence} must be below 1", "write confidence = 0.95")
    return spec


def _parse_cells(raw: object, check: _Checker, plan: Plan) -> tuple[Cell, ...]:
    """[[cells]] tables, each with a name; they inherit the plan's launches and profile_every."""
    if not isinstance(raw, list):
        check.fail("cells", 0, "cells must be [[cells]] tables",
                   "write each cell as [[cells]] with name = \"baseline\" and args = [\"…\"] (speclogs launch --help)")
    headers = [i + 1 for i, line in enumerate(check.text.splitlines()) if re.match(r"\s*\[\[\s*cells\s*\]\]", line)]
    entries = [(check.table(item, "cells", line), line) for item, line in zip(raw, headers + [1] * len(raw))]
    cells: list[Cell] = []
    for table, line in entries:
        if "name" not in table:
            raise PlanError(f"{check.path}:{line}: this [[cells]] table has no name", hint="add name = \"baseline\"")
        cell = replace(check.build(Cell, {"launches": plan.launches, "profile_every": plan.profile_every, **table},
                                   f"cell at line {line}", line), line_no=line)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", cell.name):
            check.fail("name", line, f"cell name {cell.name!r} must be letters, digits, '_', '-', '.'", "it names a directory")
        if any(other.name == cell.name for other in cells):
            check.fail("name", line, f"cell {cell.name!r} is declared twice", "give each cell its own name")
        cells.append(cell)
    if not cells:
        raise PlanError(f"{check.path}:1: the plan has no cells",
                        hint="add at least one [[cells]] table with name = \"…\"")
    return tuple(cells)


def _key_line(text: str, key: str, start_line: int) -> int:
    pattern = re.compile(rf"^\s*(?:\"{re.escape(key)}\"|{re.escape(key)})\s*=")
    return next((n for n, line in enumerate(text.splitlines(), 1) if n >= start_line and pattern.match(line)), 0)


def _header_line(text: str, table: str) -> int:
    pattern = re.compile(rf"^\s*\[\s*{table}\s*\]")
    return next((n for n, line in enumerate(text.splitlines(), 1) if pattern.match(line)), 0)


class _Checker:
    """Type checks that fail with file:line of the offending key."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text

    def build(self, cls, raw: object, table_name: str | None, line: int | None = None, **given):
        """A `cls` from a TOML table: its keys must be fields of cls (but those `given`, already parsed), each value
        checked against the field's type. `table_name` is the [table] (None: the plan itself)."""
        if line is None:
            line = _header_line(self.text, table_name) if table_name and not table_name.startswith("cell") else 0
        table = self.table(raw, table_name or "the plan", 0)
        hints = typing.get_type_hints(cls)
        where = "the plan" if table_name is None else table_name if table_name.startswith("cell") else f"[{table_name}]"
        allowed = {f.name for f in fields(cls)} - {"line_no", "path", "text"}
        values = {}
        for key, value in table.items():
            if key in given:
                continue
            if key not in allowed:
                self.fail(key, line, f"unknown key {key!r} in {where}", f"allowed keys: {', '.join(sorted(allowed))}")
            values[key] = self.value(value, hints[key], key, line)
        return cls(**values, **given)

    def value(self, value: object, hint, key: str, line: int):
        """`value` checked against a field type: str, int, float (an integer too), bool, optional, tuple[str, ...] (a
        list of strings or numbers), dict[str, str] (a table of strings, numbers or booleans)."""
        if isinstance(hint, types.UnionType):
            hint = typing.get_args(hint)[0]
        if typing.get_origin(hint) is tuple:
            if not isinstance(value, list):
                self.fail(key, line, f"{key} must be a list, not {value!r}", f"write {key} = [\"…\"]")
            if bad := [item for item in value if isinstance(item, bool) or not isinstance(item, (str, int, float))]:
                self.fail(key, line, f"{key} has an item that is not a string or number: {bad[0]!r}", "quote every item")
            return tuple(str(item) for item in value)
        if typing.get_origin(hint) is dict:
            table = self.table(value, key, line)
            if bad := [name for name, item in table.items() if not isinstance(item, (str, int, float))]:
                self.fail(bad[0], line, f"{key}.{bad[0]} must be a string or number, not {table[bad[0]]!r}", "quote the value")
            return {name: ("1" if item else "0") if isinstance(item, bool) else str(item) for name, item in table.items()}
        if not isinstance(value, (int, float) if hint is float else hint) or (hint is not bool and isinstance(value, bool)):
            what, example = _KINDS[hint]
            self.fail(key, line, f"{key} must be {what}, not {value!r}", f"write {key} = {example}")
        low, high = (*_RANGES.get(key, (None,)), None)[:2]
        if (low is not None and value < low) or (high is not None and value > high):
            self.fail(key, line, f"{key} = {value} is out of range [{low}, {high if high is not None else '∞'}]",
                      "pick a value in range")
        if key in _CHOICES and value not in _CHOICES[key]:
            self.fail(key, line, f"{key} must be " + " or ".join(f'"{c}"' for c in _CHOICES[key]) + f", not {value!r}",
                      f"use {key} = \"{_CHOICES[key][0]}\"")
        return float(value) if hint is float else value

    def fail(self, key: str, start_line: int, message: str, hint: str) -> typing.NoReturn:
        line = _key_line(self.text, key, start_line) or start_line or 1
        raise PlanError(f"{self.path}:{line}: {message}", hint=hint)

    def table(self, value: object, key: str, line: int) -> dict:
        if not isinstance(value, dict):
            self.fail(key, line, f"{key} must be a table, not {type(value).__name__}", f"write it as [{key}]")
        return value
