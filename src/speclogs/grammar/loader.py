"""Read grammar files (TOML), build their patterns, validate them against their own samples, and load the set."""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from speclogs.errors import GrammarError
from speclogs.grammar.fields import FIELDS_SLOT, read_labels
from speclogs.grammar.model import (
    DERIVES,
    FIELD_ROLES,
    FIELD_TYPES,
    SCOPES,
    Field,
    GrammarProblem,
    GrammarSet,
    Pattern,
    Sample,
    bundled_grammar_dir,
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
_MAX_SHOWN = 10


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
        doc = tomllib.loads(text)
    except OSError as exc:
        line, message = 0, f"cannot read grammar file: {exc.strerror or exc}"
    except UnicodeDecodeError as exc:
        line, message = 0, f"grammar file is not UTF-8 text: {exc.reason}"
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))
        line, message = int(found.group(1)) if found else 1, f"not valid TOML: {exc}"
    else:
        return _build_file(shown, text, doc)
    return LoadedFile(shown, DEFAULT_PRIORITY, problems=[GrammarProblem(shown, line, None, message)])


def _build_file(shown: str, text: str, doc: dict) -> LoadedFile:
    lines = text.splitlines()
    priority = doc.get("priority", DEFAULT_PRIORITY)
    loaded = LoadedFile(shown, priority if isinstance(priority, int) else DEFAULT_PRIORITY)
    problems = loaded.problems

    def problem(line: int, message: str, sample: str | None = None) -> None:
        problems.append(GrammarProblem(shown, line, sample, message))

    scope = doc.get("scope", "message")
    wrong = [(not isinstance(doc.get(key), str) or not doc.get(key), f"missing top-level key '{key}' (a string)")
             for key in ("family", "table")]
    wrong += [(not isinstance(priority, int), f"'priority' must be an integer, got {priority!r}"),
              (scope not in SCOPES, f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")]
    wrong += [(key in doc and not isinstance(doc[key], list), f"'{key}' must be an array of tables [[{key}]]")
              for key in ("field", "pattern")]
    wrong += [("shapes" in doc and not isinstance(doc["shapes"], dict), "'shapes' must be a table [shapes]")]
    for message in (message for bad, message in wrong if bad):
        problem(1, message)
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
        if not isinstance(spec, dict):
            problem(1, f"shape '{shape_name}' must be a table, e.g. {{ values = [\"a\", \"b\"] }}")
            continue
        try:
            shape_regexes[shape_name] = file_shape_regex(spec, f"shape '{shape_name}'")
            shape_specs[shape_name] = dict(spec)
        except GrammarError as exc:
            problem(1, str(exc))

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
        name, template, pscope = spec.get("name"), spec.get("template"), spec.get("scope", scope)
        derive_name, gate, constants = spec.get("derive"), spec.get("gate", ""), spec.get("constants", {})
        if isinstance(template, list) and all(isinstance(t, str) for t in template):
            template = "".join(template)
        wrong = next((message for bad, message in (
            (not isinstance(name, str) or not name.isidentifier(), f"pattern name {name!r} is not an identifier"),
            (not isinstance(template, str) or not template, f"pattern '{name}' needs template = \"…\" (a string or a list of strings)"),
            (pscope not in SCOPES, f"pattern '{name}': scope must be one of {', '.join(SCOPES)}, got {pscope!r}"),
            (derive_name is not None and derive_name not in DERIVES, f"pattern '{name}': unknown derive {derive_name!r}; known: "
                                                                     f"{', '.join(DERIVES)}"),
            (not isinstance(gate, str), f"pattern '{name}': gate must be a string"),
            (not isinstance(constants, dict), f"pattern '{name}': constants must be a table {{ col = value }}"),
        ) if bad), None)
        if wrong is not None:
            problem(pline, wrong)
            continue
        spec = {**spec, "template": doc.get("template_prefix", "") + template}
        constants = dict(constants)
        expand = spec.get("expand")
        variants = [(name, spec["template"], gate, constants)]
        if expand is not None:
            var, values = (expand.get("var"), expand.get("values")) if isinstance(expand, dict) else (None, None)
            if not isinstance(var, str) or not isinstance(values, dict) or not values:
                problem(pline, f"pattern '{name}': expand needs var = \"name\" and values = {{ \"text\" = \"value\", … }}")
                continue
            if "{=" + var + "}" not in spec["template"]:
                problem(pline, f"pattern '{name}': expand var '{var}' is not used as {{={var}}} in the template")
                continue
            variants = [(f"{name}_{re.sub(r'[^0-9a-z]+', '_', text.lower()).strip('_')}",
                         spec["template"].replace("{=" + var + "}", _escape_template(text)), gate.replace("{=" + var + "}", text),
                         {**constants, var: value} if expand.get("constant", True) else constants) for text, value in values.items()]
        common = dict(family=family, table=spec.get("table", table), scope=pscope, group=name,
                      description=spec.get("description", doc.get("description", "")),
                      versions=str(spec.get("versions", doc.get("versions", ""))),
                      derive=DERIVES.get(derive_name) if derive_name else None, text_column=spec.get("text", doc.get("text")))
        in_file = (fields, field_shapes, shape_specs, shape_regexes, field_list)  # what the file declares
        built = [p for variant in variants if (p := _build_pattern(problem, pline, shown, *variant, *in_file, common))]
        if not built:
            continue
        # each sample goes to the variant that matches it (the first when none does, so the failure is reported)
        own: list[list[Sample]] = [[] for _ in built]
        for smp in samples:
            own[next((k for k, b in enumerate(built) if re.match(b.regex, smp.line)
                      or re.match(b.regex, _strip_prefix_guess(smp.line))), 0)].append(smp)
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
            samples.append(Sample(s["line"], line_no, claimed_by=s.get("claimed_by")))
            continue
        expect, null = s.get("expect", {}), s.get("null", [])
        if not isinstance(expect, dict) or not isinstance(null, list):
            problem(header, "a sample's expect must be a table { col = value } and null a list of column names")
            continue
        samples.append(Sample(s["line"], line_no, dict(expect), tuple(null)))
    return samples


def _escape_template(text: str) -> str:
    return "".join("\\" + ch if ch in "\\{}|" else ch for ch in text)


def _strip_prefix_guess(line: str) -> str:
    """'[ts tags] message' → 'message' (only to route samples among expanded variants)."""
    if line.startswith("[") and "] " in line:
        return line.split("] ", 1)[1]
    return line


def _build_pattern(problem, pline, shown, name, template, gate, constants, fields, field_shapes, shape_specs, shape_regexes,
                   field_list, common: dict) -> Pattern | None:
    """One pattern (an expanded variant: its own name, template, gate and constants); None after saying what is wrong."""
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
    text_column = common["text_column"]
    if text_column is not None and (not isinstance(text_column, str) or not text_column.isidentifier() or text_column in names):
        problem(pline, f"pattern '{name}': text = {text_column!r} must name a column the pattern does not capture")
        return None
    dropped = discarded_slots(nodes, shape_specs)
    if dropped and text_column is None:
        problem(pline, f"pattern '{name}' drops what {{_:{dropped[0]}}} matches, but its rows keep no text: capture it as a field, "
                       "or set text = \"message\" (the column its rows keep the matched text in)")
        return None
    return Pattern(
        name=name, gate=gate, regex=regex, constants=constants, source=f"{shown}:{pline}", template=template,
        build=functools.lru_cache(maxsize=1)(functools.partial(template_element, nodes, name, shape_of, field_types)),
        fields=tuple(fields[n] for n in dict.fromkeys(names)), field_list=field_list if FIELDS_SLOT in names else None,
        **common,
    )


# ---------------------------------------------------------------------------------------------------------------
# validation


def _message_of(prefix: Pattern | None, pattern: Pattern, line: str) -> tuple[str, dict]:
    """For a message-scope sample written as a full log line, split the prefix off first."""
    head = prefix.parse(line) if pattern.scope == "message" and prefix is not None else None
    return (line, {}) if head is None else (head.pop("message"), head)


def _same(expected: object, got: object) -> bool:
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected is got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return float(expected) == float(got)
    return expected == got


def _where(p: Pattern) -> tuple[str, int]:
    file, line = p.source.rsplit(":", 1)
    return file, int(line)


def validate(files: list[LoadedFile], prefix: Pattern | None, focus: set[str] | None = None) -> list[GrammarProblem]:
    """Check every sample and counter-sample of every pattern against the whole ordered set. With `focus` (file
    paths), only problems that involve a pattern of those files: their samples, and others' they would claim first."""
    problems: list[GrammarProblem] = []
    ordered = ordered_patterns(files)
    seen: dict[str, str] = {}
    for p in ordered:
        if p.name in seen:
            problems.append(GrammarProblem(*_where(p), None, f"pattern name '{p.name}' is already used at {seen[p.name]}"))
        seen[p.name] = p.source
    by_scope = {s: [p for p in ordered if p.scope == s] for s in SCOPES}
    # the field-list reading of a family (its definition by labels), per scope: every shape's sample must read the same
    readers: dict[tuple[str, str], Pattern] = {}
    for q in ordered:
        if q.field_list is not None:
            readers.setdefault((q.family, q.scope), q)
    groups_with_samples = {p.group for p in ordered if p.samples}

    def focused(q: Pattern) -> bool:
        return focus is None or _where(q)[0] in focus

    heads = [p for f in files if f.kind is not None for p in f.patterns]
    for p in heads:
        at = p.regex.find("(?P<message>")
        if at < 0 or "(?P<" in p.regex[at + 1:]:
            problems.append(GrammarProblem(*_where(p), None, f"pattern '{p.name}': its template must end with {{message}}"))
    for p in ordered + heads:
        is_head = any(p is h for h in heads)
        file = _where(p)[0]
        if not focused(p):
            if not is_head:
                _check_claims_only(p, by_scope, prefix, focused, problems)
            continue

        def bad(sample, message: str, file: str = file) -> None:
            problems.append(GrammarProblem(file, sample.line_no, sample.line, message))

        if not p.samples and p.group not in groups_with_samples:
            problems.append(GrammarProblem(*_where(p), None,
                                           f"pattern '{p.name}' has no [[pattern.sample]]; every pattern needs at least one real line"))
        texts = [(s.line, {}) if is_head else _message_of(prefix, p, s.line) for s in p.samples]
        for s, (text, head), fast in zip(p.samples, texts, compiled_values(p, [text for text, _ in texts])):
            if p.gate and p.gate not in text:
                bad(s, f"gate {p.gate!r} of pattern '{p.name}' does not occur in the sample")
            slow = p.parse(text)
            if slow is None:
                bad(s, f"sample does not fully match pattern '{p.name}'")
                continue
            if fast != {key: _in_bigint(value) for key, value in slow.items()}:
                bad(s, f"pattern '{p.name}': the compiled regex gives {fast} but pyparsing gives {slow}")
            reader = readers.get((p.family, p.scope))
            if reader is not None and reader is not p:
                disagreement = _disagreement(reader, p, text, slow)
                if disagreement:
                    bad(s, disagreement)
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


def _disagreement(reader: Pattern, p: Pattern, text: str, values: dict) -> str | None:
    """Where a shape pattern's values for a sample differ from reading the sample by its family's labels."""
    read = reader.parse(text)
    if read is None:
        return f"pattern '{reader.name}' (the reading by [labels]) does not parse the sample"
    if read["extra_fields"] is not None:
        return f"[labels] lacks label(s) of this sample: {read['extra_fields']}"
    differ = {k: (values[k], read.get(k)) for k in values if k in read and not _same(values[k], read[k])}
    if differ:
        return (f"pattern '{p.name}' and the reading by [labels] differ: "
                + ", ".join(f"{k} = {a!r} vs {b!r}" for k, (a, b) in differ.items()))
    return None


def compiled_values(p: Pattern, texts: list[str]) -> list[dict | None]:
    """What the compiled regex gives for each text, run by polars (the executor) and cast as the ingest casts: the
    same dict as `Pattern.parse` (fields, constants, derived columns), or None where it does not match."""
    import polars as pl

    if not texts:
        return []
    groups = pl.Series(texts, dtype=pl.Utf8).str.extract_groups("^(?P<_hit>)" + p.regex.removeprefix("^")).struct.unnest()
    typed = groups.select(pl.col("_hit"), *(cast_expr(pl.col(f.name), f.type) for f in p.fields))
    return [None if row.pop("_hit") is None else p.finish(row) for row in typed.iter_rows(named=True)]


def _in_bigint(value: object) -> object:
    """pyparsing's ints are Python ints; the executors' are BIGINT (out of range → NULL): compare the same way."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return None
    return value


def _check_claims_only(p: Pattern, by_scope: dict, prefix: Pattern | None, focused, problems: list[GrammarProblem]) -> None:
    """For a pattern outside the focus: is one of its samples claimed first by a focused pattern?"""
    earlier_focused = [q for q in by_scope[p.scope][:by_scope[p.scope].index(p)] if focused(q)]
    for s in p.samples if earlier_focused else ():
        q = _first_claim(earlier_focused, _message_of(prefix, p, s.line)[0])
        if q is not None:
            problems.append(GrammarProblem(*_where(q), s.line, f"pattern '{q.name}' claims a sample of '{p.name}' ({p.source}) "
                                                               "first; make it stricter or give its file a larger priority"))


def ordered_patterns(files: list[LoadedFile]) -> list[Pattern]:
    """Priority order: the file's priority, then file order, then pattern order inside the file."""
    return heads_of(files, None)


def heads_of(files: list[LoadedFile], kind: str | None) -> list[Pattern]:
    """The patterns of the prefix (or wrapper; None: of every other) grammars, in priority order."""
    ranked = sorted((f.priority, i, j, p) for i, f in enumerate(files) if f.kind == kind for j, p in enumerate(f.patterns))
    return [p for *_, p in ranked]


# ---------------------------------------------------------------------------------------------------------------
# loading


def bundled_grammar_files() -> list[Path]:
    return sorted(bundled_grammar_dir().glob("*.toml"))


def _expand(paths: Sequence[Path]) -> list[Path]:
    return [f for p in map(Path, paths) for f in (sorted(p.glob("*.toml")) if p.is_dir() else [p])]


def _assemble(paths: Sequence[Path], focus: set[Path]) -> tuple[GrammarSet | None, list[GrammarProblem], set[str]]:
    """The files read and validated together, looking only for problems that involve the `focus` files' patterns;
    the focus files as problems name them."""
    files = [read_grammar_file(p) for p in paths]
    focused = {f.path for f, p in zip(files, paths) if p.resolve() in focus}
    problems = [pr for f in files for pr in f.problems]  # a file that does not build is always a problem
    prefix = next((p for p in heads_of(files, "prefix") if p.name == PREFIX_NAME), None)
    if prefix is None:
        problems.append(GrammarProblem("grammars/prefix.toml", 1, None,
                                       "no prefix grammar (a file with kind = \"prefix\" and a pattern named 'prefix')"))
    problems += validate(files, prefix, focused)
    if prefix is None:
        return None, problems, focused
    others = tuple(p for p in heads_of(files, "prefix") if p is not prefix)
    grammar_set = GrammarSet(prefix=prefix, patterns=ordered_patterns(files), files=tuple(f.path for f in files),
                             prefixes=(prefix, *others), wrappers=tuple(heads_of(files, "wrapper")))
    return grammar_set, problems, focused


def load_grammars(extra_paths: Sequence[Path] = ()) -> GrammarSet:
    """Bundled grammars/ plus user grammar files (or directories of them), built and validated; GrammarError names
    file:line of the first problems. A user file's samples are checked every time it loads (the bundled files' by the
    tests and `speclogs grammars check`); the last few sets are kept, keyed by the files' paths, sizes and mtimes."""
    paths = tuple(bundled_grammar_files() + _expand(extra_paths))
    return _load(paths, tuple((st.st_size, st.st_mtime_ns) if (st := _stat(p)) else (-1, -1) for p in paths))


def _stat(path: Path):
    try:
        return path.stat()
    except OSError:
        return None


@functools.lru_cache(maxsize=4)
def _load(paths: tuple[Path, ...], stats: tuple) -> GrammarSet:
    bundled = set(bundled_grammar_files())
    grammar_set, problems, _ = _assemble(paths, focus={p.resolve() for p in paths if p not in bundled})
    if problems or grammar_set is None:
        shown = "\n".join(str(p) for p in problems[:_MAX_SHOWN])
        more = f"\n… and {len(problems) - _MAX_SHOWN} more" if len(problems) > _MAX_SHOWN else ""
        raise GrammarError(f"{len(problems)} grammar problem(s):\n{shown}{more}",
                           hint="run `speclogs grammars check FILE` for the full list")
    return grammar_set


def check_grammar_files(paths: Sequence[Path] = ()) -> list[GrammarProblem]:
    """`speclogs grammars check`: the problems of the given grammar files (or directories), checked together with the
    bundled set in one pass (conflicts between them are found too); every bundled file when none is given."""
    bundled = bundled_grammar_files()
    targets = _expand(paths) if paths else bundled
    known = {p.resolve() for p in bundled}
    _, problems, focused = _assemble(bundled + [p for p in targets if p.resolve() not in known], {p.resolve() for p in targets})
    return [p for p in problems if p.file in focused]
