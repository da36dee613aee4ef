"""Local files: their content type, their bytes in pieces for an upload, and their
records for a push (JSON, NDJSON, CSV), all read incrementally."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from headwater_client.errors import HeadwaterError

CHUNK_BYTES = 1024 * 1024
# A JSON array item still undecoded past this size is malformed (or too big to push).
MAX_ITEM_CHARS = 64 * 1024 * 1024

CONTENT_TYPES = {
    ".csv": "text/csv",
    ".json": "application/json",
    ".ndjson": "application/x-ndjson",
    ".jsonl": "application/x-ndjson",
}
FORMATS = {"text/csv": "csv", "application/json": "json", "application/x-ndjson": "ndjson"}


class UnreadableFile(HeadwaterError):
    """A local file this library cannot read records from; names the line."""


def guess_content_type(path: str | Path) -> str:
    """The content type for a file name: `.csv`, `.json`, `.ndjson`/`.jsonl`, each
    optionally followed by `.gz` (the service recognises gzip by its content)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    if suffixes and suffixes[-1] in CONTENT_TYPES:
        return CONTENT_TYPES[suffixes[-1]]
    known = ", ".join(CONTENT_TYPES)
    raise HeadwaterError(
        f"cannot tell the content type of {path} from its name: end it with {known} "
        "(optionally followed by .gz), or give it (--content-type for upload, --format "
        "for push)"
    )


def chunks(path: Path, *, progress: Any = None, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The file's bytes in pieces; `progress(sent, total)` after each."""
    total = path.stat().st_size
    sent = 0
    with path.open("rb") as source:
        while piece := source.read(chunk_bytes):
            yield piece
            sent += len(piece)
            if progress is not None:
                progress(sent, total)


def open_text(path: Path | str) -> IO[str]:
    """A text stream over a file (gzip or not, by its first bytes), or stdin for "-"."""
    if str(path) == "-":
        import sys

        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8-sig", newline="")
    with Path(path).open("rb") as probe:
        packed = probe.read(2) == b"\x1f\x8b"
    if packed:
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return Path(path).open(encoding="utf-8-sig", newline="")


def read_records(path: Path | str, *, format: str | None = None) -> Iterator[dict[str, Any]]:
    """The records of a local JSON (an array, or one object), NDJSON or CSV file, one at a
    time. CSV values are text, as in the file; an empty cell is an empty string."""
    name = str(path)
    kind = format or FORMATS[guess_content_type(name)]
    readers = {"json": _json_records, "ndjson": _ndjson_records, "csv": _csv_records}
    if kind not in readers:
        raise HeadwaterError(f"unknown format {kind!r}: json, ndjson or csv")
    with open_text(path) as text:
        try:
            yield from readers[kind](text, name)
        except UnicodeDecodeError as exc:
            raise UnreadableFile(f"{name}: not UTF-8 ({exc.reason})") from None


def _ndjson_records(text: IO[str], name: str) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(text, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise UnreadableFile(f"{name}, line {number}: {exc.msg}") from None


def _csv_records(text: IO[str], name: str) -> Iterator[dict[str, Any]]:
    reader = csv.reader(text)
    header = next(reader, None)
    if not header:
        raise UnreadableFile(f"{name}: no header row")
    for row in reader:
        if not row:
            continue
        if len(row) != len(header):
            raise UnreadableFile(
                f"{name}, line {reader.line_num}: {len(row)} values for {len(header)} columns"
            )
        yield dict(zip(header, row, strict=True))


def _json_records(text: IO[str], name: str) -> Iterator[dict[str, Any]]:
    """An array read item by item, without holding the file; or one object."""
    decoder = json.JSONDecoder()
    buffer, position, line = "", 0, 1
    eof = False

    def fill() -> bool:
        nonlocal buffer, position, eof
        piece = text.read(CHUNK_BYTES)
        eof = not piece
        buffer, position = buffer[position:] + piece, 0
        return not eof

    def skip(allowed: str) -> str:
        """The next character that is not whitespace or one of `allowed` (consumed)."""
        nonlocal position, line
        while True:
            while position < len(buffer):
                char = buffer[position]
                if char in " \t\r\n" or char in allowed:
                    line += char == "\n"
                    position += 1
                    continue
                return char
            if not fill():
                return ""

    def value() -> Any:
        nonlocal position, line
        while True:
            try:
                item, end = decoder.raw_decode(buffer, position)
            except json.JSONDecodeError as exc:
                if len(buffer) - position < MAX_ITEM_CHARS and not eof and fill():
                    continue
                raise UnreadableFile(f"{name}, line {line}: {exc.msg}") from None
            if end == len(buffer) and not eof and fill():
                continue  # a number may go on in the next piece
            line += buffer.count("\n", position, end)
            position = end
            return item

    fill()
    first = skip("")
    if first == "{":
        yield value()
        return
    if first != "[":
        raise UnreadableFile(f"{name}, line {line}: not a JSON array or object")
    position += 1
    while True:
        char = skip(",")
        if char == "]":
            return
        if char == "":
            raise UnreadableFile(f"{name}, line {line}: the array is not closed")
        yield value()
