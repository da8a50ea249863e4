"""Read grammar files (TOML), build their patterns, and validate them against their own samples."""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from speclogs.errors import GrammarError
from speclogs.grammar.fields import FIELDS_SLOT, read_labels
from speclogs.grammar.model import (
    DERIVES,
    FIELD_ROLES,
    FIELD_TYPES,
    SCOPES,
    CounterSample,
    Field,
    GrammarProblem,
    Pattern,
    Sample,
    cast_expr,
)
from speclogs.grammar.template import (
    check_rest_is_last,
    discarded_slots,
    file_shape_regex,
    parse_template,
    slot_names,
    slot_regex,
    template_element,
    template_regex,
)

PREFIX_NAME = "prefix"
DEFAULT_PRIORITY = 100


@dataclass
class LoadedFile:
    """One grammar file's patterns plus where its parts are (for file:line messages)."""

    path: str
    priority: int
    patterns: list[Pattern] = field(default_factory=list)
    problems: list[GrammarProblem] = field(default_factory=list)
    kind: str | None = None  # 'prefix' | 'wrapper': what stands before a message, not a pattern of a scope


def _header_lines(text: str, header: str) -> list[int]:
    rx = re.compile(r"^\s*\[\[\s*" + re.escape(header) + r"\s*\]\]\s*(#.*)?$")
    return [i + 1 for i, line in enumerate(text.splitlines()) if rx.match(line)]


def _key_line_after(lines: list[str], start: int, key: str) -> int:
    """Line number of the first `key =` at or after line `start` (1-based) up to the next table header."""
    rx = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
    for i in range(start, min(len(lines), start + 40)):
        if i > start and lines[i].lstrip().startswith("["):
            break
        if rx.match(lines[i]):
            return i + 1
    return start


def read_grammar_file(path: Path) -> LoadedFile:
    """Parse one TOML grammar file into patterns; problems (bad TOML, bad fields, bad templates) are collected."""
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        loaded = LoadedFile(shown, DEFAULT_PRIORITY)
        loaded.problems.append(GrammarProblem(shown, 0, None, f"cannot read grammar file: {exc.strerror or exc}"))
        return loaded
    except UnicodeDecodeError as exc:
        loaded = LoadedFile(shown, DEFAULT_PRIORITY)
        loaded.problems.append(GrammarProblem(shown, 0, None, f"grammar file is not UTF-8 text: {exc.reason}"))
        return loaded
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        loaded = LoadedFile(shown, DEFAULT_PRIORITY)
        found = re.search(r"at line (\d+)", str(exc))
        loaded.problems.append(GrammarProblem(shown, int(found.group(1)) if found else 1, None, f"not valid TOML: {exc}"))
        return loaded
    return _build_file(shown, text, doc)


