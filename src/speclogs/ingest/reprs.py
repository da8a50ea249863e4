"""A tolerant reader of the Python reprs SGLang logs: the `server_args=…` dump and the `--log-requests` lines.

≤0.5.18 logs `server_args=ServerArgs(model_path='…', tp_size=2, …)` (a dataclass repr); 0.5.23 logs a dict repr
`server_args={'model_path': '…', …}`; `--log-requests` prints `Receive: obj=GenerateReqInput(rid='…', …)` and
`Finish: obj=…, out={'meta_info': {…}}`. Values are Python reprs: strings with nested quotes, lists, dicts, None,
`inf`, and non-literals such as `<object at 0x7f…>`. Log shippers truncate long lines, so the text may stop anywhere.

A body is split at its top-level commas by a scan that jumps between brackets, quotes and commas; each value is
read by json (the dict and list reprs that are JSON once their quotes are swapped), a few plain shapes, else
ast.literal_eval.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = set(_OPEN.values())


_SPECIAL = re.compile(r"['\"()\[\]{},]")  # what can change the nesting or end an item: the scan jumps from one to the next


def _split_top_level(body: str) -> tuple[list[str], int | None]:
    """Split on ', ' at nesting depth 0 outside quotes. Returns the stripped, non-empty items and the index of the
    bracket that closed the body (None when the text ran out first: it was truncated, and its cut last item is
    dropped)."""
    items: list[str] = []
    depth: list[str] = []
    start = 0
    i = 0
    search = _SPECIAL.search
    while (found := search(body, i)) is not None:
        i = found.start()
        ch = body[i]
        if ch in "'\"":
            quote = ch * 3 if body.startswith(ch * 3, i) else ch
            i = _after_quoted(body, i + len(quote), quote)
            if i < 0:
                break  # the text ran out inside a string
            continue
        if ch in _OPEN:
            depth.append(_OPEN[ch])
        elif ch in _CLOSE:
            if not depth:
                items.append(body[start:i])
                return [s for s in (x.strip() for x in items) if s], i
            if depth[-1] == ch:
                depth.pop()
        elif not depth:  # a comma at depth 0
            items.append(body[start:i])
            start = i + 1
        i += 1
    return [s for s in (x.strip() for x in items) if s], None


def _after_quoted(body: str, i: int, quote: str) -> int:
    """Index after the quote that closes a string whose text starts at `i` (a backslash escapes the next character);
    -1 when the text ends first."""
    while (end := body.find(quote, i)) >= 0:
        escapes = end
        while escapes > i and body[escapes - 1] == "\\":
            escapes -= 1
        if (end - escapes) % 2 == 0:
            return end + len(quote)
        i = end + 1
    return -1


# The shapes most values have (None, True, 8192, 0.88, 'auto'), read without ast.literal_eval: it compiles the text
# and leaves a reference cycle of ~11 objects a call, which the ingest (cyclic GC off) frees only once a chunk.
# Each shape is one whose literal_eval value is exactly this; anything else goes to literal_eval.
_CONSTANTS = {"None": None, "True": True, "False": False}
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?[0-9]{1,20}\.[0-9]{1,20}")


# A dict or list repr whose strings have no escapes and no double quotes, and whose other tokens are numbers, brackets,
# ':' and ',' or None/True/False, reads as JSON once its quotes and constants are swapped: json.loads (C) gives what
# ast.literal_eval gives; anything else it might read differently (a tab inside a string, a trailing comma, a
# non-string key, +1, NaN) makes json.loads fail or the shape check refuse, and goes to literal_eval.
_REPR_TOKEN = re.compile(r"'[^'\\\"]*'|None|True|False")
_JSON_OUTSIDE_STRINGS = re.compile(r"[\s0-9.eE+\-{}\[\]:,]*")
_TO_JSON = {"None": "null", "True": "true", "False": "false"}


def _json_shaped(text: str) -> object | None:
    """The value of a simple dict / list repr through json.loads; None when it is not simple (or not a literal)."""
    if '"' in text or "\\" in text or not _JSON_OUTSIDE_STRINGS.fullmatch(_REPR_TOKEN.sub("", text)):
        return None
    converted = _REPR_TOKEN.sub(lambda m: _TO_JSON.get(m[0]) or f'"{m[0][1:-1]}"', text)
    try:
        return _JSON.decode(converted)
    except ValueError:
        return None


def _refuse(name: str) -> None:
    raise ValueError(name)  # NaN / Infinity: JSON words, not Python literals


_JSON = json.JSONDecoder(parse_constant=_refuse)


def _literal(text: str) -> object | None:
    """The value of a literal repr; None when it is none (or not finite)."""
    if text[:1] in ("{", "[") and (value := _json_shaped(text)) is not None:
        return value
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    if len(text) >= 2 and text[0] in "'\"" and text[-1] == text[0]:
        inner = text[1:-1]
        if text[0] not in inner and "\\" not in inner and inner.isprintable():
            return inner
    try:
        with warnings.catch_warnings():  # '1.e' or a bad escape would print a warning on stderr
            warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def parse_server_args(text: str) -> list[tuple[str, str, object | None]]:
    """'ServerArgs(a=1, b='x', …)' or "{'a': 1, …}" → [(name, repr_text, python_value_or_None), …].

    Never raises on bad input: non-literal values give None, a truncated dump gives the items before the cut.
    """
    if not isinstance(text, str):
        return []
    s = text.strip()
    marker = s.find("server_args=")
    if marker >= 0:
        s = s[marker + len("server_args=") :]
    if s.startswith("ServerArgs("):
        body, is_dict = s[len("ServerArgs(") :], False
    elif s.startswith("{"):
        body, is_dict = s[1:], True
    else:
        return []
    items, _end = _split_top_level(body)
    return _fields(items, is_dict)


def parse_call_repr(text: str) -> tuple[str | None, list[tuple[str, str, object | None]], str]:
    """A dataclass repr and what follows it: "GenerateReqInput(rid='a', n=1), out={…}" → ('GenerateReqInput',
    [(name, repr_text, value), …], ", out={…}"). A truncated repr gives the fields before the cut and no rest;
    text that is not `Name(` gives (None, [], text)."""
    s = text.lstrip()
    head = s.find("(")
    if head <= 0 or not s[:head].isidentifier():
        return None, [], text
    items, end = _split_top_level(s[head + 1:])
    rest = "" if end is None else s[head + 1 + end + 1:]
    return s[:head], _fields(items, False), rest


def parse_keyword_reprs(text: str) -> list[tuple[str, str, object | None]]:
    """", headers={…}, out={'meta_info': …}" (keyword=repr items, as a repr's tail prints them) → [(name, repr_text,
    value), …]; a cut last item is dropped."""
    items, _end = _split_top_level(text.strip().lstrip(",") + ")")
    return _fields(items, False)


def parse_request_repr(body: str) -> tuple[dict, dict]:
    """A `--log-requests` line after `Receive: obj=` / `Finish: obj=`: "GenerateReqInput(rid='a', n=1), out={…}" →
    ({'__class__': 'GenerateReqInput', 'rid': 'a', 'n': 1}, {'out': {…}}): the call's fields (a value that is not a
    literal as its text), and the keyword items after it, read tolerantly. A body that is not `Name(…` is keyword
    items alone: ({}, its items)."""
    class_name, fields, rest = parse_call_repr(body)
    if class_name is None:
        return {}, {name: literal_tolerant(value_text) for name, value_text, _ in parse_keyword_reprs(body)}
    request = {name: value if value is not None or value_text == "None" else value_text for name, value_text, value in fields}
    tail = {name: literal_tolerant(value_text) for name, value_text, _ in parse_keyword_reprs(rest)}
    return {"__class__": class_name, **request}, tail


def literal_tolerant(text: str) -> object | None:
    """A Python literal repr as a value; a dict whose literal as a whole does not read (a non-literal or `inf`
    somewhere inside) is read item by item, keeping the items that do."""
    value = _literal(text)
    if value is not None or not text.startswith("{"):
        return value
    items, _end = _split_top_level(text[1:])
    return {name: literal_tolerant(value_text) for name, value_text, _ in _fields(items, True)}


def _fields(items: list[str], is_dict: bool) -> list[tuple[str, str, object | None]]:
    out: list[tuple[str, str, object | None]] = []
    for item in items:
        if is_dict:
            key_text, sep, value_text = _split_dict_item(item)
            if not sep:
                continue
            name = _literal(key_text)
            if not isinstance(name, str):
                continue
        else:
            name, sep, value_text = item.partition("=")
            name = name.strip()
            if not sep or not name.isidentifier():
                continue
        value_text = value_text.strip()
        out.append((name, value_text, _literal(value_text)))
    return out


def _split_dict_item(item: str) -> tuple[str, str, str]:
    """"'key': value" → ('\\'key\\'', ':', 'value'), honouring quotes in the key."""
    if item[:1] not in "'\"":
        return item.partition(":")
    end = _after_quoted(item, 1, item[0])
    rest = item[end:].lstrip() if end > 0 else ""
    return (item[:end], ":", rest[1:]) if rest.startswith(":") else (item, "", "")
