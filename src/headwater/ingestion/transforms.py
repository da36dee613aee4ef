"""A dataset's transform steps (contract section 16): a steps document checked
(`problems`), compiled once per version (`compile_steps`), and run on each record that
passed normalisation and validation (`Steps.run`).

Paths are JSON Pointers (RFC 6901). A step whose path a record lacks does nothing to it.
`hash`, `mask` and `truncate` change strings only. `filter` keeps a record out; `dedupe`
gives the record's digest (an HMAC of its values at the step's keys, under the company's
hash key), which the write claims (`ingestion.dedupe`): a digest claimed within the
window is a duplicate. A dataset has at most one `dedupe` step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson

from headwater.kit.hmac256 import Hmac256

MAX_STEPS = 50
# A dedupe digest keeps the first 128 bits of its HMAC-SHA256: a false match among a
# dataset's 10^12 claims has a chance of about 10^-15.
DIGEST_BYTES = 16
MAX_DEDUPE_KEYS = 5
OPS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # op: (required members, optional members), "op" aside
    "rename": (frozenset({"from", "to"}), frozenset()),
    "drop": (frozenset({"path"}), frozenset()),
    "set": (frozenset({"path", "value"}), frozenset()),
    "hash": (frozenset({"path"}), frozenset({"lowercase"})),
    "mask": (frozenset({"path"}), frozenset({"keep_last", "char"})),
    "truncate": (frozenset({"path", "max_length"}), frozenset()),
    "filter": (frozenset({"path"}), frozenset({"equals", "in"})),
    "dedupe": (frozenset({"keys"}), frozenset({"window_hours"})),
}

Problem = dict[str, Any]


class PointerError(ValueError):
    pass


def pointer(text: Any) -> tuple[str, ...]:
    """The reference tokens of a JSON Pointer to a member (not the whole record)."""
    if not isinstance(text, str):
        raise PointerError("must be a JSON Pointer string, such as /email")
    if not text.startswith("/"):
        raise PointerError("must start with / (a JSON Pointer to a member)")
    tokens = text[1:].split("/")
    for token in tokens:
        rest = token.replace("~0", "").replace("~1", "")
        if "~" in rest:
            raise PointerError("~ must be followed by 0 or 1 (RFC 6901)")
    return tuple(token.replace("~1", "/").replace("~0", "~") for token in tokens)


# --- the document's check -----------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _step_problems(step: Any) -> list[tuple[str, str]]:
    """(member, message) for each problem of one step."""
    if not isinstance(step, dict):
        return [("", "a step must be an object with an op")]
    op = step.get("op")
    if op not in OPS:
        return [("/op", f"unknown op {op!r}; one of {', '.join(OPS)}")]
    required, optional = OPS[op]
    found = [(f"/{name}", "required") for name in sorted(required - step.keys())]
    found += [
        (f"/{name}", f"unknown member of a {op} step")
        for name in step
        if name != "op" and name not in required | optional
    ]
    for name in ("path", "from", "to"):
        if name in step and name in required:
            try:
                pointer(step[name])
            except PointerError as exc:
                found.append((f"/{name}", str(exc)))
    if op == "hash" and not isinstance(step.get("lowercase", False), bool):
        found.append(("/lowercase", "must be true or false"))
    if op == "mask":
        keep = step.get("keep_last", 4)
        if not _is_int(keep) or not 0 <= keep <= 8:
            found.append(("/keep_last", "must be an integer from 0 to 8"))
        char = step.get("char", "*")
        if not isinstance(char, str) or len(char) != 1:
            found.append(("/char", "must be one character"))
    limit = step.get("max_length", 1)
    if op == "truncate" and (not _is_int(limit) or limit < 1):
        found.append(("/max_length", "must be an integer of at least 1"))
    if op == "filter":
        if ("equals" in step) == ("in" in step):
            found.append(("", "a filter step takes one of equals or in"))
        elif "in" in step and not isinstance(step["in"], list):
            found.append(("/in", "must be an array of values"))
    if op == "dedupe":
        found += _dedupe_problems(step)
    return found


def _dedupe_problems(step: dict[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    keys = step.get("keys")
    if "keys" in step:
        if not isinstance(keys, list) or not 1 <= len(keys) <= MAX_DEDUPE_KEYS:
            found.append(("/keys", f"must be an array of 1 to {MAX_DEDUPE_KEYS} JSON Pointers"))
        else:
            for index, key in enumerate(keys):
                try:
                    pointer(key)
                except PointerError as exc:
                    found.append((f"/keys/{index}", str(exc)))
    window = step.get("window_hours", 24)
    if not _is_int(window) or not 1 <= window <= 720:
        found.append(("/window_hours", "must be an integer from 1 to 720"))
    return found


def problems(steps: Any) -> list[Problem]:
    """Every problem of a steps document, each with its step's index (none: it may be
    stored)."""
    if not isinstance(steps, list):
        return [{"field": "/steps", "message": "must be an array of steps"}]
    if len(steps) > MAX_STEPS:
        return [
            {"field": "/steps", "message": f"{len(steps)} steps; at most {MAX_STEPS} are allowed"}
        ]
    found: list[Problem] = []
    dedupes = 0
    for index, step in enumerate(steps):
        for member, message in _step_problems(step):
            found.append({"field": f"/steps/{index}{member}", "step": index, "message": message})
        if isinstance(step, dict) and step.get("op") == "dedupe":
            dedupes += 1
            if dedupes == 2:
                found.append(
                    {
                        "field": f"/steps/{index}",
                        "step": index,
                        "message": "a dataset has at most one dedupe step",
                    }
                )
    return found


# --- running ------------------------------------------------------------------------------
#
# Steps never change the record they are given (a push may be judged twice: on the event
# loop, then on a thread): `Steps.run` copies the record's top level, and an op that
# changes a nested member copies each container on its way there first (`_writable`).
# `owned` holds the ids of the containers copied for this run.


_MISSING = object()


def _child(node: Any, token: str) -> Any:
    if isinstance(node, dict):
        return node.get(token, _MISSING)
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    return _MISSING


def _key(node: Any, token: str) -> Any:
    """`token` as a key of `node`: a member name, or an array's index (None: out)."""
    if isinstance(node, dict):
        return token
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return int(token)
    return None


