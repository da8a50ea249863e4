"""Read grammar files (TOML), build their patterns, validate them against their own samples, and load the set."""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from speclogs.errors import GrammarError
from speclogs.grammar.fields import FIELDS_SLOT, read_labels
from speclogs.grammar.model import DERIVES, SCOPES, Field, GrammarProblem, GrammarSet, Pattern, Sample, bundled_grammar_dir, cast_expr
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
_MAX_SHOWN = 10


def _one_of(*values: object) -> tuple[str, Callable]:
    return "one of " + ", ".join(map(repr, values)), lambda v: v in values


def _a(what: str, *types: type) -> tuple[str, Callable]:
    return what, lambda v: isinstance(v, types)


_TEXT = ("a non-empty string", lambda v: isinstance(v, str) and v != "")
_NAME = ("an identifier", lambda v: isinstance(v, str) and v.isidentifier())
_STR_OR_NONE = _a("a string", str, type(None))

# What each key of a grammar file, a [[field]], a [[pattern]] and a sample may hold: key → (default, what it must be,
# test). A [[pattern]] takes its file's value of a key it leaves out.
_FILE_KEYS = {
    "family": (None, *_TEXT), "table": (None, *_TEXT), "priority": (100, "an integer", lambda v: type(v) is int),
    "scope": ("message", *_one_of(*SCOPES)), "kind": (None, *_one_of(None, "prefix", "wrapper")),
    "field": ([], *_a("an array of tables [[field]]", list)),
    "pattern": (None, "an array of one or more tables [[pattern]]", lambda v: isinstance(v, list) and v != []),
    "shapes": ({}, *_a("a table [shapes]", dict)), "template_prefix": ("", *_a("a string", str)),
}
_FIELD_KEYS = {"name": (None, *_NAME), "type": (None, *_one_of("int", "float", "bool", "str", "pct")),
               "role": ("measure", *_one_of("key", "measure", "label")),
               "unit": (None, *_STR_OR_NONE), "shape": (None, *_STR_OR_NONE), "description": ("", *_a("a string", str))}
_PATTERN_KEYS = {
    "name": (None, *_NAME), "table": (None, *_TEXT), "scope": ("message", *_one_of(*SCOPES)),
    "template": (None, "a string or a list of strings", lambda v: _TEXT[1](v) or (
        isinstance(v, list) and v != [] and all(isinstance(t, str) for t in v))),
    "derive": (None, *_one_of(None, *DERIVES)), "gate": ("", *_a("a string", str)),
    "constants": ({}, *_a("a table { column = value }", dict)),
    "expand": (None, 'a table { var = "name", values = { "text" = value, … } }', lambda v: v is None or (
        isinstance(v, dict) and isinstance(v.get("var"), str) and isinstance(v.get("values"), dict) and v["values"] != {})),
    "text": (None, "the name of the column its rows keep the matched text in", lambda v: v is None or _NAME[1](v)),
    "description": ("", *_a("a string", str)), "versions": ("", *_a("a string", str)),
    "sample": ([], *_a("an array of tables [[pattern.sample]]", list)),
    "counter_sample": ([], *_a("an array of tables [[pattern.counter_sample]]", list)),
}
_SAMPLE_KEYS = {"line": (None, *_a("a real log line (a string)", str)), "expect": ({}, *_a("a table { column = value }", dict)),
                "null": ([], *_a("a list of column names", list)), "claimed_by": (None, *_STR_OR_NONE)}


def _read_keys(spec: object, keys: dict, where: str, inherited: dict | None = None) -> tuple[dict, list[str]]:
    """The values of `keys` in a TOML table, defaults filled in, and a message for each that breaks its rule."""
    if not isinstance(spec, dict):
        return {}, [f"{where}must be a table, got {spec!r}"]
    values = {key: spec.get(key, (inherited or {}).get(key, default)) for key, (default, _, _) in keys.items()}
    return values, [f"{where}{key} is missing ({what})" if values[key] is None else f"{where}{key} must be {what}, got {values[key]!r}"
                    for key, (_, what, ok) in keys.items() if not ok(values[key])]


