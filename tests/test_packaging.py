"""The wheel holds every package of src/speclogs and the bundled grammars: pyproject.toml lists the packages by name
(the grammars/ folder ships as speclogs._grammars, which setuptools' package finder cannot map)."""

from __future__ import annotations

import tomllib

from conftest import ROOT


def test_pyproject_lists_every_package_and_the_grammars():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT / "src").parts) for p in (ROOT / "src" / "speclogs").rglob("__init__.py")}
    assert set(setuptools["packages"]) == found | {"speclogs._grammars"}
    assert setuptools["package-dir"]["speclogs._grammars"] == "grammars"
    assert "*.toml" in setuptools["package-data"]["speclogs._grammars"]