def _value(record: Any, tokens: tuple[str, ...]) -> Any:
    """The value at `tokens`, or `_MISSING`."""
    node = record
    for token in tokens:
        node = _child(node, token)
        if node is _MISSING:
            return _MISSING
    return node


def _writable(
    record: dict[str, Any], tokens: tuple[str, ...], owned: set[int], *, make: bool
) -> Any:
    """The container of the member at `tokens`, copied for this run where it was not
    yet (and, with `make`, missing objects made on the way); None where the way is
    blocked."""
    node: Any = record
    for token in tokens[:-1]:
        child = _child(node, token)
        if child is _MISSING:
            if not make or not isinstance(node, dict):
                return None
            child = {}
        elif not isinstance(child, (dict, list)):
            return None
        elif id(child) not in owned:
            child = dict(child) if isinstance(child, dict) else list(child)
        else:
            node = child
            continue
        owned.add(id(child))
        node[_key(node, token)] = child
        node = child
    return node


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0, objects and arrays member by member."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# An op: changes the record (its own copy, `owned`), answers False to keep it out.
Op = Callable[[dict[str, Any], set[int]], bool]


def _string_op(tokens: tuple[str, ...], change: Callable[[str], str]) -> Op:
    if len(tokens) == 1:  # a top-level member: the record's own copy, no walk
        (name,) = tokens

        def top(record: dict[str, Any], owned: set[int]) -> bool:
            value = record.get(name)
            if type(value) is str:
                record[name] = change(value)
            return True

        return top

    def run(record: dict[str, Any], owned: set[int]) -> bool:
        value = _value(record, tokens)
        if isinstance(value, str):
            node = _writable(record, tokens, owned, make=False)
            if node is not None:
                node[_key(node, tokens[-1])] = change(value)
        return True

    return run


def _put(record: dict[str, Any], tokens: tuple[str, ...], value: Any, owned: set[int]) -> None:
    node = _writable(record, tokens, owned, make=True)
    if node is not None:
        key = _key(node, tokens[-1])
        if key is not None:
            node[key] = value


def _rename(source: tuple[str, ...], target: tuple[str, ...]) -> Op:
    if len(source) == 1 and len(target) == 1 and source != target:
        (old,), (new,) = source, target

        def top(record: dict[str, Any], owned: set[int]) -> bool:
            if old in record:
                record[new] = record.pop(old)
            return True

        return top

    def run(record: dict[str, Any], owned: set[int]) -> bool:
        value = _value(record, source)
        if value is _MISSING or source == target:
            return True
        node = _writable(record, source, owned, make=False)
        if isinstance(node, dict):
            del node[source[-1]]
        _put(record, target, value, owned)
        return True

    return run


def _drop(tokens: tuple[str, ...]) -> Op:
    if len(tokens) == 1:
        (name,) = tokens

        def top(record: dict[str, Any], owned: set[int]) -> bool:
            record.pop(name, None)
            return True

        return top

    def run(record: dict[str, Any], owned: set[int]) -> bool:
        if _value(record, tokens) is not _MISSING:
            node = _writable(record, tokens, owned, make=False)
            if isinstance(node, dict):
                del node[tokens[-1]]
        return True

    return run


