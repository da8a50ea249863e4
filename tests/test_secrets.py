"""Secrets planted everywhere a user can put one never reach what speclogs writes: run.json, the launch's own output,
the DuckDB file after ingest (its bytes), the lake, and every report format. Proxies are not inherited unless the plan
names them; an inherited variable outside the families speclogs reads is recorded by name only; harmless names that
merely look like secrets (TOKENIZERS_PARALLELISM, NCCL_IB_PKEY, add_bos_token, kt_max_deferred_experts_per_token,
bucket_time_to_first_token) keep their values and are compared as the settings they are."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from speclogs.launcher.runinfo import NOT_RECORDED, build_env
from speclogs.redact import REDACTED, redact, redact_argv, redact_json, redact_text, secret_name

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "tests" / "standin_server.py"

# what a user could put where: plan env, inherited env, argv (plan and cell args), server args (the server prints them)
PLAN_ENV = {"DATABASE_URL": "postgres://app:dbpw-PLANENV-7@127.0.0.1:9/x",
            "OPENAI_API_KEY": "sk-planenv0123456789abcdef", "NCCL_IB_PKEY": "0x8001"}
INHERITED = {"HTTPS_PROXY": "http://bob:proxypw-INHERIT-7@127.0.0.1:9",
             "http_proxy": "http://bob:proxypw-INHERIT-8@127.0.0.1:9",
             "ALL_PROXY": "socks5://carol:proxypw-INHERIT-9@127.0.0.1:9",
             "GH_PAT": "ghp_inheritABCDEFGHIJKLMNOPQRSTUV0123",
             "MYSQL_PWD": "mysqlpw-INHERIT-7",
             "SENTRY_DSN": "https://sentrykey-INHERIT-7@o1.ingest.sentry.io/5",
             "HF_TOKEN": "hf_inheritABCDEFGHIJKLMNOPQRS",
             "TOKENIZERS_PARALLELISM": "false", "TIKTOKEN_CACHE_DIR": "/tmp/tiktoken-cache",
             "DEPLOY_BLOB": "blob-INHERIT-nosecretword-7"}
ARGV_API_KEY = "sk-argv0123456789abcdefghij"
ARGV_HF_TOKEN = "hf_argvABCDEFGHIJKLMNOPQRSTU"
# a JSON-valued argument, values of harmless-named server arguments with a secret's shape, a model path URL with
# credentials, and log lines in the header / assignment forms
SERVER_ARGS = ["--hicache-storage-backend-extra-config", '{"aws_secret_access_key": "awsjson-PLANT-1", "bucket": "b"}',
               "--model-path", "https://mpuser:modelpath-PLANT-2@hub.example/m",
               "--served-model-name", "sk-servedPLANT0123456789abcdef", "--download-dir", "hf_dlPLANTABCDEFGHIJKLMNOP",
               "--print-line", "Password: password-PLANT-3", "--print-line", "X-Api-Key: xapikey-PLANT-4",
               "--print-line", "aws_secret_access_key = awsassign-PLANT-5",
               "--print-line", "curl -H 'Authorization: Bearer bearerPLANT0123456789'"]
# JSON inputs: a benchmark file's extra keys, a request export's parameters
BENCH_LINE = {"run": "bench_planted", "i": 0, "warmup": False, "latency_s": 0.9, "completion_tokens": 500, "tok_per_s": 529.0,
              "api_key": "benchkey-PLANT-6", "headers": {"Authorization": "Bearer benchbearerPLANT0123456"},
              "meta_info": {"id": "a1", "prompt_tokens": 64, "completion_tokens": 500, "e2e_latency": 0.9}}
SECRETS = ["dbpw-PLANENV-7", "planenv0123456789", "proxypw-INHERIT", "ghp_inherit", "mysqlpw-INHERIT-7",
           "sentrykey-INHERIT-7", "hf_inherit", "argv0123456789", "hf_argv", "blob-INHERIT-nosecretword-7",
           "awsjson-PLANT-1", "modelpath-PLANT-2", "sk-servedPLANT", "hf_dlPLANT", "password-PLANT-3", "xapikey-PLANT-4",
           "awsassign-PLANT-5", "bearerPLANT", "benchkey-PLANT-6", "benchbearerPLANT", "reqkey-PLANT-8"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _speclogs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "speclogs", *args], capture_output=True, text=True, timeout=180,
                          env=dict(env or os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200"))


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Two cells launched through the CLI with secrets in every place, ingested, then reported in every format."""
    tmp = tmp_path_factory.mktemp("secrets")
    env_lines = "\n".join(f'{name} = "{value}"' for name, value in PLAN_ENV.items())
    plan = tmp / "plan.toml"
    plan.write_text(f"""name = "secrets"
command = ["{{python}}", "{STANDIN}"]
port = {_free_port()}
health_poll_s = 0.05
stop_grace_s = 2
launches = 1
inherit_env = ["*"]
args = ["--ready-after", "0.2", "--speculative-algorithm", "EAGLE3", {", ".join(json.dumps(a) for a in SERVER_ARGS)}]
[env]
{env_lines}
[bench]
requests = 3
max_new_tokens = 8
[[cells]]
name = "keyed"
args = ["--api-key", "{ARGV_API_KEY}", "--hf-token={ARGV_HF_TOKEN}", "--kt-max-deferred-experts-per-token", "4",
        "--bucket-time-to-first-token", "[0.1, 0.5]"]
[[cells]]
name = "open"
args = ["--kt-max-deferred-experts-per-token", "8", "--bucket-time-to-first-token", "[0.2, 0.5]", "--add-bos-token"]
""")
    db = tmp / "runs.duckdb"
    out = tmp / "out"
    launch = _speclogs("launch", str(plan), "--out", str(out), "--db", str(db), "--format", "json",
                       env={**os.environ, **INHERITED})
    assert launch.returncode == 0, launch.stderr
    reports = {"launch stdout": launch.stdout, "launch stderr": launch.stderr}
    inputs = tmp / "inputs"
    inputs.mkdir()
    (inputs / "planted.bench.jsonl").write_text(json.dumps(BENCH_LINE) + "\n")
    export = json.loads((ROOT / "fixtures/h200-sglang-0.5.14-metrics/request_export.jsonl").read_text().splitlines()[0])
    export["request_parameters"] = json.dumps({**json.loads(export["request_parameters"]), "api_key": "reqkey-PLANT-8"})
    (inputs / "sglang-request-metrics-20261201_09.log").write_text(json.dumps(export) + "\n")
    has_lake = importlib.util.find_spec("deltalake") is not None   # the lake needs the fleet extra
    for target in (["--db", str(db)], ["--lake", str(tmp / "lake")])[:2 if has_lake else 1]:
        ingested = _speclogs("ingest", str(inputs), *target)
        assert ingested.returncode == 0, ingested.stderr
    if has_lake:
        lake = _speclogs("ingest", str(out), "--lake", str(tmp / "lake"))
        assert lake.returncode == 0, lake.stderr
    arms = ["-c", "keyed_1", "-c", "open_1", "--db", str(db)]
    for fmt in ("terminal", "json", "md"):
        result = _speclogs("report", *arms, "--format", fmt)
        assert result.returncode == 0, result.stderr
        reports[f"report {fmt}"] = result.stdout
    html = tmp / "report.html"
    assert _speclogs("report", *arms, "--html", str(html)).returncode == 0
    reports["report html"] = html.read_text()
    return {"out": out, "db": db, "reports": reports, "lake": tmp / "lake"}


