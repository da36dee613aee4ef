"""The subject digest (`ingestion.subjects`): an HMAC-SHA256 under the company's key,
the same by every path that computes it."""

from __future__ import annotations

import hmac
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from headwater.ingestion import transforms
from headwater.ingestion.subjects import Subjects, digests

KEY = b"k" * 32
values = st.one_of(st.text(), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False))
records = st.lists(
    st.one_of(st.dictionaries(st.sampled_from(["email", "id", "x"]), values), st.just([1])),
    max_size=20,
)


@given(records)
def test_a_batch_digests_each_record_as_one_at_a_time_does(batch: list[Any]) -> None:
    subjects = Subjects(("email",), KEY)
    assert subjects.each(batch) == [subjects.of(record) for record in batch]


def test_the_digest_is_the_hmac_of_the_value_and_names_hashed_forms_too() -> None:
    subjects = Subjects(("email",), KEY)
    expected = hmac.digest(KEY, b"subject\nada@example.com", "sha256")[: transforms.DIGEST_BYTES]
    assert subjects.of({"email": "ada@example.com"}) == expected
    assert subjects.of({"email": 42}) == subjects.digest("42")
    assert subjects.of({"email": True}) is None and subjects.of({}) is None
    hashed = transforms.compile_steps(0, [{"op": "hash", "path": "/email"}], KEY)
    assert hashed is not None
    output, _ = hashed.run({"email": "ada@example.com"})
    assert output is not None
    assert subjects.of(output) in digests(KEY, ["ada@example.com"])
    assert len(digests(KEY, ["ada@example.com", "ada@example.com"])) == 2  # lower already
    assert len(digests(KEY, ["Ada@Example.com"])) == 3
    long_key = Subjects((), b"x" * 100)
    assert long_key.digest("ada") == hmac.digest(b"x" * 100, b"subject\nada", "sha256")[:16]
