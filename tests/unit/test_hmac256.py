"""`kit.hmac256.Hmac256` is HMAC-SHA256 as the standard library computes it: the hash
step's values, dedupe digests and subjects' digests stored before it must still match."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.kit.hmac256 import Hmac256


@pytest.mark.parametrize("key_length", [0, 1, 32, 63, 64, 65, 100, 200])
@given(prefix=st.binary(max_size=80), message=st.binary(max_size=300))
def test_it_is_the_standard_librarys_hmac_sha256(
    key_length: int, prefix: bytes, message: bytes
) -> None:
    key = bytes(range(256))[:key_length]
    expected = hmac.new(key, prefix + message, hashlib.sha256)
    assert Hmac256(key, prefix)(message) == expected.digest()
    assert Hmac256(key, prefix).hex(message) == expected.hexdigest()
    assert Hmac256(key, prefix, 16)(message) == expected.digest()[:16]


def test_one_instance_answers_each_message_on_its_own() -> None:
    mac = Hmac256(b"k" * 32)
    first = mac(b"a")
    assert mac(b"b") != first
    assert mac(b"a") == first  # no state carried from one message to the next
