"""CSV read in blocks (runs of lines without quotes, split at their commas) gives what
reading it line by line through the csv module gives: the same rows, lines, errors and
the same point where an unreadable file stops."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.files import parsers


def parse(body: bytes) -> Iterator[parsers.Row | parsers.Table]:
    return parsers.rows(
        io.BytesIO(body), "text/csv", max_depth=32, compressed_size=len(body), max_expanded=2**40
    )


def read(body: bytes) -> list[Any]:
    """Every row as (line, data, keyword, message, raw), a `Table`'s rows as the `Row`s
    they stand for, then the `FileUnreadable` that ended the file, if one did."""
    out: list[Any] = []
    try:
        for item in parse(body):
            if isinstance(item, parsers.Table):
                assert len(item.lines) == len(item.rows) > 0
                out.extend(
                    (line, dict(zip(item.header, fields, strict=True)), "", "", None)
                    for line, fields in zip(item.lines, item.rows, strict=True)
                )
            else:
                out.append((item.line, item.data, item.keyword, item.message, item.raw))
    except parsers.FileUnreadable as exc:
        out.append(("unreadable", exc.line, exc.message))
    return out


def line_by_line(body: bytes) -> list[Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parsers, "_plain_block", lambda *_: False)
        return read(body)


def in_blocks(body: bytes, *, chunk: int) -> list[Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parsers, "BLOCK_BYTES", 1)
        patch.setattr(parsers, "CHUNK", chunk)
        return read(body)


FIELDS = st.sampled_from(["a", "b c", "", " x ", "é", "1.5", "\x00", "\u2028", "\t", "z" * 30])
QUOTED = st.sampled_from(['"q"', '"with, comma"', '"two\nlines"', '"two\r\nlines"', 'a"b'])
LINES = st.one_of(
    st.lists(FIELDS, min_size=1, max_size=4).map(",".join),
    st.lists(FIELDS | QUOTED, min_size=1, max_size=4).map(",".join),
    st.just(""),
    st.sampled_from(["\r", "a\rb,c,d"]),
)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(LINES, max_size=40),
    endings=st.lists(st.sampled_from(["\n", "\r\n"]), min_size=40, max_size=40),
    last_newline=st.booleans(),
    bad_byte_at=st.none() | st.integers(0, 39),
    chunk=st.sampled_from([7, 64, 1024]),
)
def test_blocks_read_as_the_csv_module_reads_line_by_line(
    lines: list[str],
    endings: list[str],
    last_newline: bool,
    bad_byte_at: int | None,
    chunk: int,
) -> None:
    body = "a,b,c,d\n" + "".join(line + end for line, end in zip(lines, endings, strict=False))
    if not last_newline:
        body = body.rstrip("\r\n")
    raw = body.encode()
    if bad_byte_at is not None and bad_byte_at < len(lines):
        at = raw.find(lines[bad_byte_at].encode()) if lines[bad_byte_at] else -1
        if at > 8:
            raw = raw[:at] + b"\xff" + raw[at:]
    assert in_blocks(raw, chunk=chunk) == line_by_line(raw)


def test_a_large_unquoted_file_comes_in_blocks_with_its_lines() -> None:
    rows = [f"{i},name {i},{i % 7}" for i in range(20_000)]
    rows[5000] = ""  # a blank line: skipped, and the lines after it keep their numbers
    rows[12_000] = "short,row"
    body = ("id,name,n\r\n" + "\r\n".join(rows) + "\r\n").encode()
    items = list(parse(body))
    tables = [item for item in items if isinstance(item, parsers.Table)]
    assert max(len(table.rows) for table in tables) == parsers.TABLE_ROWS
    lines = {fields[0]: line for t in tables for line, fields in zip(t.lines, t.rows, strict=True)}
    assert len(lines) == 20_000 - 2
    assert lines["0"] == 2 and lines["4999"] == 5001 and lines["5001"] == 5003
    assert lines["19999"] == 20_001
    (problem,) = [item for item in items if isinstance(item, parsers.Row)]
    assert (problem.line, problem.keyword, problem.raw) == (12_002, "columns", '["short","row"]')


def test_rows_read_line_by_line_come_in_tables_of_at_most_table_rows() -> None:
    body = ("id,name\n" + "".join(f'{i},"name {i}"\n' for i in range(2500))).encode()
    items = list(parse(body))
    assert [len(item.rows) for item in items] == [1000, 1000, 500]  # type: ignore[union-attr]
    assert items[2].lines[-1] == 2501  # type: ignore[union-attr]


@pytest.mark.parametrize("chunk", [16, 1024, 1 << 20])
def test_rows_before_a_line_that_is_not_utf8_are_read_first(chunk: int) -> None:
    body = b"a,b\n" + b"".join(b"%d,x\n" % i for i in range(100)) + b"7,\xff\n8,y\n"
    blocks = in_blocks(body, chunk=chunk)
    assert blocks == line_by_line(body)
    assert len(blocks) == 101
    assert blocks[-1] == ("unreadable", 102, "the file is not valid UTF-8")


def test_a_block_of_very_short_lines_comes_in_tables_of_at_most_table_rows() -> None:
    """1 MiB of two-byte lines is one read: its rows are not all in memory at once."""
    body = b"a\n" + b"x\n" * (1 << 19)
    sizes = [len(item.rows) for item in parse(body)]  # type: ignore[union-attr]
    assert sum(sizes) == 1 << 19
    assert max(sizes) == parsers.TABLE_ROWS


@pytest.mark.parametrize("problem", [b"x,y\n", b"\x00\n"])
def test_a_block_with_problem_rows_keeps_its_tables_to_table_rows(problem: bytes) -> None:
    body = b"a\n" + b"x\n" * 3000 + problem + b"x\n" * 3000
    items = list(parse(body))
    assert [len(i.rows) if isinstance(i, parsers.Table) else 0 for i in items] == [
        *[1000] * 3,
        0,
        *[1000] * 3,
    ]
    assert items[3].line == 3002  # type: ignore[union-attr]
