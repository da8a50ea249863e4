"""Secrets never leave the machine in what speclogs writes: by name, by value pattern and by flag.

One definition, used by the launcher (run.json: argv, env, everything else in it), by the analysis (the
settings the confounder check compares) and by every report renderer. Standard library only (the launcher
runs on a GPU box).

- By name: an environment variable or server argument whose name ends in a secret *word* (`HF_TOKEN`,
  `OPENAI_API_KEY`, `MYSQL_PWD`, `GH_PAT`, `SENTRY_DSN`, `api_key`) or has a word that is always one
  (`AWS_SECRET_ACCESS_KEY`, `DB_PASSWORD_FILE`); words, not substrings, so `TOKENIZERS_PARALLELISM`,
  `NCCL_IB_PKEY`, `TIKTOKEN_CACHE_DIR` and `speculative_token_map` stay readable.
- By value: credentials in a URL (`http://bob:pw@proxy` → `http://<redacted>@proxy`) and tokens with a
  known shape (`sk-…`, `hf_…`, `ghp_…`, `github_pat_…`, `xoxb-…`, `glpat-…`, `AKIA…`, JWTs), wherever they are.
- By flag: the value after `--api-key`, `--*-token`, `--*password`, `--*-secret` (`--flag VALUE` and `--flag=VALUE`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"

# Words (split on '_', '-', '.') that make a name secret when they end it (HF_TOKEN, but not speculative_token_map) …
SECRET_LAST_WORDS = frozenset({
    "TOKEN", "KEY", "APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "PASS", "PWD", "AUTH", "AUTHORIZATION", "DSN",
    "PAT", "COOKIE",
})
# … and words that make it secret anywhere (AWS_SECRET_ACCESS_KEY, DB_PASSWORD_FILE).
SECRET_WORDS = frozenset({"SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS"})
# Whole names that have a secret word but are not secrets (the working directory is not a password).
NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})

_WORD_SPLIT = re.compile(r"[_\-.]+")
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/@:\"'<>]*(?::[^\s/@\"'<>]*)?)@")
_TOKENS = re.compile(
    r"\b(?:"
    r"sk-[A-Za-z0-9_\-]{16,}"            # OpenAI / Anthropic style
    r"|hf_[A-Za-z0-9]{16,}"               # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{20,}"        # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"      # GitHub fine-grained tokens
    r"|glpat-[A-Za-z0-9_\-]{16,}"         # GitLab
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"    # Slack
    r"|AKIA[0-9A-Z]{16}"                  # AWS access key id
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWT
    r")"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/\-]{12,}=*")


def secret_name(name: str) -> bool:
    """True when `name` (env variable, server argument or flag without dashes) names a secret."""
    upper = name.upper().lstrip("-")
    if upper in NOT_SECRET_NAMES:
        return False
    words = [word for word in _WORD_SPLIT.split(upper) if word]
    return bool(words) and (words[-1] in SECRET_LAST_WORDS or any(word in SECRET_WORDS for word in words))


def redact_text(text: str) -> str:
    """`text` with URL credentials, known token shapes and bearer credentials replaced by <redacted>."""
    if not text:
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@" if m["userinfo"] else m[0], text)
    text = _TOKENS.sub(REDACTED, text)
    return _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", text)


def redact_value(name: str, value: Any) -> Any:
    """A named value (env variable, server argument, JSON key): <redacted> when the name is secret and the value is
    set; otherwise its text with secret-looking parts redacted."""
    if value is None or value == "" or (isinstance(value, str) and value.strip("'\"") in ("", "None")):
        return value
    if secret_name(name):
        return REDACTED
    return redact_text(value) if isinstance(value, str) else value


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """An environment, sorted by name, with secret names and secret-looking values redacted."""
    return {name: redact_value(name, value) for name, value in sorted(env.items())}


def _flag_name(flag: str) -> str:
    return flag.lstrip("-").partition("=")[0]


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the value of every secret flag (`--api-key X`, `--hf-token=X`) and every secret-looking
    value redacted. The argv the process runs with is never changed: this is for what is written down."""
    out: list[str] = []
    redact_next = False
    for part in argv:
        part = str(part)
        if redact_next and not part.startswith("--"):
            out.append(REDACTED)
            redact_next = False
            continue
        redact_next = False
        if part.startswith("--") and secret_name(_flag_name(part)):
            if "=" in part:
                out.append(part.partition("=")[0] + "=" + REDACTED)
            else:
                out.append(part)
                redact_next = True
            continue
        out.append(redact_text(part))
    return out


