"""Strict JSON: what RFC 8259 allows and every consumer reads the same way, nothing more.

Python's own parser accepts duplicate keys (the last wins), `NaN` and `Infinity`, numbers
no database column can hold (`1e400` becomes infinity) and lone UTF-16 surrogates; a
record that means different things to different readers must not be stored. `loads`
refuses all of those, invalid UTF-8, and nesting deeper than `MAX_DEPTH`. It parses with
orjson where that is certainly the same answer (most bodies, and several times faster),
else with the standard library made strict by hooks.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from itertools import accumulate
from typing import Any

import orjson

MAX_DEPTH = 32
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


class StrictJSONError(ValueError):
    """Why a document is refused; `position` is a byte offset when one is known.
    `keyword` is `depth` for nesting past the limit, else `json`."""

    def __init__(self, message: str, *, position: int | None = None, keyword: str = "json") -> None:
        super().__init__(message)
        self.message = message
        self.position = position
        self.keyword = keyword


def too_deep(max_depth: int) -> StrictJSONError:
    return StrictJSONError(f"nesting is deeper than {max_depth} levels", keyword="depth")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError(f"duplicate object member {key!r}")
            seen.add(key)
    return obj


def _constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not a JSON value")


def _integer(text: str) -> int:
    if len(text) > 20:
        raise StrictJSONError(f"integer {text[:24]}... is out of the 64-bit range")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise StrictJSONError(f"integer {text} is out of the 64-bit range")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"number {text[:24]} is too large for a double")
    return value


_decoder = json.JSONDecoder(
    object_pairs_hook=_object, parse_constant=_constant, parse_int=_integer, parse_float=_float
)


def depth(value: Any, *, stop_after: int = MAX_DEPTH) -> int:
    """How deeply arrays and objects nest in `value` (a scalar is 0); stops counting once
    past `stop_after`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        if level > stop_after:
            return level
        stack.extend((child, level) for child in children if isinstance(child, dict | list))
    return deepest


# What `loads` reads of a body's bytes after parsing it: quotes, brackets and backslashes.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}\\')
_STRING = re.compile(rb'"[^"]*"')
# opening brackets to 1 and closing ones to -1 (as signed bytes)
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def _structure(body: bytes) -> bytes:
    """The body's quotes, brackets and backslashes, in order: one C-speed pass over a
    body of any size, leaving a few bytes a record."""
    return body.translate(None, _NOT_STRUCTURE)


def _bracket_depth(structure: bytes) -> int:
    """The nesting depth of a document from its `_structure` without backslashes, which
    must hold no escaped quote (its quotes alternate: each string's opening and closing).

    Strings go first: adjacent quotes (an empty string, or one's end and the next's start
    with no bracket between) are dropped in one C-speed step, which keeps the alternation,
    and a regex removes the few strings that hold brackets. The depth is then the largest
    running sum of +1 per opening bracket and -1 per closing one.
    """
    brackets = _STRING.sub(b"", structure.replace(b'""', b""))
    return max(accumulate(memoryview(brackets.translate(_STEPS)).cast("b")), default=0)


# digits to "1" and every other byte to "0": a run of 19 ones is a number (or digits in a
# string) that only the strict parser can judge
_DIGIT_MAP = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_DIGITS = b"1" * 19
_UNSURE: Any = object()


