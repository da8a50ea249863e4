"""The layout README.md promises, checked on the code: imports point one way (cli → report / analysis / launcher →
store → ingest → grammar → errors), the GPU side (launcher, profile) runs without duckdb, polars or pyarrow,
and nothing caches behind a frozen dataclass's back or without a bound."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SRC, cli_env

PACKAGE = SRC / "speclogs"

# Each part of speclogs and the parts it may import. Shared leaves (errors; redact, runrecord, schema and doctor,
# standard library only; console, the one place text becomes rich) may be imported from anywhere above them.
LEAVES = {"errors": set(), "redact": set(), "runrecord": {"redact"}, "console": {"redact"}, "schema": set(), "doctor": set()}
MAY_IMPORT = {
    "cli": {"report", "analysis", "launcher", "profile", "store", "ingest", "grammar"},
    "report": {"analysis"},                   # renders analysis' results
    "analysis": set(),                        # pure: frames in (read from a connection it is given), results out
    "launcher": set(),                        # GPU side
    "profile": set(),                         # GPU side
    "store": {"ingest", "grammar"},
    "ingest": {"grammar"},
    "grammar": set(),
    **LEAVES,
}
GPU_SIDE = ("launcher", "profile")
# What the GPU side may import besides the standard library: torch and sglang (what it measures), psutil (an SGLang
# dependency).
GPU_THIRD_PARTY = {"torch", "sglang", "psutil"}
NOT_ON_A_GPU_BOX = ("duckdb", "polars", "pyarrow", "scipy", "altair", "pyparsing")


def _modules() -> list[tuple[str, Path, ast.Module]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append((name, path, ast.parse(path.read_text(), str(path))))
    return found


def _part(module: str) -> str:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "speclogs"


def _imports(name: str, path: Path, tree: ast.Module) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import statement, relative ones resolved."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    top_level = {id(node) for node in tree.body}
    guarded = {id(child) for node in tree.body if isinstance(node, (ast.If, ast.Try)) for child in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        module_level = id(node) in top_level or id(node) in guarded
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno, module_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "speclogs" or (node.level and not node.module):   # `from speclogs import x`: x may be a part
                out += [(f"{target}.{alias.name}", node.lineno, module_level) for alias in node.names]
            else:
                out.append((target, node.lineno, module_level))
    return out


def _is_package_part(module: str) -> bool:
    part = module.split(".")[1] if module.count(".") else ""
    return (PACKAGE / part).is_dir() or (PACKAGE / f"{part}.py").is_file()


def test_imports_point_one_way():
    wrong = []
    for name, path, tree in _modules():
        here = _part(name)
        if here in ("speclogs", "__main__"):
            continue
        for target, line, _ in _imports(name, path, tree):
            if not target.startswith("speclogs.") or not _is_package_part(target):
                continue
            there = _part(target)
            if there != here and there not in MAY_IMPORT.get(here, set()) | set(LEAVES) - {here}:
                wrong.append(f"{path.relative_to(SRC)}:{line}: {here} imports {target}")
            if here in LEAVES and there != here and there not in LEAVES[here] | {"errors"}:
                wrong.append(f"{path.relative_to(SRC)}:{line}: the shared leaf {here} imports {target}")
    assert wrong == []


def test_the_gpu_side_imports_only_the_standard_library_and_torch():
    wrong = []
    for name, path, tree in _modules():
        if _part(name) not in GPU_SIDE:
            continue
        for target, line, module_level in _imports(name, path, tree):
            top = target.split(".")[0]
            if top == "speclogs" or top in sys.stdlib_module_names or top in GPU_THIRD_PARTY:
                continue
            wrong.append(f"{path.relative_to(SRC)}:{line}: imports {target}" + (" at module level" if module_level else ""))
    assert wrong == []


BLOCKER = r"""
import importlib, importlib.abc, sys
blocked = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is not installed on this GPU box (blocked by the test)")
sys.meta_path.insert(0, Block())
failed = []
for module in sys.argv[2:]:
    try:
        importlib.import_module(module)
    except ImportError as error:
        missing = getattr(error, "name", None) or str(error)
        if str(missing).split(".")[0] not in ("torch", "sglang"):   # what the GPU box has and this machine may not
            failed.append(f"{module}: {error}")
