"""`speclogs sql`, `speclogs tables`, `speclogs runs` as a user runs them: every statement's result, streamed out as
CSV / JSON / Parquet in constant memory, valid JSON, a capped table, SQL from stdin, only the contract's tables."""

from __future__ import annotations

import json
import math
import re
import resource
import subprocess
import sys
import time

import pytest

from conftest import MATRIX, ROOT, cli_env, run_cli
from speclogs.schema import columns as declared_columns
from speclogs.store import ingest_paths
from test_store import write_launch_dir


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("sql") / "speclogs.duckdb"
    out = tmp_path_factory.mktemp("launches")
    write_launch_dir(out, "eagle3_nccl", 1, "a" * 32)
    ingest_paths([MATRIX / "eagle3_nccl.log", MATRIX / "baseline_default.log", out], path)
    return path


def test_every_statement_prints_its_result(db):
    result = run_cli("sql", "SELECT 1 AS one; SET threads = 1; SELECT 2 AS two, 'x' AS s", "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert result.stdout.index("one") < result.stdout.index("two")
    assert result.stdout.count("(1 row)") == 2


def test_json_is_valid_json_with_null_for_nan_and_json_columns_as_json(db):
    result = run_cli("sql", """SELECT 'nan'::DOUBLE AS nan, 'inf'::DOUBLE AS inf, [1.5, '-inf'::DOUBLE] AS xs,
                                      '{"k": [1, 2]}'::JSON AS doc, {'y': 'nan'::DOUBLE} AS st, 'NaN' AS text,
                                      12::HUGEINT AS big, timestamp '2026-11-30 10:19:01' AS ts;
                               SELECT run_name, env FROM runs WHERE env IS NOT NULL""", "--db", str(db), "--format", "json")
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(part) for part in result.stdout.strip().split("\n\n"))   # strict: no NaN accepted below
    assert first == [{"nan": None, "inf": None, "xs": [1.5, None], "doc": {"k": [1, 2]}, "st": {"y": None}, "text": "NaN",
                      "big": 12, "ts": "2026-11-30 10:19:01"}]
    assert second == [{"run_name": "eagle3_nccl_1", "env": {"NCCL_PROTO": "LL", "HF_TOKEN": "<redacted>"}}]
    json.loads(result.stdout.strip().split("\n\n")[0], parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))


