"""The wheel holds every package of src/speclogs and the bundled grammars: pyproject.toml lists the packages by name
(the grammars/ folder ships as speclogs._grammars, which setuptools' package finder cannot map)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

from conftest import ROOT, cli_env


def test_pyproject_lists_every_package_and_the_grammars():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT / "src").parts) for p in (ROOT / "src" / "speclogs").rglob("__init__.py")}
    assert set(setuptools["packages"]) == found | {"speclogs._grammars"}
    assert setuptools["package-dir"]["speclogs._grammars"] == "grammars"
    assert "*.toml" in setuptools["package-data"]["speclogs._grammars"]


# pyarrow as if it were not installed: the path finder does not find it (so `import pyarrow` fails and polars' and
# DuckDB's checks for it say it is missing), then the CLI's commands run in this one process.
_WITHOUT_PYARROW = """
import importlib.machinery, json, sys
find = importlib.machinery.PathFinder.find_spec
importlib.machinery.PathFinder.find_spec = lambda name, path=None, target=None: (
    None if name.partition(".")[0] == "pyarrow" else find(name, path, target))
from speclogs.cli import main
print(json.dumps([main(argv) for argv in json.loads(sys.argv[1])]))
print(sorted(m for m in sys.modules if m.partition(".")[0] == "pyarrow"))
"""


def test_the_plain_install_needs_no_pyarrow(tmp_path):
    """The core dependencies leave pyarrow out (the fleet extra has it, for deltalake): ingest, the 2×2 report in
    every format and every `speclogs sql` format work without it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not [d for d in project["dependencies"] if d.startswith("pyarrow")]
    assert [d for d in project["optional-dependencies"]["fleet"] if d.startswith("pyarrow")]
    db, out = str(tmp_path / "s.duckdb"), tmp_path
    arms = ["baseline_default_[0-9]", "baseline_nccl_[0-9]", "eagle3_default_[0-9]", "eagle3_nccl_[0-9]"]
    query = "SELECT run_name, count(*) AS n, avg(gen_throughput_tok_s) AS tok_s FROM decode_batches JOIN runs USING (run_id) GROUP BY 1"
    commands = [["ingest", str(ROOT / "fixtures" / "h200x2"), "--db", db],
                ["report", "--db", db, "--compare", *arms, "-o", str(out / "r.json"), "-o", str(out / "r.md"),
                 "--html", str(out / "r.html")],
                *(["sql", query, "--db", db, "--format", kind, "--limit", "0"] for kind in ("table", "csv", "json", "ndjson")),
                ["sql", query, "--db", db, "--format", "parquet", "--output", str(out / "q.parquet")]]
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PYARROW, json.dumps(commands)], capture_output=True, text=True,
                          env=cli_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    codes, modules = done.stdout.splitlines()[-2:]
    assert json.loads(codes) == [0] * len(commands), done.stderr[-2000:]
    assert modules == "[]"
    assert json.loads((out / "r.json").read_text())["arms"] and (out / "r.html").stat().st_size > 0
    assert "eagle3_nccl_1" in done.stdout and b"PAR1" in (out / "q.parquet").read_bytes()[:4]
