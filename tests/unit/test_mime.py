"""The MIME structure followed line by line (`inbox.mime`) finds the same parts, with the
same decoded bodies, as the standard library's parser holding the whole message."""

from __future__ import annotations

import base64
import binascii
import io
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser

from hypothesis import given
from hypothesis import strategies as st

from headwater.inbox import mime

ENCODINGS = ["base64", "quoted-printable", "7bit"]

payloads = st.binary(max_size=3000)
texts = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=400).map(
    lambda t: t.replace(".", ".\n") + "\n"
)


def _leaves(raw: bytes, piece_size: int) -> list[tuple[str | None, bytes]]:
    structure = mime.Structure()
    # blocks of whole lines, as the session hands them over
    lines = raw.splitlines(keepends=True)
    for start in range(0, len(lines), 7):
        structure.feed_block(b"".join(lines[start : start + 7]))
    spool = io.BytesIO(raw)
    found = []
    for leaf in structure.finish():
        part = leaf.header()
        encoding = str(part.get("Content-Transfer-Encoding") or "7bit").strip().lower()
        data = b"".join(mime.body(spool, leaf, encoding, piece_size=piece_size))
        found.append((part.get_filename(), data))
    return found


def _expected(raw: bytes) -> list[tuple[str | None, bytes]]:
    parsed = BytesParser(policy=policy.default).parsebytes(raw)
    return [
        (part.get_filename(), part.get_payload(decode=True) or b"")
        for part in parsed.walk()
        if not part.is_multipart()
    ]


@given(
    st.lists(
        st.tuples(payloads, texts, st.sampled_from(ENCODINGS), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([5, 64, 1000, 1 << 20]),
    st.booleans(),
)
def test_parts_and_bodies_match_the_standard_parser(
    parts: list[tuple[bytes, str, str, bool]], piece_size: int, wrap: bool
) -> None:
    mail = EmailMessage()
    mail["From"] = "ann@example.com"
    mail["Subject"] = "parts"
    mail.set_content("the body\n")
    for n, (data, text, encoding, binary) in enumerate(parts):
        if binary or encoding == "7bit":
            mail.add_attachment(
                data if binary else text.encode(),
                maintype="application" if binary else "text",
                subtype="octet-stream" if binary else "csv",
                filename=f"f{n}.bin",
                cte="base64" if binary else encoding,
            )
        else:
            mail.add_attachment(text, subtype="csv", filename=f"f{n}.csv", cte=encoding)
    if wrap:  # the whole message again, as a message/rfc822 part of another
        outer = EmailMessage()
        outer["From"] = "bob@example.com"
        outer.set_content("forwarded\n")
        outer.add_attachment(mail)
        mail = outer
    raw = mail.as_bytes(policy=policy.SMTP)
    assert _leaves(raw, piece_size) == _expected(raw)


def test_nesting_is_counted_as_it_arrives() -> None:
    structure = mime.Structure()
    head = b"Content-Type: multipart/mixed; boundary=b%d\r\n\r\n--b%d\r\n"
    structure.feed_block(b"".join(head % (n, n) for n in range(12)))
    assert structure.deepest == 12
    flat = mime.Structure()
    flat.feed_block(b"Subject: x\r\n\r\n--not a boundary\r\nbody\r\n")
    assert flat.deepest == 0 and len(flat.finish()) == 1


def test_a_boundary_that_begins_like_another_is_not_it() -> None:
    raw = (
        b'Content-Type: multipart/mixed; boundary="ab"\r\n\r\n'
        b"--ab\r\nContent-Type: text/csv\r\n\r\nx\r\n--abc\r\ny\r\n--ab--\r\n"
    )
    structure = mime.Structure()
    structure.feed_block(raw)
    [leaf] = structure.finish()
    assert b"".join(mime.body(io.BytesIO(raw), leaf, "7bit")) == b"x\r\n--abc\r\ny"


_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


@given(st.binary(max_size=2000), st.binary(max_size=200), st.sampled_from([5, 64, 1 << 20]))
def test_a_base64_body_with_other_bytes_in_it_decodes_as_mail_readers_decode_it(
    data: bytes, junk: bytes, piece_size: int
) -> None:
    """Bytes beside the base64 alphabet (line ends, spaces, anything) are dropped wherever
    they fall, as the standard library's lenient decoder drops them."""
    encoded = bytearray(base64.b64encode(data))
    for n, byte in enumerate(b for b in junk if b not in _ALPHABET):  # spread through it
        encoded.insert((n * 37) % (len(encoded) + 1), byte)
    raw = bytes(encoded)
    leaf = mime.Leaf(headers=b"", start=0, end=len(raw))
    decoded = b"".join(mime.body(io.BytesIO(raw), leaf, "base64", piece_size=piece_size))
    assert decoded == data == binascii.a2b_base64(raw)