def test_run_json_has_no_secret_but_keeps_harmless_names(launched):
    for path in launched["out"].glob("*/*/run.json"):
        text = path.read_text()
        assert _leaks(text) == [], path
        record = json.loads(text)
        env = record["env"]
        assert env["TOKENIZERS_PARALLELISM"] == "false" and env["NCCL_IB_PKEY"] == "0x8001"
        assert env["TIKTOKEN_CACHE_DIR"] == env["DEPLOY_BLOB"] == NOT_RECORDED
        assert env["MYSQL_PWD"] == env["GH_PAT"] == env["SENTRY_DSN"] == env["HF_TOKEN"] == REDACTED
        assert env["DATABASE_URL"] == f"postgres://{REDACTED}@127.0.0.1:9/x"
        assert not any(name.lower().endswith("_proxy") for name in env), "proxies are not inherited unless named"
    keyed = json.loads((launched["out"] / "keyed" / "1" / "run.json").read_text())
    assert keyed["argv"][keyed["argv"].index("--api-key") + 1] == REDACTED
    assert f"--hf-token={REDACTED}" in keyed["argv"]


def test_launch_output_and_every_report_format_have_no_secret(launched):
    for name, text in launched["reports"].items():
        assert _leaks(text) == [], name


def _database_text(db: Path) -> str:
    with duckdb.connect(str(db), read_only=True) as con:
        names = [row[0] for row in con.execute(
            "SELECT table_name FROM duckdb_tables() UNION SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
        return "\n".join(str(con.execute(f'SELECT * FROM "{name}"').fetchall()) for name in names)


def test_database_runs_argv_env_have_no_secret(launched):
    with duckdb.connect(str(launched["db"]), read_only=True) as con:
        runs = str(con.execute("SELECT argv, env, run_json FROM runs").fetchall())
    assert _leaks(runs) == []


def test_database_has_no_secret_anywhere(launched):
    """The server prints its ServerArgs (api_key included) into server.log: ingest redacts the server_args values and
    every text it keeps."""
    assert _leaks(_database_text(launched["db"])) == []
    assert _leaks(launched["db"].read_bytes().decode("latin-1")) == []


@pytest.mark.parametrize("name", ["HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "MYSQL_PWD", "GH_PAT", "SENTRY_DSN",
                                  "api_key", "admin_api_key", "DB_PASSWORD_FILE", "AWS_SESSION_TOKEN", "hf_token",
                                  "aws_access_key_id", "ssl_keyfile_password", "X-Api-Key", "apiKey"])
def test_secret_names(name):
    assert secret_name(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "NCCL_IB_PKEY", "TIKTOKEN_CACHE_DIR", "speculative_token_map",
                                  "max_total_tokens", "PWD", "OLDPWD", "PATH", "SSH_AUTH_SOCK", "DATABASE_URL",
                                  "add_bos_token", "kt_max_deferred_experts_per_token", "bucket_time_to_first_token",
                                  "eos_token", "cache_key", "sort_key", "num_pass", "file_key", "ssl_keyfile"])
def test_harmless_names(name):
    assert not secret_name(name)


def test_values_and_flags():
    assert redact_text("http://bob:pw@proxy:3128/") == f"http://{REDACTED}@proxy:3128/"
    assert redact_text("see https://x-access-token:ghs_ABCDEFGHIJKLMNOPQRSTUVWX@github.com/o/r") == \
        f"see https://{REDACTED}@github.com/o/r"
    assert redact_text("key sk-ant-api03-abcdefghijklmnop and github_pat_11ABCDEFG0123456789_abcdefghij") == \
        f"key {REDACTED} and {REDACTED}"
    assert redact_text("http://127.0.0.1:30000/health") == "http://127.0.0.1:30000/health"
    assert redact_argv(["--api-key", "plain-words", "--admin-password=x", "--ssl-keyfile", "/k.pem",
                        "--speculative-token-map", "/m.pt", "--max-total-tokens", "4096"]) == \
        ["--api-key", REDACTED, f"--admin-password={REDACTED}", "--ssl-keyfile", "/k.pem", "--speculative-token-map",
         "/m.pt", "--max-total-tokens", "4096"]
    assert redact_json({"NO_PROXY": "localhost", "X": "https://u:p@h"}) == {"NO_PROXY": "localhost", "X": f"https://{REDACTED}@h"}
    # JSON text (an argv or env column): by its keys and as a command line
    assert redact('["--api-key", "plainvalue", "--port", "1"]') == f'["--api-key", "{REDACTED}", "--port", "1"]'
    assert json.loads(redact('{"HF_TOKEN": "abc", "add_bos_token": true}')) == {"HF_TOKEN": REDACTED, "add_bos_token": True}


def test_proxies_inherited_only_when_named():
    base = {"HTTPS_PROXY": "http://p", "http_proxy": "http://p", "NO_PROXY": "localhost", "PATH": "/bin"}
    env, dropped = build_env(base, ("*",), ())
    assert env == {"PATH": "/bin"} and set(dropped) == {"HTTPS_PROXY", "http_proxy", "NO_PROXY"}
    env, _ = build_env(base, ("PATH", "HTTPS_PROXY", "no_proxy"), ())
    assert env == {"PATH": "/bin", "HTTPS_PROXY": "http://p", "NO_PROXY": "localhost"}


SECRET_LINES = [
    "ServerArgs(model_path='m', api_key='sk-x', admin_api_key=abc123, port=30000)",
    "{'hf_token': 'abc', 'x': 1}", '{"OPENAI_API_KEY": "plainvalue"}', "DB_PASSWORD_FILE=/run/pw",
    "launch --api-key plain-words --port 1", "launch --hf-token=plain", "Authorization: BEARER abcdefghijklmnopqrstu",
    "fetch https://u:p@h/x", "token hf_abcdefghijklmnopqrstuvwx", "AWS_SECRET_ACCESS_KEY=xyz", "x.authorization=yz",
    "MYSQL_PWD=pw", "GH_PAT=ghp_abc", "SENTRY_DSN=https://k@o.ingest/1", "session_cookie='c'", "apiKey=abc",
    "run --apiKey=y", "{\"ApiKey\": \"v\"}", "HF_Token=abc",
    "Password: hunter2", "X-Api-Key: abc", "aws_secret_access_key = wJalr", "password: pw", "hf_token: abc",
    """cfg='{"aws_secret_access_key": "wJalr"}'""", '"{\\"aws_secret_access_key\\": \\"wJalr\\"}"',
    "AWS_ACCESS_KEY_ID=abc",
]
HARMLESS_LINES = [
    "Prefill batch, #new-seq: 1, #new-token: 3, #cached-token: 0, token usage: 0.00, #running-req: 0",
    "Decode batch, #running-req: 1, #token: 532, token usage: 0.00, accept len: 2.81",
    "ServerArgs(add_bos_token=True, kt_max_deferred_experts_per_token=4, bucket_time_to_first_token=[0.1, 0.5], "
    "eos_token=2, cache_key='k', sort_key=3, num_pass=2)",
]


def test_cheap_test_finds_every_line_redact_changes():
    """redact_text looks only at lines the cheap SUSPECT test picks: every line whose redaction changes something must
    be one of them (planted lines and every fixture and excerpt line), while a line's plain "tokens" is not."""
    from speclogs.redact import SUSPECT, _redact_secrets

    lines = list(SECRET_LINES)
    for path in sorted((ROOT / "fixtures").rglob("*")):
        if path.is_file() and path.suffix in {".log", ".txt", ".out", ""}:
            lines += path.read_text(errors="replace").splitlines()
    changed = [line for line in lines if _redact_secrets(line) != line]
    assert set(SECRET_LINES) <= set(changed)
    assert [line for line in changed if not SUSPECT.search(line)] == []
    assert [line for line in HARMLESS_LINES if _redact_secrets(line) != line] == []
    for harmless in ("KV Cache is allocated. #tokens: 800000", "{'max_new_tokens': 47, 'prompt_tokens': 5}",
                     "Requested token count exceeds the model's maximum context length", "max_total_num_tokens=800000"):
        assert not SUSPECT.search(harmless)


def test_lake_has_no_secret(launched):
    """The lake's Parquet parts, read back through DuckDB (their bytes are compressed), hold none of the secrets."""
    pytest.importorskip("deltalake", reason="deltalake is not installed (pip install 'speclogs[fleet]')")
    parts = sorted(launched["lake"].rglob("*.parquet"))
    assert parts
    with duckdb.connect() as con:
        text = "\n".join(str(con.execute("SELECT * FROM read_parquet(?)", [str(part)]).fetchall()) for part in parts)
    assert "awsjson" in text or REDACTED in text
    assert _leaks(text) == []


def test_harmless_settings_are_kept_and_compared(launched):
    """add_bos_token, a *_per_token count and bucket_time_to_first_token keep their values in server_args, and a report
    of two arms that differ in them warns about the difference."""
    with duckdb.connect(str(launched["db"]), read_only=True) as con:
        rows = con.execute(
            "SELECT r.run_name, a.name, a.value FROM server_args a JOIN runs r USING (run_id) WHERE a.name IN "
            "('add_bos_token', 'kt_max_deferred_experts_per_token', 'bucket_time_to_first_token') ORDER BY 1, 2").fetchall()
    assert rows == [("keyed_1", "bucket_time_to_first_token", "[0.1, 0.5]"),
                    ("keyed_1", "kt_max_deferred_experts_per_token", "4"),
                    ("open_1", "add_bos_token", "True"),
                    ("open_1", "bucket_time_to_first_token", "[0.2, 0.5]"),
                    ("open_1", "kt_max_deferred_experts_per_token", "8")]
    warnings = json.loads(launched["reports"]["report json"])["warnings"]
    differing = [json.dumps(w) for w in warnings if "kt_max_deferred_experts_per_token" in json.dumps(w)]
    assert differing and "bucket_time_to_first_token" in differing[0] and "add_bos_token" in differing[0], warnings
    for fmt in ("report terminal", "report md"):
        for name in ("kt_max_deferred_experts_per_token", "bucket_time_to_first_token", "add_bos_token"):
            assert name in launched["reports"][fmt], (fmt, name)
