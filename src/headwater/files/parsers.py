"""Streaming parsers for uploaded files: CSV, JSON and NDJSON, each optionally gzipped.

Every parser reads its stream in bounded pieces and yields one `Row` at a time (CSV:
a `Table` of many good rows at a time, at most a read's worth), so memory does not grow
with the file. A row that cannot become a record (a ragged CSV row, an NDJSON line that
is not strict JSON, an array item that is not an object) yields a `Row` with its error;
a problem that makes the rest of the file unreadable (a bad header, invalid UTF-8,
truncated JSON, an empty file) raises `FileUnreadable`.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any, BinaryIO, cast

import orjson

from headwater.kit import strictjson

CONTENT_TYPES = ("text/csv", "application/json", "application/x-ndjson")
# a file name's format, for channels that have names but no content type (SFTP, email)
EXTENSIONS = {
    ".csv": "text/csv",
    ".json": "application/json",
    ".ndjson": "application/x-ndjson",
    ".jsonl": "application/x-ndjson",
}
SUPPORTED_NAMES = ".csv, .json, .ndjson or .jsonl, each optionally followed by .gz"


def content_type_of(name: str) -> str | None:
    """The format a file name says (`orders.csv.gz` → text/csv); None if it says none.
    gzip itself is recognised by the file's first bytes."""
    base = name[:-3] if name.lower().endswith(".gz") else name
    dot = base.rfind(".")
    return EXTENSIONS.get(base[dot:].lower()) if dot > 0 else None


MAX_RECORD_BYTES = 16 * 1024 * 1024  # one CSV field, NDJSON line or JSON record
CHUNK = 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"

csv.field_size_limit(MAX_RECORD_BYTES)


@dataclass(slots=True)
class Row:
    """One record of a file (`data`), or why the row is not one (`keyword`, `message`,
    and the row's text in `raw`). `line` is the file line where the row starts. A record
    holding U+0000 says so (`nul`, with its text in `raw`): the core's record check
    answers its errors."""

    line: int
    data: dict[str, Any] | None
    keyword: str = ""
    message: str = ""
    raw: str | None = None
    nul: bool = False  # a string of `data` holds U+0000, which the record check refuses


@dataclass(slots=True)
class Table:
    """Consecutive CSV rows, each with as many fields as the header and no U+0000:
    `rows[i]` (its fields, under `header`) starts at line `lines[i]`. A run of good
    rows comes as one `Table` rather than a `Row` each, so that its fields can be
    normalised a column at a time (`Normaliser.table`)."""

    header: list[str]
    lines: list[int]
    rows: list[list[str]]