def _build_file(shown: str, text: str, doc: dict) -> LoadedFile:
    lines = text.splitlines()
    priority = doc.get("priority", DEFAULT_PRIORITY)
    loaded = LoadedFile(shown, priority if isinstance(priority, int) else DEFAULT_PRIORITY)
    problems = loaded.problems

    def problem(line: int, message: str, sample: str | None = None) -> None:
        problems.append(GrammarProblem(shown, line, sample, message))

    for key in ("family", "table"):
        if not isinstance(doc.get(key), str) or not doc.get(key):
            problem(1, f"missing top-level key '{key}' (a string)")
    if not isinstance(priority, int):
        problem(1, f"'priority' must be an integer, got {priority!r}")
    scope = doc.get("scope", "message")
    if scope not in SCOPES:
        problem(1, f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    for key, kind in (("field", list), ("pattern", list), ("shapes", dict)):
        if key in doc and not isinstance(doc[key], kind):
            problem(1, f"'{key}' must be {'an array of tables [[' + key + ']]' if kind is list else 'a table [' + key + ']'}")
    if problems:
        return loaded
    family, table = doc["family"], doc["table"]
    loaded.kind = doc.get("kind")
    if loaded.kind not in (None, "prefix", "wrapper"):
        problem(1, f"kind must be \"prefix\" or \"wrapper\" (or left out), got {loaded.kind!r}")
    fields, field_shapes = _read_fields(doc.get("field", []), _header_lines(text, "field"), problem)
    field_list = None
    if "labels" in doc:
        field_list, label_problems = read_labels(doc["labels"], {name: f.type for name, f in fields.items()}, "[labels]")
        labels_line = next((i + 1 for i, line in enumerate(text.splitlines()) if line.strip() == "[labels]"), 1)
        for message in label_problems:
            problem(labels_line, message)
        fields[FIELDS_SLOT] = Field(FIELDS_SLOT, "str", None, "label", "the field list, read by [labels]")
        field_shapes[FIELDS_SLOT] = "rest"
    shape_specs: dict[str, dict] = {}
    shape_regexes: dict[str, str] = {}
    for shape_name, spec in (doc.get("shapes") or {}).items():
        try:
            if not isinstance(spec, dict):
                raise GrammarError(f"shape '{shape_name}' must be a table, e.g. {{ values = [\"a\", \"b\"] }}")
            shape_regexes[shape_name] = file_shape_regex(spec, f"shape '{shape_name}'")
        except GrammarError as exc:
            problem(1, str(exc))
            continue
        shape_specs[shape_name] = dict(spec)

    pattern_lines = _header_lines(text, "pattern")
    sample_lines = iter(_header_lines(text, "pattern.sample"))
    counter_lines = iter(_header_lines(text, "pattern.counter_sample"))
    specs = doc.get("pattern", [])
    if not specs:
        problem(1, "the file declares no [[pattern]]")
    for i, spec in enumerate(specs):
        pline = pattern_lines[i] if i < len(pattern_lines) else 1
        if not isinstance(spec, dict):
            problem(pline, "each [[pattern]] must be a table")
            continue
        # samples first, so the sample line numbers stay in step even when this pattern is rejected below
        samples = _read_samples(spec.get("sample", []), sample_lines, lines, pline, problem)
        counters = _read_samples(spec.get("counter_sample", []), counter_lines, lines, pline, problem, counter=True)
        name = spec.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            problem(pline, f"pattern name {name!r} is not an identifier")
            continue
        template = spec.get("template")
        if isinstance(template, list) and all(isinstance(t, str) for t in template):
            template = "".join(template)
        if not isinstance(template, str) or not template:
            problem(pline, f"pattern '{name}' needs template = \"…\" (a string or a list of strings)")
            continue
        spec = {**spec, "template": doc.get("template_prefix", "") + template}
        pscope = spec.get("scope", scope)
        if pscope not in SCOPES:
            problem(pline, f"pattern '{name}': scope must be one of {', '.join(SCOPES)}, got {pscope!r}")
            continue
        derive_name = spec.get("derive")
        if derive_name is not None and derive_name not in DERIVES:
            problem(pline, f"pattern '{name}': unknown derive {derive_name!r}; known: {', '.join(DERIVES)}")
            continue
        gate = spec.get("gate", "")
        if not isinstance(gate, str):
            problem(pline, f"pattern '{name}': gate must be a string")
            continue
        if not isinstance(spec.get("constants", {}), dict):
            problem(pline, f"pattern '{name}': constants must be a table {{ col = value }}")
            continue
        constants = dict(spec.get("constants", {}))
        expand = spec.get("expand")
        if expand is None:
            variants = [(name, spec["template"], gate, constants)]
        else:
            var = expand.get("var") if isinstance(expand, dict) else None
            values = expand.get("values") if isinstance(expand, dict) else None
            if not isinstance(var, str) or not isinstance(values, dict) or not values:
                problem(pline, f"pattern '{name}': expand needs var = \"name\" and values = {{ \"text\" = \"value\", … }}")
                continue
            if "{=" + var + "}" not in spec["template"]:
                problem(pline, f"pattern '{name}': expand var '{var}' is not used as {{={var}}} in the template")
                continue
            as_constant = expand.get("constant", True)
            variants = []
            for text, value in values.items():
                suffix = re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")
                variants.append((
                    f"{name}_{suffix}",
                    spec["template"].replace("{=" + var + "}", _escape_template(text)),
                    gate.replace("{=" + var + "}", text),
                    {**constants, var: value} if as_constant else constants,
                ))
        built: list[Pattern] = []
        for vname, template, vgate, vconstants in variants:
            pattern = _build_pattern(
                problem, pline, shown, vname, template, fields, field_shapes, shape_specs, shape_regexes,
                family=family, table=spec.get("table", table), scope=pscope, gate=vgate, constants=vconstants,
                description=spec.get("description", doc.get("description", "")),
                versions=str(spec.get("versions", doc.get("versions", ""))),
                derive_name=derive_name, group=name, text_column=spec.get("text", doc.get("text")), field_list=field_list,
            )
            if pattern is not None:
                built.append(pattern)
        if not built:
            continue
        if len(built) == 1:
            built[0] = replace(built[0], samples=tuple(samples), counter_samples=tuple(counters))
        else:
            # Each sample goes to the variant that parses it (the first variant when none does, so the failure is reported).
            own: dict[int, list[Sample]] = {k: [] for k in range(len(built))}
            texts = [smp.line for smp in samples] + [_strip_prefix_guess(smp.line) for smp in samples]
            hits = [compiled_hits(b, texts) for b in built]
            for i, smp in enumerate(samples):
                k = next((k for k, hit in enumerate(hits) if hit[i] or hit[len(samples) + i]), 0)
                own[k].append(smp)
            built = [replace(b, samples=tuple(own[k]), counter_samples=tuple(counters)) for k, b in enumerate(built)]
        loaded.patterns.extend(built)
    return loaded


def _read_fields(specs: list, header_lines: list[int], problem) -> tuple[dict[str, Field], dict[str, str | None]]:
    fields: dict[str, Field] = {}
    field_shapes: dict[str, str | None] = {}
    for i, spec in enumerate(specs):
        line = header_lines[i] if i < len(header_lines) else 1
        if not isinstance(spec, dict):
            problem(line, "each [[field]] must be a table")
            continue
        name, ftype, role = spec.get("name"), spec.get("type"), spec.get("role", "measure")
        if not isinstance(name, str) or not name.isidentifier():
            problem(line, f"field name {name!r} is not an identifier")
        elif ftype not in FIELD_TYPES:
            problem(line, f"field '{name}' has type {ftype!r}; use one of {', '.join(FIELD_TYPES)}")
        elif role not in FIELD_ROLES:
            problem(line, f"field '{name}' has role {role!r}; use one of {', '.join(FIELD_ROLES)}")
        elif name in fields:
            problem(line, f"field '{name}' is declared twice")
        else:
            fields[name] = Field(name, ftype, spec.get("unit"), role, spec.get("description", ""))
            field_shapes[name] = spec.get("shape")
    return fields, field_shapes


def _read_samples(raw: list, header_lines, lines: list[str], pline: int, problem, *, counter: bool = False) -> list:
    """A pattern's [[pattern.sample]] (or, with counter, [[pattern.counter_sample]]) entries."""
    samples = []
    for s in raw if isinstance(raw, list) else [raw]:
        header = next(header_lines, pline)
        if not isinstance(s, dict) or not isinstance(s.get("line"), str):
            problem(header, f"a [[pattern.{'counter_sample' if counter else 'sample'}]] needs line = \"…\" (a real log line)")
            continue
        line_no = _key_line_after(lines, header - 1, "line")
        if counter:
            samples.append(CounterSample(s["line"], s.get("claimed_by"), line_no))
            continue
        expect, null = s.get("expect", {}), s.get("null", [])
        if not isinstance(expect, dict) or not isinstance(null, list):
            problem(header, "a sample's expect must be a table { col = value } and null a list of column names")
            continue
        samples.append(Sample(s["line"], dict(expect), line_no, tuple(null)))
    return samples


def _escape_template(text: str) -> str:
    return "".join("\\" + ch if ch in "\\{}|" else ch for ch in text)


def _strip_prefix_guess(line: str) -> str:
    """'[ts tags] message' → 'message' (only to route samples among expanded variants)."""
    if line.startswith("[") and "] " in line:
        return line.split("] ", 1)[1]
    return line


def _build_pattern(problem, pline, shown, name, template, fields, field_shapes, shape_specs, shape_regexes, *, family, table,
                   scope, gate, constants, description, versions, derive_name, group, text_column, field_list) -> Pattern | None:
    where = f"{shown}:{pline} pattern '{name}'"
    field_types = {k: f.type for k, f in fields.items()}
    shape_of = functools.partial(slot_regex, field_types=field_types, field_shapes=field_shapes, file_shapes=shape_regexes,
                                 where=where)
    try:
        nodes = parse_template(template, where)
        check_rest_is_last(nodes, where, field_shapes)
        names = slot_names(nodes)
        regex = template_regex(nodes, shape_of, where)
    except GrammarError as exc:
        problem(pline, str(exc).removeprefix(f"{shown}:{pline} "))
        return None
    clash = sorted(set(constants) & set(names))
    if clash:
        problem(pline, f"pattern '{name}': {', '.join(clash)} is both a constant and a captured field")
        return None
    if text_column is not None and (not isinstance(text_column, str) or not text_column.isidentifier() or text_column in names):
        problem(pline, f"pattern '{name}': text = {text_column!r} must name a column the pattern does not capture")
        return None
    dropped = discarded_slots(nodes, shape_specs)
    if dropped and text_column is None:
        problem(pline, f"pattern '{name}' drops what {{_:{dropped[0]}}} matches, but its rows keep no text: capture it as a field, "
                       "or set text = \"message\" (the column its rows keep the matched text in)")
        return None
    return Pattern(
        name=name, family=family, table=table, scope=scope, gate=gate, regex=regex,
        build=functools.lru_cache(maxsize=1)(functools.partial(template_element, nodes, name, shape_of, field_types)),
        constants=constants, fields=tuple(fields[n] for n in dict.fromkeys(names)), description=description,
        versions=versions, source=f"{shown}:{pline}", derive=DERIVES.get(derive_name) if derive_name else None,
        group=group, template=template, text_column=text_column,
        field_list=field_list if FIELDS_SLOT in names else None,
    )


# ---------------------------------------------------------------------------------------------------------------
# validation


def _message_of(prefix: Pattern | None, pattern: Pattern, line: str) -> tuple[str, dict]:
    """For a message-scope sample written as a full log line, split the prefix off first."""
    if pattern.scope != "message" or prefix is None:
        return line, {}
    head = prefix.parse(line)
    if head is None:
        return line, {}
    message = head.pop("message")
    return message, head


def _same(expected: object, got: object) -> bool:
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return float(expected) == float(got)
    return expected == got


def validate(files: list[LoadedFile], prefix: Pattern | None, focus: set[str] | None = None) -> list[GrammarProblem]:
    """Check every sample and counter-sample of every pattern against the whole ordered set. With `focus` (file
    paths), only problems that involve a pattern of those files: their samples, and others' they would claim first."""
    problems: list[GrammarProblem] = []
    ordered = ordered_patterns(files)
    seen: dict[str, str] = {}
    for p in ordered:
        if p.name in seen:
            file, line = p.source.rsplit(":", 1)
            problems.append(GrammarProblem(file, int(line), None, f"pattern name '{p.name}' is already used at {seen[p.name]}"))
        seen[p.name] = p.source
    by_scope = {s: [p for p in ordered if p.scope == s] for s in SCOPES}
    # the field-list reading of a family (its definition by labels), per scope: every shape's sample must read the same
    field_readers: dict[tuple[str, str], Pattern] = {}
    for q in ordered:
        if q.field_list is not None:
            field_readers.setdefault((q.family, q.scope), q)
    groups_with_samples = {p.group for p in ordered if p.samples}

    def focused(q: Pattern) -> bool:
        return focus is None or q.source.rsplit(":", 1)[0] in focus

    heads = [p for f in files if f.kind is not None for p in f.patterns]
    for p in heads:
        at = p.regex.find("(?P<message>")
        if at < 0 or "(?P<" in p.regex[at + 1:]:
            file, line = p.source.rsplit(":", 1)
            problems.append(GrammarProblem(file, int(line), None, f"pattern '{p.name}': its template must end with {{message}}"))
    for p in ordered + heads:
        is_head = any(p is h for h in heads)
        file = p.source.rsplit(":", 1)[0]
        if not focused(p):
            if not is_head:
                _check_claims_only(p, by_scope, prefix, focused, problems)
            continue

        def bad(sample, message: str, file: str = file) -> None:
            problems.append(GrammarProblem(file, sample.line_no, sample.line, message))

        if not p.samples and p.group not in groups_with_samples:
            problems.append(GrammarProblem(file, int(p.source.rsplit(":", 1)[1]), None,
                                           f"pattern '{p.name}' has no [[pattern.sample]]; every pattern needs at least one real line"))
        texts = [(s.line, {}) if is_head else _message_of(prefix, p, s.line) for s in p.samples]
        compiled = compiled_values(p, [text for text, _ in texts])
        for s, (text, head), fast in zip(p.samples, texts, compiled):
            if p.gate and p.gate not in text:
                bad(s, f"gate {p.gate!r} of pattern '{p.name}' does not occur in the sample")
            slow = p.parse(text)
            if slow is None:
                bad(s, f"sample does not fully match pattern '{p.name}'")
                continue
            if fast != {key: _in_bigint(value) for key, value in slow.items()}:
                bad(s, f"pattern '{p.name}': the compiled regex gives {fast} but pyparsing gives {slow}")
            reader = field_readers.get((p.family, p.scope))
            if reader is not None and reader is not p:
                problems.extend(_disagreement(reader, p, text, slow, file, s))
            values = {**head, **slow}
            for key, want in s.expect.items():
                if key not in values:
                    bad(s, f"expect names '{key}', which pattern '{p.name}' does not fill")
                elif not _same(want, values[key]):
                    bad(s, f"expected {key} = {want!r}, got {values[key]!r}")
            for key in s.null:
                if key not in values:
                    bad(s, f"null names '{key}', which pattern '{p.name}' does not fill")
                elif values[key] is not None:
                    bad(s, f"expected {key} to be NULL, got {values[key]!r}")
            earlier = None if is_head else _first_claim(by_scope[p.scope], text, before=p)
            if earlier is not None:
                bad(s, f"sample of '{p.name}' is claimed first by '{earlier.name}' ({earlier.source}); "
                       "reorder the patterns or make the earlier one stricter")
        for c in p.counter_samples:
            text = c.line if is_head else _message_of(prefix, p, c.line)[0]
            if p.parse(text) is not None:
                bad(c, f"counter-sample matches pattern '{p.name}'")
            elif c.claimed_by is not None and not is_head:
                winner = _first_claim(by_scope[p.scope], text)
                if winner is None or winner.name != c.claimed_by:
                    bad(c, f"counter-sample should be claimed by '{c.claimed_by}', "
                           f"but {('pattern ' + repr(winner.name)) if winner else 'no pattern'} takes it")
    return problems


def _first_claim(patterns: list[Pattern], text: str, *, before: Pattern | None = None) -> Pattern | None:
    """The first of `patterns` (up to `before`) whose gate occurs in `text` and whose definition parses it."""
    for q in patterns:
        if q is before:
            return None
        if (not q.gate or q.gate in text) and q.parse(text) is not None:
            return q
    return None


def _disagreement(reader: Pattern, p: Pattern, text: str, values: dict, file: str, s: Sample) -> list[GrammarProblem]:
    """Where a shape pattern's values for a sample differ from reading the sample by its family's labels."""
    read = reader.parse(text)
    if read is None:
        return [GrammarProblem(file, s.line_no, s.line, f"pattern '{reader.name}' (the reading by [labels]) does not parse the sample")]
    if read["extra_fields"] is not None:
        return [GrammarProblem(file, s.line_no, s.line, f"[labels] lacks label(s) of this sample: {read['extra_fields']}")]
    differ = {k: (values[k], read.get(k)) for k in values if k in read and not _same(values[k], read[k])}
    if differ:
        return [GrammarProblem(file, s.line_no, s.line,
                               f"pattern '{p.name}' and the reading by [labels] differ: "
                               + ", ".join(f"{k} = {a!r} vs {b!r}" for k, (a, b) in differ.items()))]
    return []


def _compiled_groups(p: Pattern, texts: list[str]):
    """The compiled regex's groups for each text, run by polars (the portable executor); `_hit` is null where it does
    not match."""
    import polars as pl

    return pl.Series(texts, dtype=pl.Utf8).str.extract_groups("^(?P<_hit>)" + p.regex.removeprefix("^")).struct.unnest()


def compiled_hits(p: Pattern, texts: list[str]) -> list[bool]:
    """Whether the compiled regex matches each text (compiled_values' `is not None`, without reading the values)."""
    return _compiled_groups(p, texts).get_column("_hit").is_not_null().to_list() if texts else []


def compiled_values(p: Pattern, texts: list[str]) -> list[dict | None]:
    """What the compiled regex gives for each text, run by polars (the portable executor) and cast as the ingest
    casts: the same dict as `Pattern.parse` (fields, constants, derived columns), or None where it does not match."""
    import polars as pl

    if not texts:
        return []
    groups = _compiled_groups(p, texts)
    typed = groups.select(pl.col("_hit"), *(cast_expr(pl.col(f.name), f.type) for f in p.fields))
    out: list[dict | None] = []
    for row in typed.iter_rows(named=True):
        if row.pop("_hit") is None:
            out.append(None)
            continue
        out.append(p.finish({f.name: row[f.name] for f in p.fields}))
    return out


def _in_bigint(value: object) -> object:
    """pyparsing's ints are Python ints; the executors' are BIGINT (out of range → NULL): compare the same way."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return None
    return value


def _check_claims_only(p: Pattern, by_scope: dict, prefix: Pattern | None, focused, problems: list[GrammarProblem]) -> None:
    """For a pattern outside the focus: is one of its samples claimed first by a focused pattern?"""
    earlier = by_scope[p.scope][:by_scope[p.scope].index(p)]
    earlier_focused = [q for q in earlier if focused(q)]
    for s in p.samples if earlier_focused else ():
        q = _first_claim(earlier_focused, _message_of(prefix, p, s.line)[0])
        if q is not None:
            problems.append(GrammarProblem(q.source.rsplit(":", 1)[0], int(q.source.rsplit(":", 1)[1]), s.line,
                                           f"pattern '{q.name}' claims a sample of '{p.name}' ({p.source}) first; "
                                           "make it stricter or give its file a larger priority"))


def ordered_patterns(files: list[LoadedFile]) -> list[Pattern]:
    """Priority order: the file's priority, then file order, then pattern order inside the file."""
    indexed = [(f.priority, i, j, p) for i, f in enumerate(files) if f.kind is None for j, p in enumerate(f.patterns)]
    return [p for *_, p in sorted(indexed, key=lambda t: t[:3])]


def find_prefix(files: list[LoadedFile]) -> Pattern | None:
    """SGLang's own prefix: the pattern named 'prefix' of a prefix grammar."""
    return next((p for p in heads_of(files, "prefix") if p.name == PREFIX_NAME), None)


def heads_of(files: list[LoadedFile], kind: str) -> tuple[Pattern, ...]:
    """The patterns of the prefix (or wrapper) grammars, in priority order."""
    ranked = sorted((f.priority, i, j, p) for i, f in enumerate(files) if f.kind == kind for j, p in enumerate(f.patterns))
    return tuple(p for *_, p in ranked)
