"""Launch plans: a TOML file naming the server command, a matrix of cells and the benchmark.

`load_plan(path)` returns a frozen `Plan`; every error names file:line and says what to fix.
Standard library only: this runs on the GPU box.
"""

from __future__ import annotations

import random
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from speclogs.errors import PlanError

PYTHON_PLACEHOLDER = "{python}"
DEFAULT_COMMAND = (PYTHON_PLACEHOLDER, "-m", "sglang.launch_server")
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

# The plan's own scalars: default, then the smallest (and largest) value allowed; the type is the default's.
_SCALARS: dict[str, tuple] = {
    "host": ("127.0.0.1",), "port": (30000, 1, 65535), "health_timeout_s": (1800.0, 0.1), "health_poll_s": (1.0, 0.01),
    "stop_grace_s": (30.0, 0), "port_wait_s": (10.0, 0), "min_free_mb": (100.0, 0), "progress_every_s": (10.0, 0.01),
    "launch_estimate_s": (0.0, 0), "seed": (0,),
}
_TOP_KEYS = {
    *_SCALARS, "name", "command", "model_path", "args", "env", "inherit_env", "drop_inherited_env", "launches", "order",
    "bench", "bench_serving", "cells", "profile_every", "adaptive", "metrics",
    "nodes", "dist_init_port", "ssh_options", "remote_python", "remote_dir",
}
_CELL_KEYS = {"name", "args", "env", "factors", "launches", "profile", "profile_every", "model_path"}
_ADAPTIVE_KEYS = {"until", "max_launches", "reference", "min_effect", "confidence"}
DEVICE_TIMER_ENV = "SGLANG_ENABLE_METRICS_DEVICE_TIMER"
# What a value of each kind must be, and an example of one (plan errors).
_KINDS = {bool: ("true or false", "true"), int: ("an integer", "2"), float: ("a number", "30"), str: ("a string", '"…"')}


@dataclass(frozen=True)
class BenchSpec:
    """The seeds' single-stream method: `requests` sequential /generate calls, the first `warmup_requests` are warm-up."""

    kind: str = "single_stream"
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
class BenchServingSpec:
    """Optional `python -m sglang.bench_serving` run after the single-stream benchmark."""

    args: tuple[str, ...] = ()
    timeout_s: float = 600.0


@dataclass(frozen=True)
class AdaptiveSpec:
    """The plan's [adaptive] table (speclogs.launcher.adaptive): stop when every cell vs the reference is decided."""

    until: float | None = None          # ci_width bound (fraction); --until overrides
    max_launches: int | None = None     # budget over all cells; --max-launches overrides
    reference: str | None = None        # default: the first cell
    min_effect: float = 0.0
    confidence: float = 0.95


@dataclass(frozen=True)
class MetricsSpec:
    """SGLang's own signals for every launch (`[metrics]`): /metrics scraped around the benchmark windows whenever the
    server has --enable-metrics (`enable` adds it), the CUDA-event device timer, the per-request export file."""

    enable: bool = False              # add --enable-metrics to the server args
    scrape_every_s: float = 0.0       # also scrape every N s while a window is open (0: before and after only)
    scrape_timeout_s: float = 10.0
    device_timer: bool = False        # SGLANG_ENABLE_METRICS_DEVICE_TIMER=1: forward_execution_seconds_total{category}
    request_export: bool = False      # --export-metrics-to-file --export-metrics-to-file-dir <launch dir>


@dataclass(frozen=True)
class Cell:
    name: str
    args: tuple[str, ...]
    env: dict[str, str]
    factors: dict[str, str]
    launches: int
    profile: bool
    profile_every: int
    model_path: str | None
    line_no: int


@dataclass(frozen=True)
class LaunchSpec:
    """One server start: cell × launch number, at position `order_index` of the plan's launch order."""

    cell: Cell
    launch: int
    order_index: int

    @property
    def run_name(self) -> str:
        return f"{self.cell.name}_{self.launch}"