print("\n".join(failed))
"""


def test_the_gpu_side_imports_on_a_box_without_duckdb_or_polars():
    """Every launcher/profile module, and the CLI, import with duckdb, polars, pyarrow, scipy, altair and
    pyparsing absent."""
    modules = [name for name, _, _ in _modules() if _part(name) in GPU_SIDE and not name.endswith("__main__")]
    modules.append("speclogs.cli")
    done = subprocess.run([sys.executable, "-c", BLOCKER, ",".join(NOT_ON_A_GPU_BOX), *modules], capture_output=True,
                          text=True, env=cli_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def _frozen_dataclasses(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and any(k.arg == "frozen" and getattr(k.value, "value", False)
                                                           for k in decorator.keywords):
                    names.add(node.name)
    return names


def test_no_hidden_or_unbounded_caches():
    """No object.__setattr__ / __dict__ writes (a frozen dataclass that caches behind its own back), no @cache,
    lru_cache(maxsize=None) or cached_property, and a module-level dict/list/set that functions fill has an eviction."""
    found = []
    for _, path, tree in _modules():
        where = path.relative_to(SRC)
        frozen = _frozen_dataclasses(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "__setattr__" and getattr(node.value, "id", "") == "object":
                found.append(f"{where}:{node.lineno}: object.__setattr__")
            if isinstance(node, ast.Attribute) and node.attr == "__dict__" and getattr(node.value, "id", "") == "self":
                found.append(f"{where}:{node.lineno}: self.__dict__")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    named = getattr(decorator, "id", None) or getattr(decorator, "attr", None)
                    if named in ("cache", "cached_property"):
                        found.append(f"{where}:{decorator.lineno}: @{named}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "lru_cache":
                if any(k.arg == "maxsize" and isinstance(k.value, ast.Constant) and k.value.value is None for k in node.keywords):
                    found.append(f"{where}:{node.lineno}: lru_cache(maxsize=None)")
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name in frozen):
            for node in ast.walk(cls):
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and getattr(t.value, "id", "") == "self"
                                                        for t in node.targets):
                    found.append(f"{where}:{node.lineno}: assigns to self in frozen {cls.name}")
        containers = {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                      for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                      if isinstance(target, ast.Name) and isinstance(node.value, (ast.Dict, ast.List, ast.Set))
                      or isinstance(target, ast.Name) and isinstance(node.value, ast.Call)
                      and getattr(node.value.func, "id", "") in ("dict", "list", "set", "OrderedDict", "defaultdict")}
        filled, evicted = set(), set()
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(function):
                if isinstance(node, (ast.Assign, ast.AugAssign)):
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        if isinstance(target, ast.Subscript) and getattr(target.value, "id", None) in containers:
                            filled.add(target.value.id)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        getattr(node.func.value, "id", None) in containers:
                    if node.func.attr in ("setdefault", "append", "add", "update", "extend", "insert"):
                        filled.add(node.func.value.id)
                    if node.func.attr in ("clear", "pop", "popitem", "popleft"):
                        evicted.add(node.func.value.id)
                if isinstance(node, ast.Delete):
                    evicted |= {getattr(t.value, "id", None) for t in node.targets if isinstance(t, ast.Subscript)}
        found += [f"{where}: module-level {container} is filled by functions and never emptied"
                  for container in sorted(filled - evicted)]
    assert found == []


@pytest.mark.parametrize("claim", [
    "Imports point one way: cli → report / analysis / launcher → store → ingest → grammar → errors.",
    "The GPU side (launcher, profile) imports only the standard library and torch",
])
def test_the_readme_says_what_these_tests_check(claim):
    assert claim in " ".join((SRC.parent / "README.md").read_text().split())