def read_grammar_file(path: Path) -> tuple[list[Pattern], list[GrammarProblem]]:
    """One TOML grammar file's patterns, and its problems (bad TOML, bad fields, bad templates) at file:line."""
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
        doc = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:  # a missing file, or one that is not UTF-8 text
        line, messages = 0, [f"cannot read grammar file: {exc}"]
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))
        line, messages = int(found.group(1)) if found else 1, [f"not valid TOML: {exc}"]
    else:
        top, messages = _read_keys(doc, _FILE_KEYS, "")
        line = 1
        if not messages:
            return _build_file(shown, text.splitlines(), doc, top)
    return [], [GrammarProblem(shown, line, None, message) for message in messages]


def _build_file(shown: str, lines: list[str], doc: dict, top: dict) -> tuple[list[Pattern], list[GrammarProblem]]:
    patterns: list[Pattern] = []
    problems: list[GrammarProblem] = []

    def problem(line: int, *messages: str) -> None:
        problems.extend(GrammarProblem(shown, line, None, message) for message in messages)

    headers: dict[str, list[int]] = {}  # table header ([labels], [[pattern]], …) → the file lines it stands on
    for number, text in enumerate(lines, 1):
        if found := re.match(r"\s*\[\[?\s*([\w.]+)\s*\]\]?\s*(#.*)?$", text):
            headers.setdefault(found.group(1), []).append(number)

    def header(name: str, index: int) -> int:
        return headers[name][index] if index < len(headers.get(name, ())) else 1

    fields: dict[str, Field] = {}
    for i, spec in enumerate(top["field"]):
        values, wrong = _read_keys(spec, _FIELD_KEYS, f"field '{spec.get('name', i + 1) if isinstance(spec, dict) else i + 1}': ")
        if not wrong and values["name"] in fields:
            wrong = [f"field '{values['name']}' is declared twice"]
        problem(header("field", i), *wrong)
        if not wrong:
            fields[values["name"]] = Field(**values)
    field_list = None
    if "labels" in doc:
        field_list, label_problems = read_labels(doc["labels"], {name: f.type for name, f in fields.items()})
        problem(header("labels", 0), *label_problems)
        fields[FIELDS_SLOT] = Field(FIELDS_SLOT, "str", role="label", shape="rest", description="the field list, read by [labels]")
    shape_regexes: dict[str, str] = {}
    for shape_name, spec in top["shapes"].items():
        try:
            shape_regexes[shape_name] = file_shape_regex(spec, f"shape '{shape_name}'")
        except GrammarError as exc:
            problem(1, str(exc))
    shape_specs = {name: top["shapes"][name] for name in shape_regexes}

    def build(pline: int, values: dict, name: str, template: str, gate: str, constants: dict) -> Pattern | None:
        """One pattern (an expanded variant: its own name, template, gate and constants); None after saying what is wrong."""
        where = f"{shown}:{pline} pattern '{name}'"
        shape_of = functools.partial(slot_regex, fields=fields, file_shapes=shape_regexes, where=where)
        try:
            nodes = parse_template(template, where)
            check_rest_is_last(nodes, where, fields)
            names = slot_names(nodes)
            regex = template_regex(nodes, shape_of)
        except GrammarError as exc:
            problem(pline, str(exc).removeprefix(f"{shown}:{pline} "))
            return None
        if twice := sorted({n for n in names if names.count(n) > 1}):
            message = (f"field '{twice[0]}' is captured twice (the regex engines forbid duplicate group names): split the "
                       "alternatives into two [[pattern]] entries, or capture the field once outside the alternatives")
        elif clash := sorted(set(constants) & set(names)):
            message = f"{', '.join(clash)} is both a constant and a captured field"
        elif values["text"] in names:
            message = f"text = {values['text']!r} must name a column the pattern does not capture"
        elif (dropped := discarded_slots(nodes, shape_specs)) and values["text"] is None:
            message = (f"{{_:{dropped[0]}}} drops what it matches, but the rows keep no text: capture it as a field, "
                       "or set text = \"message\" (the column its rows keep the matched text in)")
        else:
            return Pattern(
                name=name, family=top["family"], table=values["table"], scope=values["scope"], group=values["name"], gate=gate,
                regex=regex, constants=constants, source=f"{shown}:{pline}", template=template,
                versions=values["versions"], priority=top["priority"], kind=top["kind"], text_column=values["text"],
                derive=DERIVES.get(values["derive"]), fields=tuple(fields[n] for n in dict.fromkeys(names)),
                field_list=field_list if FIELDS_SLOT in names else None,
                build=functools.lru_cache(maxsize=1)(functools.partial(template_element, nodes, name, shape_of, fields)))
        problem(pline, f"pattern '{name}': {message}")
        return None

    samples_at, counters_at = iter(headers.get("pattern.sample", ())), iter(headers.get("pattern.counter_sample", ()))
    inherited = {key: doc[key] for key in ("table", "scope", "text", "description", "versions") if key in doc}
    for i, spec in enumerate(top["pattern"]):
        pline = header("pattern", i)
        # samples first, so the sample line numbers stay in step even when this pattern is rejected below
        raw = spec if isinstance(spec, dict) else {}
        samples = _read_samples(raw.get("sample", []), samples_at, lines, pline, problem)
        counters = _read_samples(raw.get("counter_sample", []), counters_at, lines, pline, problem)
        values, wrong = _read_keys(spec, _PATTERN_KEYS, f"pattern '{raw.get('name', i + 1)}': ", inherited)
        problem(pline, *wrong)
        if wrong:
            continue
        name, gate, constants, expand = values["name"], values["gate"], dict(values["constants"]), values["expand"]
        template = top["template_prefix"] + "".join(values["template"])
        variants = [(name, template, gate, constants)]
        if expand is not None:
            var = "{=" + expand["var"] + "}"
            if var not in template:
                problem(pline, f"pattern '{name}': expand var '{expand['var']}' is not used as {var} in the template")
                continue
            variants = [(f"{name}_{re.sub(r'[^0-9a-z]+', '_', text.lower()).strip('_')}",
                         template.replace(var, re.sub(r"([\\{}|])", r"\\\1", text)), gate.replace(var, text),
                         {**constants, expand["var"]: value} if expand.get("constant", True) else constants)
                        for text, value in expand["values"].items()]
        built = [p for variant in variants if (p := build(pline, values, *variant))]
        # each sample goes to the variant that matches it (the first when none does, so the failure is reported); the
        # message of a sample written as '[ts tags] message' is tried too
        own: list[list[Sample]] = [[] for _ in built]
        for smp in samples if built else ():
            message = smp.line.split("] ", 1)[-1] if smp.line.startswith("[") else smp.line
            own[next((k for k, b in enumerate(built) if re.match(b.regex, smp.line) or re.match(b.regex, message)), 0)].append(smp)
        patterns += [replace(b, samples=tuple(own[k]), counter_samples=tuple(counters)) for k, b in enumerate(built)]
    return patterns, problems