@dataclass(frozen=True)
class NodesSpec:
    """`nodes = ["user@host1", "user@host2"]`: SGLang on every node (node 0 first, it serves HTTP), reached over ssh."""

    hosts: tuple[str, ...]
    dist_init_port: int = 20000          # node 0's port for torch.distributed's rendezvous (--dist-init-addr)
    ssh_options: tuple[str, ...] = ()    # e.g. ["-p", "2222", "-i", "~/.ssh/cluster"]
    remote_python: str = "python3"       # Python ≥ 3.11 on the nodes; also what {python} in `command` means there
    remote_dir: str = ".speclogs-remote"  # working directory on each node (speclogs is unpacked there)

    @property
    def http_host(self) -> str:
        """Where node 0 serves HTTP: its host name as the plan writes it (user@ dropped)."""
        return self.hosts[0].rsplit("@", 1)[-1]


@dataclass(frozen=True)
class Plan:
    name: str
    path: Path
    command: tuple[str, ...]
    model_path: str | None
    args: tuple[str, ...]
    env: dict[str, str]
    inherit_env: tuple[str, ...]
    drop_inherited_env: tuple[str, ...]
    host: str
    port: int
    health_timeout_s: float
    health_poll_s: float
    stop_grace_s: float
    port_wait_s: float
    min_free_mb: float
    progress_every_s: float
    launch_estimate_s: float        # --max-minutes: expected spawn → stop before any launch was measured
    order: str
    seed: int
    bench: BenchSpec
    bench_serving: BenchServingSpec | None
    cells: tuple[Cell, ...]
    text: str = field(repr=False, default="")
    adaptive: AdaptiveSpec | None = None
    metrics: MetricsSpec = MetricsSpec()
    nodes: NodesSpec | None = None   # a multi-node launch (speclogs.launcher.multinode)

    def launch_order(self) -> list[LaunchSpec]:
        """Interleaved rounds (A1 B1 C1 A2 B2 C2 …); with order = "shuffle" each round is shuffled with `seed`."""
        rounds = max(cell.launches for cell in self.cells)
        order: list[LaunchSpec] = []
        for launch in range(1, rounds + 1):
            cells = [cell for cell in self.cells if cell.launches >= launch]
            if self.order == "shuffle":
                random.Random(self.seed * 1000 + launch).shuffle(cells)
            for cell in cells:
                order.append(LaunchSpec(cell=cell, launch=launch, order_index=len(order)))
        return order


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file. Raises PlanError naming file:line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read plan {path}: {exc.strerror}", hint="check the path") from exc
    return parse_plan(text, path)


def parse_plan(text: str, path: Path) -> Plan:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line N, column M)"
        match = re.search(r"at line (\d+)", str(exc))
        line = match.group(1) if match else "?"
        raise PlanError(f"{path}:{line}: TOML syntax error: {exc}", hint="fix the TOML syntax at that line") from exc
    checker = _Checker(path, text)
    checker.unknown_keys(data, _TOP_KEYS, 0, "the plan")

    command_raw = data.get("command", list(DEFAULT_COMMAND))
    command = tuple(checker.str_list(command_raw, "command", 0))
    if not command:
        checker.fail("command", 0, "command is empty",
                     "give the server command, e.g. command = [\"{python}\", \"-m\", \"sglang.launch_server\"]")

    bench = _parse_bench(data.get("bench", {}), checker)
    bench_serving = None
    if "bench_serving" in data:
        raw = dict(checker.table(data["bench_serving"], "bench_serving", 0))
        line = _find_header_line(text, "bench_serving")
        if checker.typed(raw.pop("enabled", True), True, "enabled", line):
            bench_serving = checker.spec(BenchServingSpec, raw, "bench_serving", {"timeout_s": (1,)})

    default_launches = checker.typed(data.get("launches", 2), 2, "launches", 0, 1)
    profile_every = checker.typed(data.get("profile_every", 16), 16, "profile_every", 0, 1)
    cells = _parse_cells(data.get("cells"), checker, default_launches, profile_every)

    adaptive = _parse_adaptive(data["adaptive"], checker) if "adaptive" in data else None
    nodes = _parse_nodes(data, checker, adaptive is not None, cells)

    metrics = checker.spec(MetricsSpec, data.get("metrics", {}), "metrics",
                           {"scrape_every_s": (0,), "scrape_timeout_s": (0.1,)})
    order = data.get("order", "interleaved")
    if order not in ("interleaved", "shuffle"):
        checker.fail("order", 0, f"order must be \"interleaved\" or \"shuffle\", not {order!r}", "use order = \"interleaved\"")

    return Plan(
        name=checker.typed(data.get("name", path.stem), "", "name", 0),
        path=path,
        command=command,
        model_path=_optional_string(checker, data, "model_path", 0),
        args=tuple(checker.str_list(data.get("args", []), "args", 0)),
        env=checker.str_dict(data.get("env", {}), "env", 0),
        inherit_env=tuple(checker.str_list(data.get("inherit_env", list(DEFAULT_INHERIT_ENV)), "inherit_env", 0)),
        drop_inherited_env=tuple(checker.str_list(data.get("drop_inherited_env", ["NCCL_"]), "drop_inherited_env", 0)),
        **{key: checker.typed(data.get(key, default), default, key, 0, *bounds)
           for key, (default, *bounds) in _SCALARS.items()},
        order=order,
        bench=bench,
        bench_serving=bench_serving,
        cells=cells,
        text=text,
        adaptive=adaptive,
        metrics=metrics,
        nodes=nodes,
    )