def _set(tokens: tuple[str, ...], value: Any) -> Op:
    encoded = orjson.dumps(value)
    plain = not isinstance(value, (dict, list))

    def run(record: dict[str, Any], owned: set[int]) -> bool:
        # a fresh copy each time: records never share a mutable value
        _put(record, tokens, value if plain else orjson.loads(encoded), owned)
        return True

    if len(tokens) == 1 and plain:
        (name,) = tokens

        def top(record: dict[str, Any], owned: set[int]) -> bool:
            record[name] = value
            return True

        return top

    return run


def _filter(tokens: tuple[str, ...], values: Sequence[Any]) -> Op:
    def run(record: dict[str, Any], owned: set[int]) -> bool:
        value = _value(record, tokens)
        return value is _MISSING or not any(_same(value, candidate) for candidate in values)

    return run


def _mask(keep_last: int, char: str) -> Callable[[str], str]:
    def change(value: str) -> str:
        hidden = len(value) - keep_last
        return value if hidden <= 0 else char * hidden + value[hidden:]

    return change


@dataclass(frozen=True, slots=True)
class Dedupe:
    """The dataset's `dedupe` step: its position among the ops, keys and window."""

    index: int
    keys: tuple[tuple[str, ...], ...]
    window: timedelta
    salt: bytes  # the keys' pointers: a digest under other keys is another digest


class Steps:
    """A transform version's steps, compiled with the company's hash key."""

    def __init__(self, version: int, steps: Sequence[dict[str, Any]], key: bytes) -> None:
        self.version = version
        # keyed once, for each value hashed and each digest
        self._mac = Hmac256(key)
        self.dedupe: Dedupe | None = None
        self._ops: list[Op] = []
        for step in steps:
            self._ops.append(self._compile(step))
        # whether an op may change a record: with `filter` and `dedupe` alone, a record
        # is kept as it came (no copy), and its JSON text with it
        self.changes = any(step["op"] not in ("filter", "dedupe") for step in steps)

    def _compile(self, step: dict[str, Any]) -> Op:
        op = step["op"]
        if op == "rename":
            return _rename(pointer(step["from"]), pointer(step["to"]))
        if op == "dedupe":
            keys = tuple(pointer(key) for key in step["keys"])
            self.dedupe = Dedupe(
                index=len(self._ops),
                keys=keys,
                window=timedelta(hours=step.get("window_hours", 24)),
                salt=orjson.dumps(step["keys"]),
            )
            return lambda record, owned: True
        tokens = pointer(step["path"])
        if op == "drop":
            return _drop(tokens)
        if op == "set":
            return _set(tokens, step["value"])
        if op == "filter":
            return _filter(tokens, [step["equals"]] if "equals" in step else step["in"])
        if op == "truncate":
            limit = step["max_length"]
            return _string_op(tokens, lambda value: value[:limit])
        if op == "mask":
            return _string_op(tokens, _mask(step.get("keep_last", 4), step.get("char", "*")))
        mac = self._mac.hex  # HMAC-SHA256 of the value's UTF-8 bytes, in hex
        if step.get("lowercase", False):
            return _string_op(tokens, lambda value: mac(value.lower().encode()))
        return _string_op(tokens, lambda value: mac(value.encode()))

    def run(self, record: dict[str, Any]) -> tuple[dict[str, Any] | None, bytes | None]:
        """The record's output (None: a filter kept it out; a copy where an op may
        change it, `record` itself otherwise: `record` is left as it was) and its dedupe
        digest (None: no dedupe step, or the record lacks one of its keys)."""
        output = dict(record) if self.changes else record
        owned = {id(output)}
        dedupe = self.dedupe
        if dedupe is None:
            for op in self._ops:
                if not op(output, owned):
                    return None, None
            return output, None
        digest = None
        for index, op in enumerate(self._ops):
            if index == dedupe.index:
                digest = self._digest(output, dedupe)
            elif not op(output, owned):
                return None, None
        return output, digest

    def _digest(self, record: dict[str, Any], dedupe: Dedupe) -> bytes | None:
        values = []
        for tokens in dedupe.keys:
            value = _value(record, tokens)
            if value is _MISSING:
                return None
            values.append(value)
        message = dedupe.salt + b"\n" + orjson.dumps(values, option=orjson.OPT_SORT_KEYS)
        return self._mac(message)[:DIGEST_BYTES]


def compile_steps(version: int, steps: Sequence[dict[str, Any]], key: bytes) -> Steps | None:
    """A version's steps, ready to run; None for a version without steps."""
    return Steps(version, steps, key) if steps else None
