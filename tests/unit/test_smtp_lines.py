"""The SMTP session's line-length check against its definition: a line (between LFs,
its CR included) of more than 1,000 bytes."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from headwater.inbox.session import _long_line

DEFINITION = re.compile(rb"(?:\A|\n)[^\n]{1001}")
LINES = st.lists(
    st.integers(min_value=0, max_value=1003).map(lambda n: b"x" * n + b"\r\n"), max_size=5
)


@given(lines=LINES, tail=st.integers(min_value=0, max_value=1003))
def test_the_check_finds_exactly_the_long_lines(lines: list[bytes], tail: int) -> None:
    block = b"".join(lines) + b"y" * tail
    assert _long_line(block) == bool(DEFINITION.search(block))


def test_the_bounds() -> None:
    assert not _long_line(b"x" * 999 + b"\r\n" + b"y" * 999 + b"\r\n")
    assert _long_line(b"a\r\n" + b"x" * 1000 + b"\r\n")
    assert _long_line(b"x" * 1001)