def _parse_nodes(data: dict, checker: "_Checker", adaptive: bool, cells: tuple[Cell, ...]) -> NodesSpec | None:
    """The multi-node keys: `nodes` (at least two ssh destinations) and its companions, which need it."""
    defaults = {f.name: f.default for f in fields(NodesSpec) if f.name != "hosts"}
    companions = [key for key in defaults if key in data]
    if "nodes" not in data:
        if companions:
            checker.fail(companions[0], 0, f"{companions[0]} needs nodes = [\"user@host1\", \"user@host2\"]",
                         "add nodes, or drop the key (--host runs a single box over ssh)")
        return None
    hosts = tuple(checker.str_list(data["nodes"], "nodes", 0))
    if len(hosts) < 2:
        checker.fail("nodes", 0, f"nodes lists {len(hosts)} node(s); a multi-node launch needs two or more",
                     "list every node, node 0 first; one box is a plain plan (or --host user@box)")
    if adaptive:
        checker.fail("nodes", 0, "nodes cannot be combined with [adaptive] yet", "drop [adaptive] for a multi-node plan")
    for cell in cells:
        if cell.profile:
            checker.fail("profile", cell.line_no, f"cell {cell.name}: profile = true is not supported with nodes",
                         "profile on one node (a plain plan)")
    bounds = {"dist_init_port": (1, 65535)}
    return NodesSpec(hosts=hosts, **{key: checker.typed(data.get(key, default), default, key, 0, *bounds.get(key, ()))
                                     for key, default in defaults.items()})


def _parse_bench(raw: object, checker: "_Checker") -> BenchSpec:
    header = _find_header_line(checker.text, "bench")
    spec = checker.spec(BenchSpec, raw, "bench", {
        "requests": (0,), "warmup_requests": (0,), "max_new_tokens": (1,), "prompt_tokens": (1,), "vocab_size": (2,),
        "request_timeout_s": (0.1,), "temperature": (0,)})
    if spec.kind not in ("single_stream", "none"):
        checker.fail("kind", header, f"bench kind must be \"single_stream\" or \"none\", not {spec.kind!r}",
                     "use kind = \"single_stream\" (add [bench_serving] for sglang.bench_serving)")
    if spec.warmup_requests > spec.requests:
        checker.fail("warmup_requests", header, f"warmup_requests ({spec.warmup_requests}) exceeds requests ({spec.requests})",
                     "requests counts the warm-up requests too")
    return spec


