"""Streaming parsers for uploaded files: CSV, JSON and NDJSON, each optionally gzipped.

Every parser reads its stream in bounded pieces and yields one `Row` at a time, so
memory does not grow with the file. A row that cannot become a record (a ragged CSV
row, an NDJSON line that is not strict JSON, an array item that is not an object)
yields a `Row` with its error; a problem that makes the rest of the file unreadable
(a bad header, invalid UTF-8, truncated JSON, an empty file) raises `FileUnreadable`.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

import orjson

from headwater.kit import strictjson

CONTENT_TYPES = ("text/csv", "application/json", "application/x-ndjson")
MAX_RECORD_BYTES = 16 * 1024 * 1024  # one CSV field, NDJSON line or JSON record
CHUNK = 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"

csv.field_size_limit(MAX_RECORD_BYTES)


@dataclass(slots=True)
class Row:
    """One record of a file (`data`), or why the row is not one (`keyword`, `message`,
    and the row's text in `raw`). `line` is the file line where the row starts."""

    line: int
    data: dict[str, Any] | None
    keyword: str = ""
    message: str = ""
    raw: str | None = None


class FileUnreadable(Exception):
    """The file cannot be read on from `line`: nothing of it is stored."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


def rows(stream: BinaryIO, content_type: str, *, max_depth: int) -> Iterator[Row]:
    """The rows of a file of `content_type`; gzip is recognised by its magic number."""
    buffered: Any = stream if hasattr(stream, "peek") else io.BufferedReader(cast(Any, stream))
    parse = _PARSERS[content_type]
    if buffered.peek(2)[:2] == GZIP_MAGIC:
        unzipped = cast(BinaryIO, gzip.GzipFile(fileobj=buffered, mode="rb"))
        return _gunzipped(parse(unzipped, max_depth))
    return parse(buffered, max_depth)


def _gunzipped(parsed: Iterator[Row]) -> Iterator[Row]:
    try:
        yield from parsed
    except (gzip.BadGzipFile, EOFError, OSError) as exc:
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


def _lines(stream: BinaryIO) -> Iterator[str]:
    """The stream's lines, each decoded on its own so an encoding error names its line."""
    line = 0
    readline = stream.readline
    while raw := readline(MAX_RECORD_BYTES + 1):
        line += 1
        if len(raw) > MAX_RECORD_BYTES and not raw.endswith(b"\n"):
            raise FileUnreadable(line, f"the line is longer than {MAX_RECORD_BYTES} bytes")
        if line == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)
        try:
            yield raw.decode()
        except UnicodeDecodeError:
            raise FileUnreadable(line, "the file is not valid UTF-8") from None


def _csv(stream: BinaryIO, _max_depth: int) -> Iterator[Row]:
    reader = csv.reader(_lines(stream), strict=True)
    last = 0
    try:
        try:
            names = next(reader)
        except StopIteration:
            raise FileUnreadable(1, "the file is empty") from None
        header = _header(names)
        width = len(header)
        last = reader.line_num
        produced = False
        for fields in reader:
            line = last + 1
            last = reader.line_num
            if len(fields) == width:
                produced = True
                yield Row(line, dict(zip(header, fields, strict=False)))  # widths checked
            elif fields:  # csv yields [] for a blank line
                produced = True
                yield Row(
                    line,
                    None,
                    "columns",
                    f"the row has {len(fields)} fields; the header has {width}",
                    orjson.dumps(fields).decode(),
                )
    except csv.Error as exc:
        raise FileUnreadable(last + 1, f"CSV: {exc}") from None
    if not produced:
        raise FileUnreadable(last + 1, NO_RECORDS)


# --- NDJSON -------------------------------------------------------------------------------------


def _record(value: Any, line: int, raw: str) -> Row:
    if isinstance(value, dict):
        return Row(line, value)
    return Row(line, None, "type", "a record must be a JSON object", raw)


def _ndjson(stream: BinaryIO, max_depth: int) -> Iterator[Row]:
    line = 0
    produced = False
    while True:
        raw = stream.readline(MAX_RECORD_BYTES + 1)
        if not raw:
            if not produced:
                raise FileUnreadable(1, NO_RECORDS)
            return
        line += 1
        if len(raw) > MAX_RECORD_BYTES and not raw.endswith(b"\n"):
            raise FileUnreadable(line, f"the line is longer than {MAX_RECORD_BYTES} bytes")
        if line == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)
        if not raw.strip():
            continue
        produced = True
        try:
            value = strictjson.loads(raw, max_depth=max_depth)
        except strictjson.StrictJSONError as exc:
            yield Row(line, None, "json", exc.message, raw.decode("utf-8", "replace").rstrip())
            continue
        yield _record(value, line, "")


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

    def decode(self, max_depth: int) -> tuple[Any, str | None, str]:
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
                try:
                    _, end = _lenient.raw_decode(self.buffer, self.pos)
                except json.JSONDecodeError:
                    if self._grow():
                        continue
                    raise FileUnreadable(self.line, self._why(exc.message)) from None
                value, problem = None, exc.message
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
        return Row(line, None, "json", problem, raw)
    return _record(value, line, raw)


_PARSERS = {"text/csv": _csv, "application/json": _json, "application/x-ndjson": _ndjson}
