"""A tolerant reader of the Python reprs SGLang logs: the `server_args=…` dump (`ServerArgs(a=1, …)` up to 0.5.18, a
dict repr in 0.5.23) and the `--log-requests` lines (`Receive: obj=GenerateReqInput(rid='…', …)`, `Finish: obj=…,
out={'meta_info': {…}}`). Values may be non-literals (`<object at 0x7f…>`, `inf`) and a shipper may cut the line
anywhere: a body is split at its top-level commas, and each value read by a few plain shapes, json, else
ast.literal_eval.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings

_OPEN = {"(": ")", "[": "]", "{": "}"}
_SPECIAL = re.compile(r"['\"()\[\]{},]")  # what can change the nesting or end an item: the scan jumps from one to the next


def _split_top_level(body: str) -> tuple[list[str], int | None]:
    """The stripped, non-empty items between commas at depth 0 outside quotes, and the index of the bracket that closed
    the body (None when the text ran out first: it was cut, and its cut last item is dropped)."""
    items: list[str] = []
    depth: list[str] = []
    start = i = 0
    while (found := _SPECIAL.search(body, i)) is not None:
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
        elif ch == ",":
            if not depth:
                items.append(body[start:i])
                start = i + 1
        elif not depth:  # the bracket that closes the body
            items.append(body[start:i])
            return [s for s in (x.strip() for x in items) if s], i
        elif depth[-1] == ch:
            depth.pop()
        i += 1
    return [s for s in (x.strip() for x in items) if s], None


def _after_quoted(body: str, i: int, quote: str) -> int:
    """Index after the quote that closes a string whose text starts at `i`; -1 when the text ends first."""
    while (end := body.find(quote, i)) >= 0:
        escapes = end
        while escapes > i and body[escapes - 1] == "\\":
            escapes -= 1
        if (end - escapes) % 2 == 0:
            return end + len(quote)
        i = end + 1
    return -1


# The shapes most values have are read without ast.literal_eval, which leaves a reference cycle a call (the ingest runs
# with the cyclic GC off). Each is a shape whose literal_eval value is exactly this. A dict / list repr whose strings
# have no escapes nor double quotes and whose other tokens are JSON's is JSON once its quotes and constants are swapped;
# anything json.loads might read differently (a tab in a string, a trailing comma, NaN) fails or is refused.
_CONSTANTS = {"None": None, "True": True, "False": False}
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?[0-9]{1,20}\.[0-9]{1,20}")
_REPR_TOKEN = re.compile(r"'[^'\\\"]*'|None|True|False")
_JSON_OUTSIDE_STRINGS = re.compile(r"[\s0-9.eE+\-{}\[\]:,]*")
_TO_JSON = {"None": "null", "True": "true", "False": "false"}


def _refuse(name: str) -> None:
    raise ValueError(name)  # NaN / Infinity: JSON words, not Python literals


_JSON = json.JSONDecoder(parse_constant=_refuse)


def _literal(text: str) -> object | None:
    """The value of a literal repr; None when it is none (or not finite)."""
    if text[:1] in ("{", "[") and '"' not in text and "\\" not in text and _JSON_OUTSIDE_STRINGS.fullmatch(_REPR_TOKEN.sub("", text)):
        try:
            return _JSON.decode(_REPR_TOKEN.sub(lambda m: _TO_JSON.get(m[0]) or f'"{m[0][1:-1]}"', text))
        except ValueError:
            pass
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    inner = text[1:-1]
    if len(text) >= 2 and text[0] in "'\"" and text[-1] == text[0] and text[0] not in inner and "\\" not in inner and inner.isprintable():
        return inner
    try:
        with warnings.catch_warnings():  # '1.e' or a bad escape would print a warning on stderr
            warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return None if isinstance(value, float) and not math.isfinite(value) else value


def parse_server_args(text: str) -> list[tuple[str, str, object | None]]:
    """'ServerArgs(a=1, b='x', …)' or "{'a': 1, …}" → [(name, repr_text, python_value_or_None), …]; never raises: a
    non-literal value gives None, a cut dump the items before the cut."""
    s = text.strip()
    s = s[s.find("server_args=") + len("server_args="):] if "server_args=" in s else s
    if s.startswith("ServerArgs("):
        return _fields(_split_top_level(s[len("ServerArgs("):])[0], False)
    return _fields(_split_top_level(s[1:])[0], True) if s.startswith("{") else []


def parse_request_repr(body: str) -> tuple[dict, dict]:
    """A `--log-requests` line after `Receive: obj=` / `Finish: obj=`: "GenerateReqInput(rid='a', n=1), out={…}" →
    ({'__class__': 'GenerateReqInput', 'rid': 'a', 'n': 1}, {'out': {…}}): the call's fields (a non-literal as its
    text) and the keyword items after it, read tolerantly; a body that is not `Name(…` is keyword items alone."""
    s = body.lstrip()
    head = s.find("(")
    if head <= 0 or not s[:head].isidentifier():
        return {}, _keywords(body)
    items, end = _split_top_level(s[head + 1:])
    request = {name: value if value is not None or text == "None" else text for name, text, value in _fields(items, False)}
    return {"__class__": s[:head], **request}, _keywords("" if end is None else s[head + end + 2:])


def _keywords(text: str) -> dict:
    """", headers={…}, out={…}" → {name: value}; a cut last item is dropped."""
    return {name: value for name, _, value in _fields(_split_top_level(text.strip().lstrip(",") + ")")[0], False, literal_tolerant)}


def literal_tolerant(text: str) -> object | None:
    """A literal repr as a value; a dict that does not read as a whole (a non-literal or `inf` inside) is read item by
    item, keeping the items that do."""
    value = _literal(text)
    if value is not None or not text.startswith("{"):
        return value
    return {name: value for name, _, value in _fields(_split_top_level(text[1:])[0], True, literal_tolerant)}


def _fields(items: list[str], is_dict: bool, read=_literal) -> list[tuple[str, str, object | None]]:
    """`name=value` (or `'key': value`) items → (name, value_text, read(value_text)); an item without one is left out."""
    out: list[tuple[str, str, object | None]] = []
    for item in items:
        if not is_dict:
            name, sep, value_text = item.partition("=")
            name = name.strip()
            if not sep or not name.isidentifier():
                continue
        elif item[:1] in "'\"":  # a quoted key may hold ':'
            end = _after_quoted(item, 1, item[0])
            name, value_text = (_literal(item[:end]), item[end:].lstrip()) if end > 0 else (None, "")
            if not value_text.startswith(":") or not isinstance(name, str):
                continue
            value_text = value_text[1:]
        else:
            name, sep, value_text = item.partition(":")
            name = _literal(name)
            if not sep or not isinstance(name, str):
                continue
        value_text = value_text.strip()
        out.append((name, value_text, read(value_text)))
    return out