def _percent(text: str, key: str, checker: "_Checker", line: int) -> float:
    raw = text.strip()
    try:
        value = float(raw.rstrip("%").strip()) / (100.0 if raw.endswith("%") else 1.0)
    except ValueError:
        checker.fail(key, line, f"{key} = {text!r} is not a percentage", f"write {key} = \"2%\"")
    if not 0.0 <= value < 1.0:
        checker.fail(key, line, f"{key} = {text!r} is outside [0 %, 100 %)", f"write {key} = \"2%\"")
    return value


def _parse_adaptive(raw: object, checker: "_Checker") -> AdaptiveSpec:
    from speclogs.launcher.adaptive import parse_until

    header = _find_header_line(checker.text, "adaptive")
    table = checker.table(raw, "adaptive", 0)
    checker.unknown_keys(table, _ADAPTIVE_KEYS, header, "[adaptive]")
    until = None
    if "until" in table:
        text = checker.typed(table["until"], "", "until", header)
        try:
            until = parse_until(text)
        except PlanError as exc:
            checker.fail("until", header, str(exc), exc.hint or "")
    min_effect = table.get("min_effect", "0%")
    if not isinstance(min_effect, str):
        min_effect = f"{checker.typed(min_effect, 0.0, 'min_effect', header, 0)}"
    confidence = checker.typed(table.get("confidence", 0.95), 0.95, "confidence", header, 0.5)
    if confidence >= 1.0:
        checker.fail("confidence", header, f"confidence = {confidence} must be below 1", "write confidence = 0.95")
    return AdaptiveSpec(
        until=until,
        max_launches=(checker.typed(table["max_launches"], 2, "max_launches", header, 2)
                      if "max_launches" in table else None),
        reference=_optional_string(checker, table, "reference", header),
        min_effect=_percent(min_effect, "min_effect", checker, header),
        confidence=confidence,
    )


def _parse_cells(raw: object, checker: "_Checker", default_launches: int, profile_every: int) -> tuple[Cell, ...]:
    text = checker.text
    if raw is None:
        raise PlanError(f"{checker.path}:1: the plan has no cells",
                        hint="add at least one [[cells]] table with name = \"…\" (or a [cells.NAME] table)")
    entries: list[tuple[str | None, dict, int]] = []
    if isinstance(raw, list):
        headers = [i + 1 for i, line in enumerate(text.splitlines()) if re.match(r"\s*\[\[\s*cells\s*\]\]", line)]
        for index, item in enumerate(raw):
            line = headers[index] if index < len(headers) else 1
            entries.append((None, checker.table(item, "cells", line), line))
    elif isinstance(raw, dict):
        for name, item in raw.items():
            line = _find_header_line(text, f"cells.{name}") or _find_key_line(text, name, 0) or 1
            entries.append((name, checker.table(item, f"cells.{name}", line), line))
    else:
        checker.fail("cells", 0, "cells must be [[cells]] tables or [cells.NAME] tables",
                     "write each cell as [[cells]] with name = \"baseline\" and args = [\"…\"] (speclogs launch --help)")

    cells: list[Cell] = []
    seen: set[str] = set()
    for name, table, line in entries:
        checker.unknown_keys(table, _CELL_KEYS, line, f"cell at line {line}")
        if name is None:
            if "name" not in table:
                raise PlanError(f"{checker.path}:{line}: this [[cells]] table has no name", hint="add name = \"baseline\"")
            name = checker.typed(table["name"], "", "name", line)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            checker.fail("name", line, f"cell name {name!r} must be letters, digits, '_', '-', '.'", "it names a directory")
        if name in seen:
            checker.fail("name", line, f"cell {name!r} is declared twice", "give each cell its own name")
        seen.add(name)
        factors = table.get("factors", {})
        cells.append(Cell(
            name=name,
            args=tuple(checker.str_list(table.get("args", []), "args", line)),
            env=checker.str_dict(table.get("env", {}), "env", line),
            factors=checker.str_dict(factors, "factors", line),
            launches=checker.typed(table.get("launches", default_launches), 1, "launches", line, 1),
            profile=checker.typed(table.get("profile", False), False, "profile", line),
            profile_every=checker.typed(table.get("profile_every", profile_every), 1, "profile_every", line, 1),
            model_path=_optional_string(checker, table, "model_path", line),
            line_no=line,
        ))
    if not cells:
        raise PlanError(f"{checker.path}:1: the plan has no cells", hint="add at least one [[cells]] table")
    return tuple(cells)