class FileUnreadable(Exception):
    """The file cannot be read on from `line`: nothing of it is stored."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


MAX_EXPANSION_RATIO = 200  # expanded bytes per compressed byte, at most


def rows(
    stream: BinaryIO,
    content_type: str,
    *,
    max_depth: int,
    compressed_size: int,
    max_expanded: int,
) -> Iterator[Row | Table]:
    """The rows of a file of `content_type` (a CSV file's good rows come in `Table`s);
    gzip is recognised by its magic number and expanded to at most `max_expanded` bytes
    and `MAX_EXPANSION_RATIO` times `compressed_size` (past either, `FileUnreadable`)."""
    buffered: Any = stream if hasattr(stream, "peek") else io.BufferedReader(cast(Any, stream))
    parse = _PARSERS[content_type]
    if buffered.peek(2)[:2] == GZIP_MAGIC:
        unzipped = gzip.GzipFile(fileobj=buffered, mode="rb")
        limit = min(max_expanded, MAX_EXPANSION_RATIO * max(compressed_size, 1))
        bounded = cast(BinaryIO, _Bounded(unzipped, limit, ratio=limit < max_expanded))
        return _gunzipped(parse(bounded, max_depth))
    return parse(buffered, max_depth)


class _Bounded(io.RawIOBase):
    """A decompressing stream that refuses to expand past `limit` bytes."""

    def __init__(self, inner: gzip.GzipFile, limit: int, *, ratio: bool) -> None:
        self.inner = inner
        self.limit = limit
        self.ratio = ratio
        self.expanded = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self.inner.readinto(buffer)
        self.expanded += count
        if self.expanded > self.limit:
            why = (
                f"{MAX_EXPANSION_RATIO} times its compressed size"
                if self.ratio
                else "HEADWATER_MAX_EXPANDED_BYTES"
            )
            raise FileUnreadable(
                0, f"the gzip stream expands past {self.limit} bytes ({why}); nothing is stored"
            )
        return count


def _gunzipped(parsed: Iterator[Row | Table]) -> Iterator[Row | Table]:
    try:
        yield from parsed
    except (gzip.BadGzipFile, EOFError, OSError, zlib.error) as exc:
        raise FileUnreadable(0, f"the gzip stream is corrupt or truncated ({exc})") from None


NO_RECORDS = "the file holds no records"


# --- CSV ----------------------------------------------------------------------------------------


def _header(names: list[str]) -> list[str]:
    header = [name.strip() for name in names]
    seen: set[str] = set()
    for number, name in enumerate(header, 1):
        if not name:
            raise FileUnreadable(1, f"column {number} of the header has no name")
        if name in seen:
            raise FileUnreadable(1, f"the header names column {name!r} twice")
        seen.add(name)
    return header


class _Lines:
    """A stream's lines as bytes, read in large pieces; a run of blank lines is passed
    over in one regex step (at C speed, not one Python step a line), except inside a
    quoted CSV field (`quoted`: the quotes seen so far are odd), where it is content.

    `line` is the number of the last line given; `row_start` that of the last line given
    that began outside quotes (where a CSV row begins). `nul` turns true once a byte
    read holds U+0000: until then no line given can hold one.

    With `blocks`, where the rest of what is read holds no quote and no carriage return
    but before a newline, all of its whole lines are given at once, as one piece (then
    `block` is true, and `row_start` is the block's first line): every line of it is a
    row of its own, and CSV's fields are the text between commas.
    """

    def __init__(
        self, stream: BinaryIO, blank: re.Pattern[bytes], *, quoted: bool, blocks: bool = False
    ) -> None:
        self.stream = stream
        self.blank = blank
        self.quoted = quoted
        self.blocks = blocks
        self.block = False
        self.line = 0
        self.row_start = 0
        self.nul = False

    def __iter__(self) -> Iterator[bytes]:
        buffer = self.stream.read(CHUNK).removeprefix(codecs.BOM_UTF8)
        self.nul = b"\x00" in buffer
        pos = 0
        inside = False
        eof = not buffer
        while True:
            if not inside:
                skipped = self.blank.match(buffer, pos)
                if skipped is not None and skipped.end() > pos:
                    self.line += buffer.count(b"\n", pos, skipped.end())
                    pos = skipped.end()
            if self.blocks and not inside:
                last = buffer.rfind(b"\n", pos, pos + BLOCK_MAX)
                if last > pos and _plain_block(buffer, pos, last):
                    raw = buffer[pos : last + 1]
                    pos = last + 1
                    self.row_start = self.line + 1
                    self.line += raw.count(b"\n")
                    self.block = True
                    yield raw
                    self.block = False
                    continue
            end = buffer.find(b"\n", pos)
            if end < 0:
                if len(buffer) - pos > MAX_RECORD_BYTES:
                    raise FileUnreadable(
                        self.line + 1, f"the line is longer than {MAX_RECORD_BYTES} bytes"
                    )
                if not eof:
                    more = self.stream.read(CHUNK)
                    eof = not more
                    self.nul = self.nul or b"\x00" in more
                    buffer = buffer[pos:] + more
                    pos = 0
                    continue
                if pos >= len(buffer):
                    return
                end = len(buffer) - 1
            raw = buffer[pos : end + 1]
            pos = end + 1
            self.line += 1
            if not inside:
                self.row_start = self.line
            if self.quoted and raw.count(b'"') % 2:
                inside = not inside
            yield raw


BLOCK_BYTES = 4096  # the fewest bytes worth taking as a block
BLOCK_MAX = 256 * 1024  # the most: a block's rows are in memory together


def _plain_block(buffer: bytes, start: int, last: int) -> bool:
    """Whether `buffer[start:last]` is worth taking as a block (`BLOCK_BYTES` or more)
    and holds no quote and no carriage return but before a newline."""
    if last - start < BLOCK_BYTES or buffer.find(b'"', start, last) >= 0:
        return False
    returns = buffer.count(b"\r", start, last)
    return not returns or returns == buffer.count(b"\r\n", start, last + 1)


_CSV_BLANK = re.compile(rb"(?:\r?\n)*")
_NDJSON_BLANK = re.compile(rb"(?:[ \t\r]*\n)*")


class _Feed:
    """The lines the CSV reader reads: the line put, then (a quoted field going on)
    the next lines of the file; each decoded on its own, so that an encoding error
    names its line."""

    def __init__(self, lines: _Lines, rest: Iterator[bytes]) -> None:
        self.lines = lines
        self.rest = rest
        self.next: bytes | None = None

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        raw, self.next = self.next, None
        if raw is None:
            raw = next(self.rest)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise FileUnreadable(self.lines.line, "the file is not valid UTF-8") from None


def _csv(stream: BinaryIO, _max_depth: int) -> Iterator[Row | Table]:
    lines = _Lines(stream, _CSV_BLANK, quoted=True)
    rest = iter(lines)
    feed = _Feed(lines, rest)
    reader = csv.reader(feed, strict=True)
    try:
        names = next(reader)
    except StopIteration:
        why = "the file holds only blank lines" if lines.line else "the file is empty"
        raise FileUnreadable(1, why + ": a CSV file starts with its header row") from None
    except csv.Error as exc:
        raise FileUnreadable(lines.line, f"CSV: {exc}") from None
    header = _header(names)
    lines.blocks = True
    gathered = _Gathered(header)
    produced = False
    try:
        for raw in rest:
            if lines.block:
                yield from gathered.flush()
                for item in _block(raw, lines.row_start, header):
                    produced = True
                    yield item
                continue
            feed.next = raw
            fields = next(reader, None)
            if not fields:  # csv yields [] for a blank line
                continue
            produced = True
            line = lines.row_start
            yield from gathered.add(line, fields, _problem(fields, line, header, nul=lines.nul))
    except (csv.Error, FileUnreadable) as exc:
        yield from gathered.flush()  # the rows before the problem are read, as they were
        if isinstance(exc, csv.Error):
            raise FileUnreadable(lines.line, f"CSV: {exc}") from None
        raise
    yield from gathered.flush()
    if not produced:
        raise FileUnreadable(lines.line + 1, NO_RECORDS)


TABLE_ROWS = 1000  # the most rows of a `Table`


class _Gathered:
    """Good rows gathered into `Table`s of at most `TABLE_ROWS`, given back in file order
    with the problem rows between them."""

    def __init__(self, header: list[str]) -> None:
        self.header = header
        self.table = Table(header, [], [])

    def add(self, line: int, fields: list[str], problem: Row | None) -> Sequence[Row | Table]:
        """A row (`problem` if it is not a record): what is ready to be given back."""
        table = self.table
        if problem is None:
            table.lines.append(line)
            table.rows.append(fields)
            if len(table.rows) < TABLE_ROWS:
                return ()
            return self.flush()
        return (*self.flush(), problem)

    def flush(self) -> Sequence[Table]:
        """The rows gathered so far, as a `Table` (none if there are none)."""
        table = self.table
        if not table.rows:
            return ()
        self.table = Table(self.header, [], [])
        return (table,)


def _problem(fields: list[str], line: int, header: list[str], *, nul: bool) -> Row | None:
    """Why a CSV row is not a record (a `Row` saying it), or None if it is one."""
    if len(fields) != len(header):
        message = f"the row has {len(fields)} fields; the header has {len(header)}"
        return Row(line, None, "columns", message, orjson.dumps(fields).decode())
    if nul and any("\x00" in field for field in fields):
        data = dict(zip(header, fields, strict=True))
        return Row(line, data, raw=orjson.dumps(fields).decode(), nul=True)
    return None


def _block(raw: bytes, first: int, header: list[str]) -> Iterator[Row | Table]:
    """The rows of a block of whole lines without quotes (`_Lines` with `blocks`):
    each line split at its commas, as the CSV reader would; blank lines skipped. The
    rows before a line that is not UTF-8 come first, then `FileUnreadable`."""
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        valid = raw.rfind(b"\n", 0, exc.start) + 1
        yield from _block(raw[:valid], first, header) if valid else ()
        line = first + raw.count(b"\n", 0, valid)
        raise FileUnreadable(line, "the file is not valid UTF-8") from None
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    parts = text.split("\n")
    parts.pop()  # after the last newline
    lines = list(range(first, first + len(parts)))
    if "" in parts:
        lines = list(compress(lines, parts))
        parts = list(filter(None, parts))
    rows = list(map(str.split, parts, repeat(",")))
    width = len(header)
    if "\x00" not in text and all(map(width.__eq__, map(len, rows))):
        for start in range(0, len(rows), TABLE_ROWS):  # however short its lines
            end = start + TABLE_ROWS
            yield Table(header, lines[start:end], rows[start:end])
        return
    gathered = _Gathered(header)
    for line, fields in zip(lines, rows, strict=True):
        yield from gathered.add(line, fields, _problem(fields, line, header, nul=True))
    yield from gathered.flush()


# --- NDJSON -------------------------------------------------------------------------------------


def _record(value: Any, line: int, raw: str, *, nul: bool) -> Row:
    """A row of a parsed value; `nul` when its text held an escaped U+0000."""
    if not isinstance(value, dict):
        return Row(line, None, "type", "a record must be a JSON object", raw)
    if nul and strictjson.has_nul(value):
        return Row(line, value, raw=raw or orjson.dumps(value).decode(), nul=True)
    return Row(line, value)


def _ndjson(stream: BinaryIO, max_depth: int) -> Iterator[Row]:
    lines = _Lines(stream, _NDJSON_BLANK, quoted=False)
    produced = False
    for raw in lines:
        if not raw.strip():
            continue  # a last line of spaces without a newline
        produced = True
        try:
            value = strictjson.loads(raw, max_depth=max_depth)
        except strictjson.StrictJSONError as exc:
            text = raw.decode("utf-8", "replace").rstrip()
            yield Row(lines.line, None, exc.keyword, exc.message, text)
            continue
        yield _record(value, lines.line, "", nul=b"\\u0000" in raw)
    if not produced:
        raise FileUnreadable(1, NO_RECORDS)


# --- JSON ---------------------------------------------------------------------------------------

_lenient = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")


class _Text:
    """A UTF-8 byte stream as a growing text buffer, with the line number at `pos`."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self.buffer = ""
        self.pos = 0
        self.line = 1
        self.eof = False
        self.started = False

    def more(self) -> bool:
        """Read the next piece; False at the end of the stream."""
        if self.eof:
            return False
        data = self.stream.read(CHUNK)
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            line = self.line + self.buffer.count("\n", self.pos)
            raise FileUnreadable(line, "the file is not valid UTF-8") from None
        if not self.started:
            text = text.removeprefix("\ufeff")
            self.started = bool(text)
        if self.pos > CHUNK:  # drop what is consumed, so the buffer stays small
            self.buffer = self.buffer[self.pos :]
            self.pos = 0
        self.buffer += text
        self.eof = not data
        return True

    def advance(self, to: int) -> None:
        self.line += self.buffer.count("\n", self.pos, to)
        self.pos = to

    def skip_space(self) -> str:
        """The next character that is not whitespace ("" at the end of the stream)."""
        while True:
            end = _WHITESPACE.match(self.buffer, self.pos).end()  # type: ignore[union-attr]
            self.advance(end)
            if end < len(self.buffer):
                return self.buffer[end]
            if not self.more():
                return ""

    def decode(self, max_depth: int) -> tuple[Any, strictjson.StrictJSONError | None, str]:
        """The value at `pos`: (value, None, text) or (None, why it is refused, text).

        A value cut by the end of the buffer is decoded again after reading on; one that
        is still invalid at the end of the file makes the file unreadable.
        """
        while True:
            try:
                value, end = strictjson.raw_decode(self.buffer, self.pos, max_depth=max_depth)
                problem = None
                break
            except strictjson.StrictJSONError as exc:
                # valid JSON, but not strict JSON: a row error; find where the value ends
                found = _value_end(self.buffer, self.pos)
                if found is None and self.buffer[self.pos : self.pos + 1] not in ("[", "{"):
                    try:  # a scalar (NaN, 1e400): no depth to fear
                        found = _lenient.raw_decode(self.buffer, self.pos)[1]
                    except json.JSONDecodeError:
                        found = None
                if found is None:
                    if self._grow():
                        continue
                    raise FileUnreadable(self.line, self._why(exc.message)) from None
                end, value, problem = found, None, exc
                break
            except json.JSONDecodeError as exc:
                if self._grow():
                    continue
                line = self.line + self.buffer.count("\n", self.pos, exc.pos)
                raise FileUnreadable(line, self._why(f"invalid JSON: {exc.msg}")) from None
        text = self.buffer[self.pos : end]
        return value, problem, text

    def _grow(self) -> bool:
        """Read on to complete a value; False at the end of the file or past the limit."""
        return len(self.buffer) - self.pos <= MAX_RECORD_BYTES and self.more()

    def _why(self, message: str) -> str:
        if self.eof:
            return message
        return f"{message} (or a record larger than {MAX_RECORD_BYTES} bytes)"


def _json(stream: BinaryIO, max_depth: int) -> Iterator[Row]:
    text = _Text(stream)
    first = text.skip_space()
    if first == "":
        raise FileUnreadable(1, "the file is empty")
    if first == "{":
        yield _value_row(text, max_depth)
    elif first == "[":
        text.advance(text.pos + 1)
        if text.skip_space() == "]":
            raise FileUnreadable(text.line, NO_RECORDS)
        else:
            while True:
                yield _value_row(text, max_depth)
                after = text.skip_space()
                if after == "]":
                    text.advance(text.pos + 1)
                    break
                if after != ",":
                    found = repr(after) if after else "the end of the file"
                    raise FileUnreadable(text.line, f"expected ',' or ']', found {found}")
                text.advance(text.pos + 1)
                text.skip_space()
    else:
        raise FileUnreadable(
            text.line, "the file must hold a JSON array of records or one JSON object"
        )
    if text.skip_space() != "":
        raise FileUnreadable(text.line, "unexpected content after the JSON value")


def _value_row(text: _Text, max_depth: int) -> Row:
    line = text.line
    value, problem, raw = text.decode(max_depth)
    text.advance(text.pos + len(raw))
    if problem is not None:
        return Row(line, None, problem.keyword, problem.message, raw)
    return _record(value, line, raw, nul="\\u0000" in raw)


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _value_end(buffer: str, pos: int) -> int | None:
    """Where the object or array at `pos` ends, found by counting brackets outside
    strings (no recursion, whatever its depth); None if the buffer ends first."""
    if buffer[pos : pos + 1] not in ("[", "{"):
        return None
    level = 0
    for token in _TOKEN.finditer(buffer, pos):
        mark = token.group()
        if mark in "[{":
            level += 1
        elif mark in "]}":
            level -= 1
            if level == 0:
                return token.end()
    return None


_PARSERS = {"text/csv": _csv, "application/json": _json, "application/x-ndjson": _ndjson}
