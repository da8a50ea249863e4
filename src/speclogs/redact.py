"""Secrets never leave the machine in what speclogs writes: `redact(value)` is the one scan every written value
(database rows, the lake, run.json, every report) passes through. Standard library only (the launcher's GPU box).

By value: URL credentials, known token shapes (`sk-…`, `hf_…`, `ghp_…`, JWTs …) and `Bearer …`. By name: the value
of an assignment or flag whose name is secret — one that ends in a secret word (`HF_TOKEN`, `api_key`, `MYSQL_PWD`)
or holds one that always is (`aws_secret_access_key`). Words, not substrings, and a qualifier before the last word
makes it a count or a kind of token (`add_bos_token`, `cache_key`, `num_pass` keep their values).
"""

from __future__ import annotations

import json
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
# A word before the last that makes TOKEN / KEY / PASS a count, a kind of token or a lookup key (SGLang's ServerArgs
# and sampling parameters, speclogs' own columns) …
NOT_SECRET_QUALIFIERS = frozenset({
    "PER", "FIRST", "LAST", "NEXT", "BOS", "EOS", "PAD", "UNK", "SEP", "CLS", "MASK", "SPECIAL", "STOP", "START", "END",
    "IMAGE", "VIDEO", "AUDIO", "CACHE", "SORT", "ROUTING", "EXTRA", "PAIR", "PARTITION", "PRIMARY", "SHARD", "HASH",
    "GROUP", "NUM", "FORWARD", "BACKWARD", "DRAFT", "VERIFY", "MULTI", "SINGLE", "FILE", "LAUNCH", "ROW", "JOIN", "LOOKUP",
    "INDEX",
})
# … and whole names that have a secret word but are not secrets (the working directory is not a password).
NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
# Words that make a name secret wherever they stand together (aws_access_key_id, AWS_ACCESS_KEY).
_SECRET_PAIRS = (("ACCESS", "KEY"), ("SECRET", "KEY"), ("PRIVATE", "KEY"), ("API", "KEY"))

_WORD_SPLIT = re.compile(r"[_\-.]+|(?<=[a-z])(?=[A-Z])")
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/@:\"'<>]*(?::[^\s/@\"'<>]*)?)@")
# OpenAI / Anthropic, Hugging Face, GitHub, GitHub fine-grained, GitLab, Slack, AWS access key id, JWT
_TOKEN_SHAPES = (r"sk-[A-Za-z0-9_\-]{16,}", r"hf_[A-Za-z0-9]{16,}", r"gh[pousr]_[A-Za-z0-9]{20,}", r"github_pat_[A-Za-z0-9_]{20,}",
                 r"glpat-[A-Za-z0-9_\-]{16,}", r"xox[abposr]-[A-Za-z0-9\-]{10,}", r"AKIA[0-9A-Z]{16}",
                 r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")
_TOKENS = re.compile(r"\b(?:" + "|".join(_TOKEN_SHAPES) + ")")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/\-]{12,}=*")


def secret_name(name: str) -> bool:
    """True when `name` (env variable, server argument, JSON key, header or flag without dashes) names a secret."""
    if name.startswith("#"):  # SGLang's count labels ('#token', '#gpu-token'): a number of tokens, never a credential
        return False
    words = [word.upper() for word in _WORD_SPLIT.split(name.lstrip("-")) if word]
    if not words or "".join(words) in NOT_SECRET_NAMES and len(words) == 1:
        return False
    if any(word in SECRET_WORDS for word in words) or any(pair in zip(words, words[1:]) for pair in _SECRET_PAIRS):
        return True
    return words[-1] in SECRET_LAST_WORDS and not (len(words) > 1 and words[-2] in NOT_SECRET_QUALIFIERS)


def _unset(value: Any) -> bool:
    return value in (None, "", [], {}) or (isinstance(value, str) and value.strip("'\"") in ("", "None", "null"))


def redact_value(name: str, value: Any) -> Any:
    """A named value: <redacted> when the name is secret and the value is set; else the value, its secrets redacted."""
    if _unset(value):
        return value
    return REDACTED if secret_name(name) else redact(value)