def test_csv_quotes_only_where_a_value_needs_it(db):
    result = run_cli("sql", "SELECT 'plain' AS a, 'x,y' AS b, 'say \"hi\"' AS c, NULL AS d, [1, 2] AS e, true AS f, "
                     "1.5::DOUBLE AS g UNION ALL SELECT 'p2', 'q', 'r', 4, [3], false, 'nan'::DOUBLE", "--db", str(db),
                     "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ['a,b,c,d,e,f,g', 'plain,"x,y","say ""hi""",,"[1, 2]",true,1.5', 'p2,q,r,4,[3],false,nan']


def test_the_table_is_capped_with_how_many_rows_are_left(db):
    result = run_cli("sql", "SELECT line_no FROM decode_batches ORDER BY line_no", "--db", str(db), "--limit", "5")
    total = run_cli("sql", "SELECT count(*) FROM decode_batches", "--db", str(db), "--format", "csv").stdout.split()[1]
    assert result.returncode == 0, result.stderr
    assert f"… {int(total) - 5:,} more rows ({int(total):,} in all" in result.stdout
    assert len([line for line in result.stdout.splitlines() if line.strip().isdigit()]) == 5
    everything = run_cli("sql", "SELECT line_no FROM decode_batches", "--db", str(db), "--limit", "0")
    assert f"({int(total):,} rows)" in everything.stdout and "more rows" not in everything.stdout


def test_a_dash_reads_the_sql_from_stdin(db):
    result = run_cli("sql", "-", "--db", str(db), "--format", "csv", stdin=b"SELECT 40 + 2 AS answer;\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "answer\n42\n"


def test_show_tables_and_speclogs_tables_list_the_contract_only(db):
    """What SHOW TABLES lists is what docs/sql.md documents: no internal bookkeeping table."""
    documented = set(re.findall(r"^### `([a-z_]+)`", (ROOT / "docs" / "sql.md").read_text(), flags=re.MULTILINE))
    shown = run_cli("sql", "SHOW TABLES", "--db", str(db), "--format", "csv").stdout.split()[1:]
    assert set(shown) == documented
    assert {name for name in declared_columns() if name.startswith("_")} - set(shown)    # they exist, but are not shown
    listed = run_cli("tables", "--db", str(db), "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert set(rows) == set(shown)
    assert rows["decode_batches"]["kind"] == "table" and rows["line_accounting"]["kind"] == "view"
    assert rows["runs"]["rows"] == 3 and rows["decode_batches"]["columns"] > 20


def test_runs_lists_names_folders_versions_and_outcomes(db):
    result = run_cli("runs", "--db", str(db), "--format", "json")
    assert result.returncode == 0, result.stderr
    runs = {row["run_name"]: row for row in json.loads(result.stdout)}
    assert set(runs) == {"baseline_default", "eagle3_nccl", "eagle3_nccl_1"}
    launch = runs["eagle3_nccl_1"]
    assert (launch["cell"], launch["launch"], launch["sglang_version"], launch["torch_version"], launch["outcome"],
            launch["files"]) == ("eagle3_nccl", 1, "0.5.14", "2.11.0+cu130", "ok", 3)
    assert launch["folder"].endswith("eagle3_nccl/1")
    assert runs["eagle3_nccl"]["folder"] == str(MATRIX) and runs["eagle3_nccl"]["outcome"] is None
    assert runs["eagle3_nccl"]["nccl_version"] == "2.28.9+cuda13.0"
    table = run_cli("runs", "--db", str(db))
    assert "eagle3_nccl_1" in table.stdout and "(3 rows)" in table.stdout


def test_parquet_is_written_to_a_file_and_never_over_one_without_force(db, tmp_path):
    import polars as pl

    out = tmp_path / "decode.parquet"
    result = run_cli("sql", "SELECT line_no, gen_throughput_tok_s FROM decode_batches", "--db", str(db),
                     "--format", "parquet", "--output", str(out))
    assert result.returncode == 0, result.stderr
    count = run_cli("sql", "SELECT count(*) FROM decode_batches", "--db", str(db), "--format", "csv").stdout.split()[1]
    assert pl.read_parquet(out).height == int(count) and pl.read_parquet(out).columns == ["line_no", "gen_throughput_tok_s"]
    again = run_cli("sql", "SELECT 1", "--db", str(db), "--format", "parquet", "--output", str(out))
    assert again.returncode == 2 and "--force" in again.stderr
    assert run_cli("sql", "SELECT 1 AS x", "--db", str(db), "--format", "parquet", "--output", str(out), "--force").returncode == 0
    assert pl.read_parquet(out).to_dicts() == [{"x": 1}]
    assert run_cli("sql", "SELECT 1", "--db", str(db), "--format", "parquet").returncode == 2
    assert run_cli("sql", "SELECT 1; SELECT 2", "--db", str(db), "--format", "parquet", "-o", str(tmp_path / "two.parquet")
                   ).returncode == 2


def test_sql_errors_are_one_line_and_exit_1(db):
    result = run_cli("sql", "SELECT * FROM no_such_table", "--db", str(db))
    assert result.returncode == 1 and "Error: SQL error" in result.stderr and "Traceback" not in result.stderr
    assert run_cli("sql", "DELETE FROM runs", "--db", str(db)).returncode == 1   # read-only


def _peak_rss_mb(*args: str) -> tuple[float, float, bytes]:
    """Peak RSS (MB) and wall time of `speclogs ARGS` in its own process, stdout counted and dropped."""
    probe = ("import resource, subprocess, sys, time\n"
             "start = time.perf_counter()\n"
             "p = subprocess.Popen([sys.executable, '-m', 'speclogs', *sys.argv[1:]], stdout=subprocess.PIPE)\n"
             "size = 0\n"
             "tail = b''\n"
             "for chunk in iter(lambda: p.stdout.read(1 << 20), b''):\n"
             "    size += len(chunk); tail = (tail + chunk)[-200:]\n"
             "p.wait()\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, time.perf_counter() - start, size)\n"
             "sys.stderr.buffer.write(tail)\n")
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, env=cli_env(), timeout=300, check=True)
    rss, wall, size = done.stdout.split()
    assert int(size) > 0
    return float(rss), float(wall), done.stderr


@pytest.mark.parametrize("output_format", ["csv", "json"])
def test_two_million_rows_stream_out_in_constant_memory(db, output_format):
    sql = ("SELECT i, 'some text ' || i AS s, i * 0.5 AS x, timestamp '2026-01-01' + to_microseconds(i) AS ts "
           "FROM range({n}) t(i)")
    small_rss, _, _ = _peak_rss_mb("sql", sql.format(n=200_000), "--db", str(db), "--format", output_format)
    large_rss, wall, tail = _peak_rss_mb("sql", sql.format(n=2_000_000), "--db", str(db), "--format", output_format)
    print(f"{output_format}: 200k rows {small_rss:.0f} MB, 2M rows {large_rss:.0f} MB peak RSS, 2M rows in {wall:.2f} s")
    assert large_rss < small_rss + 64, "peak memory grows with the number of rows"
    assert large_rss < 400
    assert b"1999999" in tail


def test_piping_into_head_stops_the_query(db):
    started = time.perf_counter()
    pipe = subprocess.Popen([sys.executable, "-m", "speclogs", "sql", "SELECT * FROM range(1000000000)", "--db", str(db),
                             "--format", "csv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    assert [pipe.stdout.readline() for _ in range(3)] == [b"range\n", b"0\n", b"1\n"]
    pipe.stdout.close()
    assert pipe.wait(timeout=60) in (0, 1) and b"Traceback" not in pipe.stderr.read()
    assert time.perf_counter() - started < 30


# What any `speclogs sql` must load and do: typer (its option parsing imports pydantic), DuckDB, rich; open the file.
_FLOOR = ("import sys, typer, typer.main, duckdb, rich.console, rich.table\n"
          "duckdb.connect(sys.argv[1], read_only=True).sql('SELECT 1').fetchall()\n")


def test_select_1_is_quick_and_imports_nothing_heavy(db):
    """`speclogs sql "SELECT 1"` loads the CLI, DuckDB and rich — not polars, numpy, pyarrow or the ingest — and costs
    little beyond what those libraries cost by themselves (best of 7, interleaved with a script that only imports them
    and opens the file, in CPU seconds: a shared machine's wall times vary too much for an absolute bound; the README
    gives the wall figures measured on a quiet one)."""
    command = [sys.executable, "-m", "speclogs", "sql", "SELECT 1", "--db", str(db)]
    imported = subprocess.run([sys.executable, "-X", "importtime", *command[1:]], capture_output=True, text=True,
                              env=cli_env(), check=True).stderr
    modules = {line.rsplit("|", 1)[-1].strip() for line in imported.splitlines() if line.startswith("import time:")}
    heavy = {m for m in modules if m.split(".")[0] in {"polars", "numpy", "pyarrow", "scipy", "altair", "pyparsing"}
             or m.startswith(("speclogs.ingest.pipeline", "speclogs.grammar", "speclogs.analysis",
                              "speclogs.report.", "speclogs.store.writer", "speclogs.store.layout"))
             and m != "speclogs.report.summaries"}   # the query table's renderer (rich only)
    assert heavy == set()
    assert "pydantic" not in modules  # typer ≥ 0.29 builds a pydantic TypeAdapter per parameter: +0.1 s (pyproject pins <0.29)
    best = {"speclogs": math.inf, "floor": math.inf}
    wall = math.inf
    for _ in range(7):
        for name, argv in (("speclogs", command), ("floor", [sys.executable, "-c", _FLOOR, str(db)])):
            before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            subprocess.run(argv, capture_output=True, env=cli_env(), check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if name == "speclogs":
                wall = min(wall, time.perf_counter() - started)
            best[name] = min(best[name], after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(f"speclogs sql 'SELECT 1': best {wall:.3f} s wall, {best['speclogs']:.3f} s CPU; typer + duckdb + rich + "
          f"opening the file alone: {best['floor']:.3f} s CPU")
    assert best["speclogs"] - best["floor"] < 0.1


def test_the_library_reads_the_same_way(db):
    """speclogs.store.query for Python users: statements() yields each result; batches stream."""
    from speclogs.store.query import statements

    with statements(db, "SELECT 1 AS a; SELECT * FROM range(5) t(i)") as results:
        first, second = list((r.columns, r.head(10)) for r in results)
    assert first == (("a",), [(1,)]) and second == (("i",), [(0,), (1,), (2,), (3,), (4,)])


@pytest.mark.parametrize("statement", [
    "COPY (SELECT 1) TO '{out}'", "EXPORT DATABASE '{out}'", "INSTALL sqlite", "LOAD sqlite",
    "ATTACH '{out}' AS other", "CREATE TABLE t AS SELECT 1", "SET autoload_known_extensions = true",
    "PRAGMA profiling_output = '{out}'", "SELECT 1; COPY (SELECT 2) TO '{out}'",
])
def test_sql_refuses_what_writes_or_reaches_out(db, tmp_path, statement):
    out = tmp_path / "written"
    result = run_cli("sql", statement.format(out=out), "--db", str(db))
    assert result.returncode == 1
    assert "refused:" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists() and result.stdout == ""


def test_a_file_that_is_not_duckdb_is_not_a_speclogs_database(tmp_path):
    import sqlite3

    path = tmp_path / "some.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE t (a)")
    for args in (["sql", "SELECT 1"], ["tables"], ["ingest", str(MATRIX / "eagle3_nccl.log")]):
        result = run_cli(*args, "--db", str(path))
        assert result.returncode == 1, args
        assert "is not a speclogs database" in result.stderr and "extension" not in result.stderr.lower()


def test_the_table_rounds_floats_and_shows_types_on_request(db):
    query = "SELECT 144.52499999999998::DOUBLE AS gen_tok_s, 0.1::FLOAT AS rate, 'x' AS name"
    plain = run_cli("sql", query, "--db", str(db))
    assert plain.returncode == 0, plain.stderr
    assert "144.525" in plain.stdout and "144.52499" not in plain.stdout and "0.1 " in plain.stdout.replace("│", " ")
    assert "double" not in plain.stdout
    typed = run_cli("sql", query, "--db", str(db), "--types")
    assert typed.returncode == 0, typed.stderr
    assert re.search(r"double.*float.*varchar", typed.stdout)


def test_ndjson_is_one_object_a_line_for_every_statement(db):
    result = run_cli("sql", "SELECT 1 AS a, 'x' AS b UNION ALL SELECT 2, 'y' ORDER BY a; SELECT 'NaN'::DOUBLE AS c; "
                     "SELECT 1 AS d WHERE false", "--db", str(db), "--format", "ndjson")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()] == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"c": None}]


def test_a_narrow_table_folds_long_text_but_never_a_number_or_a_name(db):
    query = ("SELECT 'baseline_default_1' AS run_name, repeat('/work/some/folder', 4) AS folder, "
             "144525000.0::DOUBLE AS big, 123456789012 AS id")
    done = subprocess.run([sys.executable, "-m", "speclogs", "sql", query, "--db", str(db)], capture_output=True, text=True,
                          env={**cli_env(), "COLUMNS": "60"}, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 60 for line in lines), lines
    assert "baseline_default_1" in done.stdout and "144525000" in done.stdout and "123456789012" in done.stdout
    assert len([line for line in lines if "│" in line]) > 1   # the folder folded onto more lines
