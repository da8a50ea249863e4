"""Field lists: the definition of SGLang's batch-statistics lines, read by their labels.

A `Decode batch` / `Prefill batch` line is a head and then `label: value` items joined by ", ", in any order and
subset. A grammar file's `[labels]` table says what each label means (the field it fills, constants it sets), and a
pattern whose template ends with `{fields}` hands the rest of the line to `FieldList.read`: a known label's value is
cast to its field's type; an unknown label, or a value that does not read as its type, goes to `extra_fields`;
`#token: full=N, swa=N` reads as the labels `#token full`, `#token swa`; a last item cut short marks the row
`truncated`. The validator holds each sample of the bundled shape templates to this reading.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_SUB_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FIELDS_SLOT = "fields"  # the template slot whose text is read as a field list
OUTPUT_COLUMNS = {"extra_fields": "str", "truncated": "bool"}  # what a field-list row has besides its label fields


@dataclass(frozen=True)
class FieldList:
    """A grammar file's [labels] table (printed label → the field its value fills, the constants it sets), with the
    types of the fields."""

    labels: dict[str, tuple[str, dict[str, object]]]
    types: dict[str, str]  # field → int | float | pct | bool | str

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column a field-list row can fill, in a stable order."""
        names = [name for field, sets in self.labels.values() for name in (field, *sets)]
        return (*dict.fromkeys(names), *OUTPUT_COLUMNS)

    def read(self, text: str) -> dict[str, object]:
        """The typed values of one field list, `extra_fields` (JSON text or None) and `truncated` (True or None)."""
        values: dict[str, object] = dict.fromkeys(self.columns)
        filled: set[str] = set()
        extra: dict[str, object] = {}
        truncated = False
        items = text.split(", ")
        parent: str | None = None
        for index, item in enumerate(items):
            last = index == len(items) - 1
            if last:  # the trailing ", " of some releases (its space stripped by an editor), or one space (0.4.6 PD)
                item = item.rstrip(" ").removesuffix(",")
            if not item:
                continue
            label, colon, value = item.partition(": ")
            if colon:
                parent = label
                key, equals, sub = value.partition("=")
                if equals and _SUB_KEY.fullmatch(key):  # '#token: full=N'
                    label, value = f"{label} {key}", sub
            else:
                key, equals, sub = item.partition("=")
                if equals and parent is not None and _SUB_KEY.fullmatch(key):  # '…, swa=N' after 'full=N'
                    label, value = f"{parent} {key}", sub
                else:  # a label with no value: the line was cut here, or an item nobody knows
                    extra[item] = None
                    truncated |= last
                    continue
            field, sets = self.labels.get(label, (None, {}))
            typed = None if field is None or field in filled else _cast(self.types.get(field, "str"), value)
            if typed is None:
                extra[label] = value
                truncated |= last and not value
                continue
            values[field] = typed
            values.update(sets)
            filled.add(field)
        values["extra_fields"] = json.dumps(extra, ensure_ascii=False) if extra else None
        values["truncated"] = True if truncated else None
        return values


def _cast(type_name: str, text: str) -> object | None:
    """A printed value as its field's type, read exactly as the grammar's shapes read it; None when it is not one."""
    if type_name == "int":
        return int(text) if _INT.fullmatch(text) and -(2**63) <= int(text) < 2**63 else None
    if type_name in ("float", "pct"):
        text = text.removesuffix("%") if type_name == "pct" else text
        # a printed 'nan' (SGLang's `fwd occupancy: nan%` before any forward) is NaN, not NULL
        return float(text) if text == "nan" or _FLOAT.fullmatch(text) else None
    if type_name == "bool":
        return {"True": True, "False": False}.get(text)
    return text or None


def read_labels(table: object, types: dict[str, str]) -> tuple[FieldList | None, list[str]]:
    """A grammar file's [labels] table → FieldList, and what is wrong with it (label → "field" or
    { field = "…", set = { column = value } }; every field must be declared)."""
    if not isinstance(table, dict) or not table:
        return None, ['[labels] must map printed labels to fields, e.g. "#running-req" = "running_req"']
    labels: dict[str, tuple[str, dict]] = {}
    problems: list[str] = []
    for text, spec in table.items():
        spec = {"field": spec} if isinstance(spec, str) else spec
        field, sets = (spec.get("field"), spec.get("set", {})) if isinstance(spec, dict) else (None, None)
        if not isinstance(field, str) or not isinstance(sets, dict):
            problems.append(f"[labels]: label {text!r} must be \"field\" or {{ field = \"…\", set = {{ … }} }}")
        elif unknown := [name for name in (field, *sets) if name not in types]:
            problems.append(f"[labels]: label {text!r} names undeclared field(s) {', '.join(unknown)}")
        else:
            labels[text] = (field, dict(sets))
    return FieldList(labels, dict(types)), problems