def loads(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse `body` or raise StrictJSONError saying what is wrong and where.

    orjson parses first, several times faster than the standard library with the hooks
    that make it strict; its value is kept when it is certainly the strict parser's
    (`_quick`). Otherwise the strict parser decides, and says what is wrong.
    """
    structure = _structure(body)
    escapes = b"\\" in structure
    escaped_quote = escapes and b'\\"' in body
    if escapes:
        structure = structure.replace(b"\\", b"")
    # No deeper than it has brackets: most bodies are told apart by two counts. Without an
    # escaped quote the depth is told before parsing, so a deep body costs no parse at all.
    deep = structure.count(b"[") + structure.count(b"{") > max_depth
    if deep and not escaped_quote and _bracket_depth(structure) > max_depth:
        raise too_deep(max_depth)
    value = _UNSURE if escaped_quote else _quick(body, structure)
    if value is _UNSURE:
        value = _strict(body, max_depth)
    # with an escaped quote, the quotes do not alternate: only a walk can tell
    if deep and escaped_quote and depth(value, stop_after=max_depth) > max_depth:
        raise too_deep(max_depth)
    return value


def _quick(body: bytes, structure: bytes) -> Any:
    """orjson's value of `body`, which holds no escaped quote (`loads` leaves those to the
    strict parser), when it is the strict parser's; else `_UNSURE`.

    orjson refuses what strict JSON refuses (invalid UTF-8, a BOM, NaN and Infinity,
    numbers that overflow a double, lone surrogates), except for two things it accepts:
    integers beyond 64 bits (it makes them floats) and duplicate members (the last
    wins). A body is left to the strict parser when it has a run of 19 digits anywhere.
    Without escaped quotes, every quote of the body and of orjson's own writing of the
    value delimits a string, and a member dropped as a duplicate takes at least its
    name's string away: equal quote counts mean none was.
    """
    if _LONG_DIGITS in body.translate(_DIGIT_MAP):
        return _UNSURE
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _UNSURE  # the strict parser says what is wrong
    try:
        written = orjson.dumps(value)
    except orjson.JSONEncodeError:  # nested past orjson's writing limit (254 levels)
        return _UNSURE
    # a backslash first: one byte is found at memchr's speed, the pair is not
    escaped = b"\\" in written and b'\\"' in written
    if escaped or written.count(b'"') != structure.count(b'"'):
        return _UNSURE
    return value


def _strict(body: bytes, max_depth: int) -> Any:
    """The standard library's parser with the hooks that refuse what strict JSON does."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrictJSONError("the body is not valid UTF-8", position=exc.start) from None
    if text.startswith("\ufeff"):
        raise StrictJSONError("the body starts with a byte order mark (BOM)", position=0)
    try:
        value = _decoder.decode(text)
    except StrictJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise StrictJSONError(
            f"{exc.msg} at line {exc.lineno} column {exc.colno}", position=exc.pos
        ) from None
    except RecursionError:
        raise too_deep(max_depth) from None
    except ValueError as exc:  # int() refusing thousands of digits
        raise StrictJSONError(str(exc)) from None
    if _SURROGATE.search(body):
        try:
            orjson.dumps(value)
        except orjson.JSONEncodeError:
            raise StrictJSONError("a string holds a lone UTF-16 surrogate") from None
    return value


_SURROGATE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")


def raw_decode(text: str, pos: int, *, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """The strict JSON value that starts at `text[pos]` and the index where it ends.

    Raises StrictJSONError for what `loads` refuses, and json.JSONDecodeError when the
    text there is not JSON at all (or is cut short: the caller may read on and retry).
    """
    try:
        value, end = _decoder.raw_decode(text, pos)
    except RecursionError:
        raise too_deep(max_depth) from None
    except StrictJSONError:
        raise
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        raise StrictJSONError(str(exc)) from None
    if isinstance(value, dict | list) and depth(value, stop_after=max_depth) > max_depth:
        raise too_deep(max_depth)
    if _SURROGATE_TEXT.search(text, pos, end):
        try:
            orjson.dumps(value)
        except orjson.JSONEncodeError:
            raise StrictJSONError("a string holds a lone UTF-16 surrogate") from None
    return value, end


# --- paths, and U+0000, which no database column stores ------------------------------------


def pointer(parts: Iterable[str | int]) -> str:
    """A JSON Pointer (RFC 6901) to the given path."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def has_nul(value: Any) -> bool:
    """Whether a member name or string anywhere in `value` holds U+0000."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return True
        elif isinstance(node, dict):
            if any("\x00" in key for key in node):
                return True
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return False


def nul_paths(value: Any) -> Iterator[tuple[tuple[str | int, ...], bool]]:
    """Where U+0000 is in `value`, in document order: (path, True) for a member name
    holding it (the path ends at that member), (path, False) for a string."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                yield path, False
        elif isinstance(node, dict):
            children = []
            for key, item in node.items():
                if "\x00" in key:
                    yield (*path, key), True
                children.append((item, (*path, key)))
            stack.extend(reversed(children))
        elif isinstance(node, list):
            stack.extend(reversed([(item, (*path, i)) for i, item in enumerate(node)]))
