"""Strict JSON: what it refuses, and that what it accepts parses as the standard library does."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.kit import strictjson
from headwater.kit.strictjson import StrictJSONError, loads

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=strictjson.INT_MIN, max_value=strictjson.INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_accepts_what_json_writes(value: Any) -> None:
    assert loads(json.dumps(value).encode()) == value


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"a": 1, "a": 2}', "duplicate object member 'a'"),
        (b'{"x": {"b": 1, "b": 1}}', "duplicate object member 'b'"),
        (b'{"a": NaN}', "NaN is not a JSON value"),
        (b'{"a": Infinity}', "Infinity is not a JSON value"),
        (b'{"a": -Infinity}', "-Infinity is not a JSON value"),
        (b'{"a": 1e400}', "too large for a double"),
        (b'{"a": 9223372036854775808}', "out of the 64-bit range"),
        (b'{"a": -9223372036854775809}', "out of the 64-bit range"),
        (b'{"a": ' + b"9" * 5000 + b"}", "out of the 64-bit range"),
        (b'{"a": "\xff"}', "not valid UTF-8"),
        (b'{"a": "\\ud800"}', "lone UTF-16 surrogate"),
        (b'{"a": 1', "Expecting"),
        (b"", "Expecting value"),
        (b"\xef\xbb\xbf{}", "BOM"),
        (b"[" * 33 + b"]" * 33, "deeper than 32 levels"),
        (b"[" * 100_000 + b"]" * 100_000, "deeper than 32 levels"),
    ],
)
def test_refuses(body: bytes, says: str) -> None:
    with pytest.raises(StrictJSONError) as info:
        loads(body)
    assert says in info.value.message


def test_depth_limit_is_inclusive() -> None:
    assert loads(b"[" * 32 + b"]" * 32) is not None
    assert strictjson.depth([[{"a": [1]}]]) == 4
    assert strictjson.depth(7) == 0


def test_valid_surrogate_pairs_and_extremes_pass() -> None:
    assert loads(b'{"e": "\\ud83d\\ude00"}') == {"e": "\U0001f600"}
    assert loads(b"[9223372036854775807, -9223372036854775808, 1.7e308]") == [
        2**63 - 1,
        -(2**63),
        1.7e308,
    ]


def test_position_of_bad_utf8() -> None:
    with pytest.raises(StrictJSONError) as info:
        loads(b'{"ab": "\xc3\x28"}')
    assert info.value.position == 8


@given(json_values)
def test_depth_from_bytes_matches_the_walk(value: Any) -> None:
    body = json.dumps(value).encode()
    if b'\\"' not in body:  # an escaped quote leaves the quotes unpaired: the walk decides
        structure = strictjson._structure(body).replace(b"\\", b"")
        assert strictjson._bracket_depth(structure) == strictjson.depth(value)


def test_brackets_inside_strings_do_not_count() -> None:
    assert loads(b'{"a": "' + b"[" * 100 + b'"}') == {"a": "[" * 100}
    assert loads(b'{"a": "\\"' + b"[" * 100 + b'"}') == {"a": '"' + "[" * 100}
    with pytest.raises(StrictJSONError):
        loads(b'{"a": "\\"]]]]", "b": ' + b"[" * 40 + b"]" * 40 + b"}")


@pytest.mark.parametrize(
    ("body", "deep"),
    [
        (b"[" * 32 + b"]" * 32, False),  # exactly the limit
        (b"[" * 33 + b"]" * 33, True),
        (b'{"a":' * 32 + b"1" + b"}" * 32, False),
        (b'{"a":' * 33 + b"1" + b"}" * 33, True),
        # more brackets than the limit, but inside strings: the count says "maybe", the
        # walk says no
        (b'{"s": "' + b"[{" * 40 + b'"}', False),
        (b'{"s": "\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', False),
        # brackets in strings and real depth over the limit
        (b'[{"s": "' + b"[" * 40 + b'"}, ' + b"[" * 32 + b"]" * 32 + b"]", True),
    ],
)
def test_depth_limit_counts_structure_not_strings(body: bytes, deep: bool) -> None:
    if deep:
        with pytest.raises(StrictJSONError, match="deeper than 32 levels"):
            loads(body, max_depth=32)
    else:
        assert loads(body, max_depth=32) is not None


bracket_heavy = st.recursive(
    st.integers(0, 9) | st.text(alphabet='[]{}"\\:,a', max_size=6),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"a', max_size=3), children, max_size=3)
    ),
    max_leaves=12,
)


@given(bracket_heavy, st.integers(min_value=0, max_value=6))
def test_refuses_exactly_what_nests_deeper_than_the_limit(value: Any, limit: int) -> None:
    body = json.dumps(value, ensure_ascii=False).encode()
    if strictjson.depth(value) > limit:
        with pytest.raises(StrictJSONError, match=f"deeper than {limit} levels"):
            loads(body, max_depth=limit)
    else:
        assert loads(body, max_depth=limit) == value


def _quick(body: bytes) -> Any:
    """The quick path as `loads` takes it: a body with an escaped quote goes straight to
    the strict parser."""
    if b'\\"' in body:
        return strictjson._UNSURE
    return strictjson._quick(body, strictjson._structure(body))


def _typed(value: Any) -> str:
    """`value` written with its types told apart (1 and 1.0, 0 and -0.0, member order)."""
    return json.dumps(value)


@given(json_values)
def test_the_quick_path_answers_as_the_strict_parser(value: Any) -> None:
    for body in (json.dumps(value).encode(), json.dumps(value, ensure_ascii=False).encode()):
        quick = _quick(body)
        if quick is not strictjson._UNSURE:
            assert _typed(quick) == _typed(strictjson._strict(body, strictjson.MAX_DEPTH))


def test_the_quick_path_takes_plain_records() -> None:
    body = json.dumps(
        {"id": "evt-1", "n": [1, 2.5, -0.0, None, True], "at": "2026-11-22T09:30:00Z", "é": "\n"}
    ).encode()
    assert _quick(body) == json.loads(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": 1, "a": 2}',
        b'{"a": "x", "b": {"c": [1, {"d": 1, "d": 1}]}}',
        # a duplicate whose lost quotes are made up by a kept value's decoded quotes
        b'{"a": 1, "a": "\\u0022\\u0022"}',
        b'{"a": "\\"", "a": 1}',
        b"[18446744073709551616]",
        b"[9223372036854775808]",
        b"[-9223372036854775809]",
        b"[1234567890123456789.5]",
        b'["\\ud800"]',
        b"[1e400]",
        b"[NaN]",
        b"\xef\xbb\xbf{}",
        b'{"a": "\xff"}',
        b'{"a": 1} x',
    ],
)
def test_what_the_quick_path_cannot_vouch_for_goes_to_the_strict_parser(body: bytes) -> None:
    assert _quick(body) is strictjson._UNSURE
    try:
        expected: Any = strictjson._strict(body, strictjson.MAX_DEPTH)
    except StrictJSONError as exc:
        with pytest.raises(StrictJSONError, match=re.escape(exc.message)):
            loads(body)
    else:
        assert _typed(loads(body)) == _typed(expected)


@given(
    st.lists(
        st.tuples(st.text(alphabet='ab"\\', max_size=2), json_values | st.text(alphabet='"\\x')),
        max_size=5,
    ),
    st.booleans(),
)
def test_refuses_every_duplicate_member(members: list[tuple[str, Any]], ascii_only: bool) -> None:
    body = (
        "{"
        + ", ".join(
            f"{json.dumps(k, ensure_ascii=ascii_only)}: {json.dumps(v, ensure_ascii=ascii_only)}"
            for k, v in members
        )
        + "}"
    ).encode()
    names = [k for k, _ in members]
    if len(set(names)) < len(names):
        with pytest.raises(StrictJSONError, match="duplicate object member"):
            loads(body)
    else:
        assert _typed(loads(body)) == _typed(dict(members))