def _flag_name(flag: str) -> str:
    return flag.lstrip("-").partition("=")[0]


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the value of every secret flag (`--api-key X`, `--hf-token=X`) and every secret in a value
    redacted."""
    out: list[str] = []
    for part in map(str, argv):
        flag, equals, _ = part.partition("=")
        if part.startswith("--") and equals and secret_name(_flag_name(flag)):
            out.append(flag + "=" + REDACTED)
        elif out and out[-1].startswith("--") and "=" not in out[-1] and secret_name(_flag_name(out[-1])) \
                and not part.startswith("--"):
            out.append(REDACTED)
        else:
            out.append(redact_text(part))
    return out


def redact_json(value: Any, key: str = "") -> Any:
    """A JSON-like document with every secret redacted: a value by its key's name and by what it holds, lists of
    strings as command lines, any string by redact_text."""
    if key and secret_name(key) and not _unset(value):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: redact_json(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, str) for item in value):
            return redact_argv(value)
        return [redact_json(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact(value: Any) -> Any:
    """The one scan: text (a JSON document in text by its keys and values), a document or list; numbers as they are."""
    if isinstance(value, str) and value[:1] in ("{", "[") and SUSPECT.search(value):
        try:
            document = json.loads(value)
        except ValueError:
            return redact_text(value)
        clean = redact_json(document)
        return value if clean == document else json.dumps(clean)
    return redact_json(value)


_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_ASSIGNMENT = re.compile(  # name=value, name = value, Header-Name: value, 'name': value, "name": value, \"name\": \"value\"
    rf"""(?P<head>(?<![A-Za-z0-9_#.\-\\'"])(?P<name>{_NAME})(?:[ \t]*=[ \t]*|:[ \t]+)"""
    rf"""|(?P<esc>\\?)(?P<quote>['"])(?P<qname>{_NAME})(?P=esc)(?P=quote)[ \t]*[:=][ \t]*)"""
    r"""(?P<value>\\"(?:[^"\\]|\\[^"])*\\"|'[^']*'|"(?:[^"\\]|\\.)*"|[^\s,;)}\]\\]+)"""
)
_FLAG = re.compile(r"(?<![\w\-])(?P<flag>--[A-Za-z0-9][A-Za-z0-9\-_]*)(?P<sep>=| +)(?P<value>[^\s'\",)\-][^\s'\",)]*)")
# A cheap test first: text redact_text could change has one of these (tests/test_secrets.py checks it is a superset).
# It runs in polars too, so no look-around; the name words in three cases rather than a slower case-insensitive
# alternation. A bare lowercase `token:` is not one (SGLang's batch lines have `#token: 3456`), `hf_token:` is.
_NAME_WORDS = ("key", "token", "pass", "pwd", "auth", "authorization", "dsn", "pat", "cookie")
_NAME_WORD_CASES = "|".join(sorted({form for word in _NAME_WORDS for form in (word, word.upper(), word.capitalize())}))
_NAME_WORD_CAPITALS = "|".join(sorted({form for word in _NAME_WORDS for form in (word.upper(), word.capitalize())}))
_HEADER = rf"(?:[_.](?:{_NAME_WORD_CASES})|(?:{_NAME_WORD_CAPITALS})):[ \t]"
SUSPECT = re.compile(
    r"://[^\s/@]*@|sk-|hf_|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|AKIA|eyJ"
    r"|(?i:bearer|basic)\s|(?i:secret|passw|passphrase|credential|access.?key|api.?key)"
    rf"|(?:{_NAME_WORD_CASES})(?:[ \t]*=|\\?['\"][ \t]*[:=])"
    rf"|{_HEADER}"
    rf"|--[A-Za-z0-9_\-]*(?:{_NAME_WORD_CASES})[= \"']"
)


def redact_text(text: str) -> str:
    """`text` with every secret redacted (`api_key='sk-…'`, `"hf_token": "…"`, `Password: x`, `--hf-token X` …)."""
    if not text or not isinstance(text, str) or not SUSPECT.search(text):
        return text
    return _redact_secrets(text)


def _redact_secrets(text: str) -> str:
    def assignment(m: re.Match) -> str:
        name = m["name"] or m["qname"]
        if (m["name"] and ":" in m["head"] and not _header_name(name)) or not secret_name(name):
            # a value that is itself text with assignments (a JSON-valued argument) is looked into
            return m["head"] + _ASSIGNMENT.sub(assignment, m["value"]) if len(m["value"]) > 2 else m[0]
        if m["value"].strip("'\"\\") in ("", "None", "null"):
            return m[0]
        value = m["value"]
        quote = value[:2] if value.startswith('\\"') else value[:1] if value[:1] in ("'", '"') else ""
        return f"{m['head']}{quote}{REDACTED}{quote}"

    def flag(m: re.Match) -> str:
        return f"{m['flag']}{m['sep']}{REDACTED}" if secret_name(_flag_name(m["flag"])) else m[0]

    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@" if m["userinfo"] else m[0], text)
    text = _TOKENS.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", text)
    return _FLAG.sub(flag, _ASSIGNMENT.sub(assignment, text))


def _header_name(name: str) -> bool:
    """Whether an unquoted `name:` is a header as the cheap test finds one (`X-Api-Key:`, `hf_token:`), not a batch
    line's `#new-token:` or `token:`."""
    return bool(_HEADER_NAME.search(name + ": ") or SUSPECT.search(name))


_HEADER_NAME = re.compile(_HEADER)
