"""A tolerant reader for SGLang's `server_args=…` dump.

≤0.5.18 logs `server_args=ServerArgs(model_path='…', tp_size=2, …)` (a dataclass repr); 0.5.23 logs a dict repr
`server_args={'model_path': '…', …}`. Values are Python reprs: strings with nested quotes, lists, dicts, None,
`inf`, and non-literals such as `<object at 0x7f…>`. Log shippers truncate long lines, so the text may stop anywhere.
"""

from __future__ import annotations

import ast
import math
import re

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = set(_OPEN.values())


def _split_top_level(body: str) -> tuple[list[str], int | None]:
    """Split on ', ' at nesting depth 0 outside quotes. Returns the items and the index of the bracket that closed
    the body (None when the text ran out first: it was truncated)."""
    items: list[str] = []
    depth: list[str] = []
    quote: str | None = None
    start = 0
    i = 0
    n = len(body)
    while i < n:
        ch = body[i]
        if quote is not None:
            if ch == "\\":
                i += 2
                continue
            if body.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
            i += 1
            continue
        if ch in "'\"":
            quote = body[i : i + 3] if body.startswith(ch * 3, i) else ch
            i += len(quote)
            continue
        if ch in _OPEN:
            depth.append(_OPEN[ch])
        elif ch in _CLOSE:
            if not depth:
                items.append(body[start:i])
                return [s for s in (x.strip() for x in items) if s], i
            if depth[-1] == ch:
                depth.pop()
        elif ch == "," and not depth:
            items.append(body[start:i])
            start = i + 1
        i += 1
    # Ran off the end: the text was truncated; the last item may be cut, drop it.
    return [s for s in (x.strip() for x in items) if s], None


# The shapes most values have (None, True, 8192, 0.88, 'auto'), read without ast.literal_eval: it compiles the text
# (~10 µs) and leaves a reference cycle of ~11 objects a call, which the ingest (cyclic GC off) frees only once a chunk.
# Each shape is one whose literal_eval value is exactly this; anything else goes to literal_eval.
_CONSTANTS = {"None": None, "True": True, "False": False}
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?[0-9]{1,20}\.[0-9]{1,20}")


def _literal(text: str) -> object | None:
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
    if item[:1] in "'\"":
        q = item[0]
        i = 1
        while i < len(item):
            if item[i] == "\\":
                i += 2
                continue
            if item[i] == q:
                break
            i += 1
        rest = item[i + 1 :]
        if rest.lstrip().startswith(":"):
            return item[: i + 1], ":", rest.lstrip()[1:]
        return item, "", ""
    key, sep, value = item.partition(":")
    return key, sep, value
