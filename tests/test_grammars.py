"""Every sample of every bundled grammar file, and the validator on broken user grammar files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from speclogs.errors import GrammarError
from speclogs.grammar import bundled_grammar_files, check_grammar_files, load_grammars
from speclogs.grammar.loader import compiled_values

GRAMMARS = load_grammars()
ALL_PATTERNS = [GRAMMARS.prefix, *GRAMMARS.patterns]


def _rel(source: str) -> str:
    return Path(source.rsplit(":", 1)[0]).name


def _sample_cases():
    for p in ALL_PATTERNS:
        for s in p.samples:
            yield pytest.param(p, s, id=f"{_rel(p.source)}:{s.line_no}:{p.name}")


def _counter_cases():
    for p in ALL_PATTERNS:
        for c in p.counter_samples:
            yield pytest.param(p, c, id=f"{_rel(p.source)}:{c.line_no}:{p.name}")


def _message(p, line: str) -> tuple[str, dict]:
    if p is GRAMMARS.prefix or p.scope == "line":
        return line, {}
    head = GRAMMARS.prefix.parse(line)
    if head is None:
        return line, {}
    return head.pop("message"), head


@pytest.mark.parametrize(("pattern", "sample"), list(_sample_cases()))
def test_sample_parses_to_expected_values_and_wins(pattern, sample):
    text, head = _message(pattern, sample.line)
    values = pattern.parse(text)
    assert values is not None, f"{pattern.name} does not parse {sample.line!r}"
    values = {**head, **values}
    for key, want in sample.expect.items():
        assert values[key] == want, f"{key}: expected {want!r}, got {values[key]!r}"
    for key in sample.null:
        assert values[key] is None, f"{key} should be NULL"
    if pattern is not GRAMMARS.prefix:
        winner = GRAMMARS.classify(text, pattern.scope)
        assert winner is not None and winner[0] is pattern, f"claimed by {winner and winner[0].name}"


@pytest.mark.parametrize(("pattern", "counter"), list(_counter_cases()))
def test_counter_sample_is_not_matched(pattern, counter):
    text, _ = _message(pattern, counter.line)
    assert pattern.parse(text) is None
    assert compiled_values(pattern, [text]) == [None]
    if counter.claimed_by is not None:
        winner = GRAMMARS.classify(text, pattern.scope)
        assert winner is not None and winner[0].name == counter.claimed_by


def test_every_pattern_group_has_a_sample():
    with_samples = {p.group for p in GRAMMARS.patterns if p.samples}
    assert {p.group for p in GRAMMARS.patterns} == with_samples


def test_bundled_files_check_clean():
    for path in bundled_grammar_files()[:3]:
        assert check_grammar_files([path]) == [], path


def test_required_families_are_present():
    families = {p.family for p in GRAMMARS.patterns}
    assert {"decode_batch", "prefill_batch", "lifecycle", "retract", "uvicorn", "traceback", "nccl", "nccl_extra",
            "spec_profile", "bench_summary", "foreign", "warning", "message"} <= families
    kinds = {p.constants.get("kind") for p in GRAMMARS.patterns}
    assert {"server_args", "init_dist_begin", "init_dist_end", "load_weight_begin", "load_weight_end", "kv_cache_allocated",
            "memory_pool_end", "cuda_graph_begin", "cuda_graph_end", "max_total_num_tokens", "ready", "sigterm",
            "graceful_exit", "watchdog_timeout", "health_check_failed", "scheduler_dead", "sigquit", "kill_process_tree",
            "warning", "message", "retract", "uvicorn_info", "profiler"} <= kinds


def test_catch_all_is_last_and_claims_any_prefixed_message():
    message_patterns = GRAMMARS.for_scope("message")
    assert message_patterns[-1].name == "message"
    pattern, values = GRAMMARS.classify("Some brand-new line SGLang 0.6 prints", "message")
    assert pattern.name == "message" and values["kind"] == "message"


# ---------------------------------------------------------------------------------------------------------------
# user grammar files

GOOD = '''
family = "my_family"
table = "server_events"
priority = 25

[[field]]
name = "elapsed_s"
type = "float"
unit = "s"

[[pattern]]
name = "my_warmup"
gate = "Warmup done in "
constants = { kind = "my_warmup" }
template = 'Warmup done in {elapsed_s} s'

[[pattern.sample]]
line = "[2026-11-30 10:20:13] Warmup done in 1.25 s"
expect = { elapsed_s = 1.25 }
'''


def _write(tmp_path: Path, text: str, name: str = "user.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_good_user_file_checks_clean_and_loads(tmp_path):
    path = _write(tmp_path, GOOD)
    assert check_grammar_files([path]) == []
    grammars = load_grammars([path])
    pattern, values = grammars.classify("Warmup done in 3.5 s", "message")
    assert pattern.name == "my_warmup" and values == {"elapsed_s": 3.5, "kind": "my_warmup"}


def test_bad_toml_is_reported_with_its_line(tmp_path):
    path = _write(tmp_path, 'family = "x"\ntable = "y"\n[[pattern]\nname = "p"\n')
    problems = check_grammar_files([path])
    assert len(problems) == 1
    assert problems[0].line == 3 and "not valid TOML" in problems[0].message
    assert str(path) in str(problems[0])


def test_pattern_without_sample_is_reported(tmp_path):
    path = _write(tmp_path, GOOD.split("[[pattern.sample]]")[0])
    problems = check_grammar_files([path])
    assert any("has no [[pattern.sample]]" in p.message and p.line == 11 for p in problems), problems


def test_failing_sample_names_file_line_and_sample(tmp_path):
    broken = GOOD.replace("Warmup done in 1.25 s", "Warmup done after 1.25 s")
    path = _write(tmp_path, broken)
    problems = check_grammar_files([path])
    assert problems, "a sample that does not match must be reported"
    first = problems[0]
    assert first.line == 18 and first.sample == "[2026-11-30 10:20:13] Warmup done after 1.25 s"
    rendered = str(first)
    assert f"{path}:18" in rendered and "Warmup done after" in rendered


def test_wrong_expected_value_is_reported(tmp_path):
    path = _write(tmp_path, GOOD.replace("expect = { elapsed_s = 1.25 }", "expect = { elapsed_s = 2.5 }"))
    problems = check_grammar_files([path])
    assert [p.message for p in problems] == ["expected elapsed_s = 2.5, got 1.25"]


def test_sample_claimed_by_earlier_pattern_is_reported(tmp_path):
    # priority 5 puts this before the bundled decode grammar: the real decode_batch samples are then claimed by it.
    shadow = '''
    family = "shadow"
    table = "server_events"
    priority = 5
    text = "message"

    [[pattern]]
    name = "greedy_decode"
    gate = "Decode batch"
    template = 'Decode batch{_:rest}'

    [[pattern.sample]]
    line = "Decode batch, #running-req: 1"
    '''
    path = _write(tmp_path, shadow)
    with pytest.raises(GrammarError) as info:
        load_grammars([path])
    assert "pattern 'greedy_decode' claims a sample of 'decode_batch" in str(info.value)


def test_unknown_field_and_unloweable_template_are_reported(tmp_path):
    text = GOOD.replace("{elapsed_s} s'", "{elapsed_ms} s'")
    problems = check_grammar_files([_write(tmp_path, text)])
    assert any("names no declared field" in p.message for p in problems)
    dup = GOOD.replace("'Warmup done in {elapsed_s} s'", "'Warmup done in {|{elapsed_s} s|{elapsed_s} sec}'")
    problems = check_grammar_files([_write(tmp_path, dup, "dup.toml")])
    assert any("captured twice" in p.message for p in problems)


def test_gate_missing_from_sample_is_reported(tmp_path):
    problems = check_grammar_files([_write(tmp_path, GOOD.replace('gate = "Warmup done in "', 'gate = "Warmup finished"'))])
    assert any("gate 'Warmup finished'" in p.message for p in problems)


def test_load_grammars_raises_with_locations(tmp_path):
    path = _write(tmp_path, GOOD.replace("Warmup done in 1.25 s", "nothing like it"))
    with pytest.raises(GrammarError) as info:
        load_grammars([path])
    assert f"{path}:18" in str(info.value)
    assert info.value.hint


# ---------------------------------------------------------------------------------------------------------------
# CLI: speclogs grammars check / list (real subprocesses)

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"


def _speclogs(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "speclogs", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_cli_grammars_check_reports_file_line_and_exits_1(tmp_path):
    bad = _write(tmp_path, GOOD.replace("Warmup done in 1.25 s", "Warmup done after 1.25 s"))
    result = _speclogs("grammars", "check", str(bad), cwd=tmp_path)
    assert result.returncode == 1
    assert f"{bad}:18: sample does not fully match pattern 'my_warmup'" in result.stderr
    assert "Error: 2 grammar problem(s)" in result.stderr and "Traceback" not in result.stderr
    good = _write(tmp_path, GOOD, "good.toml")
    ok = _speclogs("grammars", "check", str(good), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


def test_cli_grammars_list_shows_patterns_in_priority_order(tmp_path):
    result = _speclogs("grammars", "list", "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    import json

    rows = json.loads(result.stdout)
    names = [r["pattern"] for r in rows]
    assert names.index("docker_compose") < names.index("prefix") < names.index("decode_batch") < names.index("message")
    assert {"family", "pattern", "table", "scope", "versions", "gate"} == set(rows[0])


def test_rest_token_must_end_the_template(tmp_path):
    text = GOOD.replace("'Warmup done in {elapsed_s} s'", "'Warmup done in {_:rest} s'")
    problems = check_grammar_files([_write(tmp_path, text)])
    assert any("takes the rest of the line" in p.message for p in problems)


@pytest.mark.parametrize(
    "text",
    [
        'family = "x"\ntable = "y"\nfield = 3\n',
        'family = "x"\ntable = "y"\npattern = [1, 2]\n',
        'family = "x"\ntable = "y"\n[[pattern]]\nname = "p"\ntemplate = "a {b"\n[[pattern.sample]]\nline = "a"\n',
        'family = "x"\ntable = "y"\n[shapes]\ns = 5\n[[pattern]]\nname = "p"\ntemplate = "a"\nconstants = 4\n',
        'family = "x"\ntable = "y"\n[[pattern]]\nname = "p"\ntemplate = "{_:nope}"\nexpand = 1\n',
        "\x00\x01 not toml at all",
    ],
    ids=["field-not-table", "pattern-not-table", "unclosed-brace", "bad-shape-and-constants", "bad-expand", "binary"],
)
def test_malformed_user_files_give_problems_not_crashes(tmp_path, text):
    path = tmp_path / "weird.toml"
    path.write_text(text, encoding="utf-8")
    problems = check_grammar_files([path])
    assert problems and all(p.file == str(path) and p.line >= 1 for p in problems)