def _read_samples(raw: object, headers: Iterator[int], lines: list[str], pline: int, problem) -> list[Sample]:
    """A pattern's [[pattern.sample]] (or [[pattern.counter_sample]]) entries, each at the line of its `line =`."""
    samples = []
    for spec in raw if isinstance(raw, list) else [raw]:
        at = next(headers, pline)
        values, wrong = _read_keys(spec, _SAMPLE_KEYS, "a sample: ")
        problem(at, *wrong)
        if not wrong:
            line_no = next((n for n in range(at, len(lines) + 1) if re.match(r"\s*line\s*=", lines[n - 1])), at)
            samples.append(Sample(values["line"], line_no, dict(values["expect"]), tuple(values["null"]), values["claimed_by"]))
    return samples


# ---------------------------------------------------------------------------------------------------------------
# validation


def _message_of(prefix: Pattern, pattern: Pattern, line: str) -> tuple[str, dict]:
    """For a message-scope sample written as a full log line, split the prefix off first."""
    head = prefix.parse(line) if pattern.scope == "message" else None
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


def validate(grammars: GrammarSet, focus: set[str] | None = None) -> list[GrammarProblem]:
    """Check every sample and counter-sample of every pattern against the whole ordered set. With `focus` (file
    paths), only problems that involve a pattern of those files: their samples, and others' they would claim first."""
    problems: list[GrammarProblem] = []
    heads = [*grammars.prefixes, *grammars.wrappers]
    first: dict[str, str] = {}
    for p in grammars.patterns:
        if (at := first.setdefault(p.name, p.source)) != p.source:
            problems.append(GrammarProblem(*_where(p), None, f"pattern name '{p.name}' is already used at {at}"))
    for p in heads:
        at = p.regex.find("(?P<message>")
        if at < 0 or "(?P<" in p.regex[at + 1:]:
            problems.append(GrammarProblem(*_where(p), None, f"pattern '{p.name}': its template must end with {{message}}"))
    # the field-list reading of a family (its definition by labels), per scope: every shape's sample must read the same
    readers = {(q.family, q.scope): q for q in reversed(grammars.patterns) if q.field_list is not None}
    with_samples = {p.group for p in grammars.patterns if p.samples}

    def focused(p: Pattern) -> bool:
        return focus is None or _where(p)[0] in focus

    claimers = dict.fromkeys(SCOPES, False)  # has a focused pattern come before, in this scope?
    for p in [*heads, *grammars.patterns]:
        is_head = any(p is h for h in heads)
        if focused(p):
            claimers[p.scope] |= not is_head
            if not p.samples and p.group not in with_samples:
                problems.append(GrammarProblem(*_where(p), None, f"pattern '{p.name}' has no [[pattern.sample]]; "
                                                                 "every pattern needs at least one real line"))
            found = _sample_problems(grammars, p, is_head, readers.get((p.family, p.scope)))
            problems += [GrammarProblem(_where(p)[0], s.line_no, s.line, message) for s, message in found]
            continue
        # a pattern outside the focus: is one of its samples claimed first by a focused pattern?
        for s in p.samples if claimers[p.scope] and not is_head else ():
            claim = grammars.classify(_message_of(grammars.prefix, p, s.line)[0], p.scope, before=p)
            if claim is not None and focused(q := claim[0]):
                problems.append(GrammarProblem(*_where(q), s.line, f"pattern '{q.name}' claims a sample of '{p.name}' ({p.source}) "
                                                                   "first; make it stricter or give its file a larger priority"))
    return problems