def redact_json(value: Any, key: str = "") -> Any:
    """A JSON-like document with every secret redacted: dict values by their key's name, lists of strings as
    command lines, any other string by value pattern."""
    if isinstance(value, Mapping):
        return {k: (redact_value(str(k), v) if isinstance(v, str) else redact_json(v, str(k))) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, str) for item in value):
            return redact_argv(value)
        return [redact_json(item, key) for item in value]
    if isinstance(value, str):
        return redact_value(key, value) if key else redact_text(value)
    return value


_ASSIGNMENT = re.compile(  # name=value (ServerArgs(…), env dumps) or 'name': value / "name": value (dicts, JSON)
    r"""(?P<head>(?:(?<![A-Za-z0-9_#.\-])(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)="""
    r"""|(?P<quote>['"])(?P<qname>[A-Za-z_][A-Za-z0-9_.\-]*)(?P=quote): ))"""
    r"""(?P<value>'[^']*'|"[^"]*"|[^\s,)}\]]+)"""
)
_FLAG = re.compile(r"(?<![\w\-])(?P<flag>--[A-Za-z0-9][A-Za-z0-9\-_]*)(?P<sep>=| +)(?P<value>[^\s'\",)\-][^\s'\",)]*)")
# A cheap test first: text redact_line could change has one of these (most lines have none; a line's "tokens" is not
# one: a secret name needs an assignment or a flag after its last word; tests/test_secrets.py checks it is a superset
# on planted lines and on every fixture line). The name words are written in three cases (lower, UPPER, Capitalized:
# `api_key`, `HF_TOKEN`, `apiKey`): a case-insensitive alternation is 2–3× slower to run over every text column.
_NAME_WORDS = ("key", "token", "pass", "pwd", "auth", "authorization", "dsn", "pat", "cookie")
_NAME_WORD_CASES = "|".join(sorted({form for word in _NAME_WORDS for form in (word, word.upper(), word.capitalize())}))
SUSPECT = re.compile(
    r"://[^\s/@]*@|sk-|hf_|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|AKIA|eyJ"
    r"|(?i:bearer|basic)\s|(?i:secret|passw|passphrase|credential)"
    rf"|(?:{_NAME_WORD_CASES})(?:=|['\"]: )"
    rf"|--[A-Za-z0-9_\-]*(?:{_NAME_WORD_CASES})[= ]"
)


def redact_line(text: str) -> str:
    """A log line as speclogs keeps it: redact_text, plus the value of every secret-named assignment
    (`api_key='sk-…'`, `"hf_token": "…"`) and of every secret flag (`--api-key X`) in it."""
    if not text or not SUSPECT.search(text):
        return text
    return _redact_secrets(text)


def _redact_secrets(text: str) -> str:
    def assignment(m: re.Match) -> str:
        if not secret_name(m["name"] or m["qname"]) or m["value"].strip("'\"") in ("", "None", "null"):
            return m[0]
        quote = m["value"][0] if m["value"][:1] in ("'", '"') else ""
        return f"{m['head']}{quote}{REDACTED}{quote}"

    def flag(m: re.Match) -> str:
        return f"{m['flag']}{m['sep']}{REDACTED}" if secret_name(_flag_name(m["flag"])) else m[0]

    return _FLAG.sub(flag, _ASSIGNMENT.sub(assignment, redact_text(text)))