def _optional_string(checker: "_Checker", table: dict, key: str, line: int) -> str | None:
    return checker.typed(table[key], "", key, line) if key in table else None


def _find_key_line(text: str, key: str, start_line: int) -> int:
    pattern = re.compile(rf"^\s*(?:\"{re.escape(key)}\"|{re.escape(key)})\s*=")
    for number, line in enumerate(text.splitlines(), start=1):
        if number >= start_line and pattern.match(line):
            return number
    return 0


def _find_header_line(text: str, dotted: str) -> int:
    parts = [re.escape(part) for part in dotted.split(".")]
    pattern = re.compile(r"^\s*\[\s*" + r"\s*\.\s*".join(parts) + r"\s*\]")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return 0


class _Checker:
    """Type checks that fail with file:line of the offending key."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.text = text

    def spec(self, cls, raw: object, name: str, bounds: dict[str, tuple]):
        """A spec dataclass from the table [name]: its fields are the keys allowed, its defaults the defaults, each
        value checked against its default's type and `bounds` (key → (minimum, maximum))."""
        line = _find_header_line(self.text, name)
        table = self.table(raw, name, 0)
        defaults = {f.name: f.default for f in fields(cls)}
        self.unknown_keys(table, set(defaults), line, f"[{name}]")
        return cls(**{key: self.typed(value, defaults[key], key, line, *bounds.get(key, ())) for key, value in table.items()})

    def typed(self, value: object, default: object, key: str, line: int, minimum=None, maximum=None):
        """`value` checked against the type of `default` (a float takes an integer too) and the bounds."""
        if isinstance(default, tuple):
            return tuple(self.str_list(value, key, line))
        kind = type(default)
        if not isinstance(value, (int, float) if kind is float else kind) or (kind is not bool and isinstance(value, bool)):
            what, example = _KINDS[kind]
            self.fail(key, line, f"{key} must be {what}, not {value!r}", f"write {key} = {example}")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):  # type: ignore[operator]
            self.fail(key, line, f"{key} = {value} is out of range [{minimum}, {maximum if maximum is not None else '∞'}]",
                      "pick a value in range")
        return float(value) if kind is float else value  # type: ignore[arg-type]

    def fail(self, key: str, start_line: int, message: str, hint: str) -> None:
        line = _find_key_line(self.text, key, start_line) or start_line or 1
        raise PlanError(f"{self.path}:{line}: {message}", hint=hint)

    def unknown_keys(self, table: dict, allowed: set[str], line: int, where: str) -> None:
        for key in table:
            if key not in allowed:
                self.fail(key, line, f"unknown key {key!r} in {where}", f"allowed keys: {', '.join(sorted(allowed))}")

    def table(self, value: object, key: str, line: int) -> dict:
        if not isinstance(value, dict):
            self.fail(key, line, f"{key} must be a table, not {type(value).__name__}", f"write it as [{key}]")
        return value  # type: ignore[return-value]

    def str_list(self, value: object, key: str, line: int) -> list[str]:
        if not isinstance(value, list):
            self.fail(key, line, f"{key} must be a list, not {value!r}", f"write {key} = [\"…\"]")
        out: list[str] = []
        for item in value:  # type: ignore[union-attr]
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                self.fail(key, line, f"{key} has an item that is not a string or number: {item!r}", "quote every item")
            out.append(str(item))
        return out

    def str_dict(self, value: object, key: str, line: int) -> dict[str, str]:
        table = self.table(value, key, line)
        out: dict[str, str] = {}
        for name, item in table.items():
            if isinstance(item, bool):
                item = "1" if item else "0"
            if not isinstance(item, (str, int, float)):
                self.fail(name, line, f"{key}.{name} must be a string or number, not {item!r}", "quote the value")
            out[name] = str(item)
        return out
