"""On-disk cache of a validated grammar set, keyed by the content of the grammar files and of this package.

Building every pyparsing element and checking every sample takes about a second; a CLI start should not pay it.
A cache hit restores patterns (regex, fields, samples) from JSON and builds pyparsing elements only when
`Pattern.parse` is first called. Only sets that validated without problems are written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

from speclogs.grammar.model import DERIVES, CounterSample, Field, GrammarSet, Pattern, Sample

log = logging.getLogger(__name__)
FORMAT_VERSION = 1
_SOURCES = ("model.py", "template.py", "lower.py", "loader.py", "cache.py", "__init__.py")


def cache_dir() -> Path:
    override = os.environ.get("SPECLOGS_CACHE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "speclogs"


def cache_key(paths: list[Path]) -> str | None:
    digest = hashlib.sha256(f"speclogs-grammar-cache-{FORMAT_VERSION}".encode())
    here = Path(__file__).parent
    try:
        for name in _SOURCES:
            digest.update((here / name).read_bytes())
        for p in paths:
            digest.update(str(p).encode() + b"\0")
            digest.update(p.read_bytes())
    except OSError:
        return None
    return digest.hexdigest()[:24]


def _pattern_to_json(p: Pattern, file_info: dict) -> dict:
    return {
        "name": p.name, "family": p.family, "table": p.table, "scope": p.scope, "gate": p.gate, "regex": p.regex,
        "constants": p.constants, "fields": [[f.name, f.type, f.unit, f.role, f.description] for f in p.fields],
        "description": p.description, "versions": p.versions, "source": p.source, "group": p.group,
        "template": p.template, "derive": p.derive_name,
        "samples": [[s.line, s.expect, s.line_no, list(s.null)] for s in p.samples],
        "counter_samples": [[c.line, c.claimed_by, c.line_no] for c in p.counter_samples],
        "file": file_info,
    }


def _pattern_from_json(d: dict) -> Pattern:
    info = d["file"]
    where = f"{d['source']} pattern '{d['name']}'"
    def factory(template=d["template"], name=d["name"]):
        from speclogs.grammar.loader import make_element_factory  # pyparsing only when an element is needed

        return make_element_factory(template, where, name, info["field_types"], info["field_shapes"], info["shape_specs"])()

    return Pattern(
        name=d["name"], family=d["family"], table=d["table"], scope=d["scope"], gate=d["gate"], regex=d["regex"],
        element_factory=factory, constants=d["constants"], fields=tuple(Field(*f) for f in d["fields"]),
        description=d["description"], versions=d["versions"], source=d["source"], group=d["group"],
        template=d["template"], derive_name=d["derive"], derive=DERIVES.get(d["derive"]) if d["derive"] else None,
        samples=tuple(Sample(line, expect, line_no, tuple(null)) for line, expect, line_no, null in d["samples"]),
        counter_samples=tuple(CounterSample(*c) for c in d["counter_samples"]),
    )


def read_cached(key: str) -> GrammarSet | None:
    path = cache_dir() / f"grammars-{key}.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return GrammarSet(
            prefix=_pattern_from_json(doc["prefix"]),
            patterns=[_pattern_from_json(d) for d in doc["patterns"]],
            files=tuple(doc["files"]),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.debug("grammar cache %s unusable (%s); rebuilding", path, exc)
        return None


def write_cached(key: str, grammar_set: GrammarSet, file_infos: dict[str, dict]) -> None:
    def info(p: Pattern) -> dict:
        return file_infos[p.source.rsplit(":", 1)[0]]

    doc = {
        "prefix": _pattern_to_json(grammar_set.prefix, info(grammar_set.prefix)),
        "patterns": [_pattern_to_json(p, info(p)) for p in grammar_set.patterns],
        "files": list(grammar_set.files),
    }
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp", encoding="utf-8") as tmp:
            json.dump(doc, tmp)
        os.replace(tmp.name, directory / f"grammars-{key}.json")
    except (OSError, TypeError, ValueError) as exc:
        log.debug("cannot write grammar cache in %s: %s", directory, exc)