def _sample_problems(grammars: GrammarSet, p: Pattern, is_head: bool, reader: Pattern | None) -> Iterator[tuple[Sample, str]]:
    texts = [(s.line, {}) if is_head else _message_of(grammars.prefix, p, s.line) for s in p.samples]
    for s, (text, head), fast in zip(p.samples, texts, compiled_values(p, [text for text, _ in texts])):
        if p.gate and p.gate not in text:
            yield s, f"gate {p.gate!r} of pattern '{p.name}' does not occur in the sample"
        slow = p.parse(text)
        if slow is None:
            yield s, f"sample does not fully match pattern '{p.name}'"
            continue
        if fast != {key: _in_bigint(value) for key, value in slow.items()}:
            yield s, f"pattern '{p.name}': the compiled regex gives {fast} but pyparsing gives {slow}"
        if reader is not None and reader is not p and (disagreement := _disagreement(reader, p, text, slow)):
            yield s, disagreement
        values = {**head, **slow}
        for key, want in (*s.expect.items(), *((key, None) for key in s.null)):  # TOML has no null: None means NULL
            if key not in values:
                yield s, f"the sample names '{key}', which pattern '{p.name}' does not fill"
            elif not _same(want, values[key]):
                yield s, f"expected {key} = {'NULL' if want is None else repr(want)}, got {values[key]!r}"
        if not is_head and (claim := grammars.classify(text, p.scope, before=p)) is not None:
            yield s, (f"sample of '{p.name}' is claimed first by '{claim[0].name}' ({claim[0].source}); "
                      "reorder the patterns or make the earlier one stricter")
    for c in p.counter_samples:
        text = c.line if is_head else _message_of(grammars.prefix, p, c.line)[0]
        if p.parse(text) is not None:
            yield c, f"counter-sample matches pattern '{p.name}'"
        elif c.claimed_by is not None and not is_head:
            winner = grammars.classify(text, p.scope)
            if winner is None or winner[0].name != c.claimed_by:
                yield c, (f"counter-sample should be claimed by '{c.claimed_by}', "
                          f"but {('pattern ' + repr(winner[0].name)) if winner else 'no pattern'} takes it")


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

    groups = pl.Series(texts, dtype=pl.Utf8).str.extract_groups("^(?P<_hit>)" + p.regex.removeprefix("^")).struct.unnest()
    typed = groups.select(pl.col("_hit"), *(cast_expr(pl.col(f.name), f.type) for f in p.fields))
    return [None if row.pop("_hit") is None else p.finish(row) for row in typed.iter_rows(named=True)]


