"""A message's MIME structure, followed as its bytes arrive (contract 12): how deep its
parts nest, and where each leaf part's headers and body lie in the spooled message, so
that an attachment is decoded straight from the spool into the store, a piece at a time.
No parser ever holds a whole message: a 25 MB message costs a few kilobytes here.

Only the lines that can change the structure are looked at: every line of a header
block, and in a body the lines that begin with `--`.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from typing import IO

MAX_HEADER_BYTES = 64 * 1024  # of one part's header block; more is not kept
READ_PIECE = 1024 * 1024
# what a base64 body may hold beside its alphabet (line ends, spaces, junk): dropped, as
# mail readers drop it (a table for bytes.translate: 10x faster than a regular expression)
_NOT_BASE64 = bytes(
    set(range(256)) - set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
)

_BOUNDARY = re.compile(rb'boundary\s*=\s*(?:"([^"]+)"|([^;\s]+))', re.IGNORECASE)


@dataclass
class Leaf:
    """A part that is not multipart: its header block, and its body's place in the
    message (`end` is None while the body goes on)."""

    headers: bytes
    start: int
    end: int | None = None

    def header(self) -> EmailMessage:
        parsed = BytesHeaderParser(policy=policy.default).parsebytes(self.headers + b"\r\n")
        assert isinstance(parsed, EmailMessage)
        return parsed


@dataclass
class Structure:
    """Fed whole lines (`feed_block`) in order, with the offset of each block in the
    message: the nesting (`deepest`) and the leaf parts (`leaves`)."""

    open: list[bytes | None] = field(default_factory=list)  # boundaries; None: a message
    in_headers: bool = True
    headers: bytearray = field(default_factory=bytearray)
    top_headers: bytes | None = None
    leaves: list[Leaf] = field(default_factory=list)
    current: Leaf | None = None
    deepest: int = 0
    size: int = 0

    def feed_block(self, block: bytes) -> None:
        """Whole lines, CRLF included, that follow what was fed before."""
        offset = self.size
        self.size += len(block)
        position, end = 0, len(block)
        while position < end:
            if not self.in_headers and not block.startswith(b"--", position):
                found = block.find(b"\n--", position)
                if found < 0:
                    return
                position = found + 1
            stop = block.find(b"\n", position)
            stop = end if stop < 0 else stop + 1
            self._line(block[position:stop], offset + position)
            position = stop

    def finish(self) -> list[Leaf]:
        """The leaf parts, once the whole message was fed."""
        if self.in_headers and self.headers:  # a message of headers alone
            self._headers_end(self.size)
        if self.current is not None:
            self.current.end = self.size
            self.current = None
        return self.leaves

    def _line(self, line: bytes, at: int) -> None:
        if self.in_headers:
            if line in (b"\r\n", b"\n"):
                self._headers_end(at + len(line))
            elif len(self.headers) < MAX_HEADER_BYTES:
                self.headers += line
            return
        for level in range(len(self.open) - 1, -1, -1):
            boundary = self.open[level]
            if boundary is None or not line.startswith(b"--" + boundary):
                continue
            rest = line[2 + len(boundary) :].rstrip(b"\r\n \t")
            if rest not in (b"", b"--"):
                continue  # a longer boundary that merely begins the same way
            if self.current is not None:  # the CRLF before a boundary is the boundary's
                self.current.end = max(self.current.start, at - 2)
                self.current = None
            if rest == b"--":
                del self.open[level:]
            else:
                del self.open[level + 1 :]
                self.in_headers = True
            break

    def _headers_end(self, body_at: int) -> None:
        raw = bytes(self.headers)
        self.headers.clear()
        if self.top_headers is None:
            self.top_headers = raw
        self.in_headers = False
        kind, boundary = _content_type(raw)
        if kind.startswith(b"multipart/") and boundary:
            self.open.append(boundary)
        elif kind == b"message/rfc822":
            self.open.append(None)
            self.in_headers = True  # the enclosed message's headers follow
        else:
            self.current = Leaf(raw, body_at)
            self.leaves.append(self.current)
        self.deepest = max(self.deepest, len(self.open))


def _content_type(headers: bytes) -> tuple[bytes, bytes | None]:
    """The Content-Type's type/subtype (lower case) and boundary, from a header block."""
    value = b""
    collecting = False
    for line in headers.split(b"\n"):
        text = line.rstrip(b"\r")
        if text[:1] in (b" ", b"\t"):
            if collecting:
                value += text
            continue
        collecting = text[:13].lower() == b"content-type:"
        if collecting:
            value = text[13:]
    kind = value.split(b";", 1)[0].strip().lower()
    found = _BOUNDARY.search(value)
    return kind, (found.group(1) or found.group(2)) if found else None


def body(
    spool: IO[bytes], leaf: Leaf, encoding: str, *, piece_size: int = READ_PIECE
) -> Iterator[bytes]:
    """A leaf's body, decoded by its Content-Transfer-Encoding, a piece at a time."""
    spool.seek(leaf.start)
    left = (leaf.end if leaf.end is not None else leaf.start) - leaf.start
    carry = b""
    while left > 0:
        piece = spool.read(min(piece_size, left))
        if not piece:
            break
        left -= len(piece)
        if encoding == "base64":
            data = carry + piece.translate(None, _NOT_BASE64)
            whole = len(data) - len(data) % 4
            carry = data[whole:]
            if whole:
                yield _base64(data[:whole])
        elif encoding == "quoted-printable":
            data = carry + piece
            cut = data.rfind(b"\n") + 1  # soft line breaks never span a piece
            carry = data[cut:]
            if cut:
                yield binascii.a2b_qp(data[:cut])
        else:
            yield piece
    if carry:
        yield _base64(carry) if encoding == "base64" else binascii.a2b_qp(carry)


def _base64(data: bytes) -> bytes:
    try:
        return binascii.a2b_base64(data)
    except binascii.Error:  # bad padding at the very end: what decodes, as mail readers do
        bare = data.rstrip(b"=")
        bare = bare[: len(bare) - 1] if len(bare) % 4 == 1 else bare
        return binascii.a2b_base64(bare + b"=" * (-len(bare) % 4))