def _in_bigint(value: object) -> object:
    """pyparsing's ints are Python ints; the executors' are BIGINT (out of range → NULL): compare the same way."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return None
    return value


# ---------------------------------------------------------------------------------------------------------------
# loading


def bundled_grammar_files() -> list[Path]:
    return sorted(bundled_grammar_dir().glob("*.toml"))


def _expand(paths: Sequence[Path]) -> list[Path]:
    return [f for p in map(Path, paths) for f in (sorted(p.glob("*.toml")) if p.is_dir() else [p])]


def _assemble(paths: Sequence[Path], focused: set[str]) -> tuple[GrammarSet | None, list[GrammarProblem]]:
    """The files read and validated together, looking only for problems that involve the `focused` files' patterns."""
    read = [read_grammar_file(p) for p in paths]
    problems = [problem for _, found in read for problem in found]  # a file that does not build is always a problem
    ranked = sorted((p for found, _ in read for p in found), key=lambda p: p.priority)  # stable: files, then patterns, in order
    prefixes = [p for p in ranked if p.kind == "prefix"]
    prefix = next((p for p in prefixes if p.name == PREFIX_NAME), None)
    if prefix is None:
        return None, [*problems, GrammarProblem("grammars/prefix.toml", 1, None, "no prefix grammar (a file with kind = "
                                                "\"prefix\" and a pattern named 'prefix')")]
    grammar_set = GrammarSet(prefix=prefix, patterns=[p for p in ranked if p.kind is None],
                             prefixes=(prefix, *(p for p in prefixes if p is not prefix)),
                             wrappers=tuple(p for p in ranked if p.kind == "wrapper"))
    return grammar_set, problems + validate(grammar_set, focused)


def load_grammars(extra_paths: Sequence[Path] = ()) -> GrammarSet:
    """Bundled grammars/ plus user grammar files (or directories of them), built and validated; GrammarError names
    file:line of the first problems. A user file's samples are checked every time it loads (the bundled files' by the
    tests and `speclogs grammars check`); the last few sets are kept, keyed by the files' paths, sizes and mtimes."""
    paths = tuple(bundled_grammar_files() + _expand(extra_paths))
    return _load(paths, tuple(_stamp(p) for p in paths))


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:  # read_grammar_file says why
        return None
    return stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=4)
def _load(paths: tuple[Path, ...], stamps: tuple) -> GrammarSet:
    bundled = set(bundled_grammar_files())
    grammar_set, problems = _assemble(paths, {str(p) for p in paths if p not in bundled})
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
    known = {p.resolve() for p in bundled}
    targets = {p.resolve() for p in (_expand(paths) if paths else bundled)}
    files = bundled + [p for p in _expand(paths) if p.resolve() not in known]
    focused = {str(p) for p in files if p.resolve() in targets}
    return [p for p in _assemble(files, focused)[1] if p.file in focused]
