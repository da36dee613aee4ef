"""The SMTP server's bounds over real sockets (contract 12): attachments per message,
MIME nesting, recipients per message, connections in all and per address; past each,
the documented reply, nothing stored, and the server goes on serving."""

from __future__ import annotations

import base64
import smtplib
import socket
import time
import uuid
from typing import Any

import pytest

from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.inbox.conftest import message, send

pytestmark = pytest.mark.http

BODY = (CSV_HEADER + csv_rows(2)).encode()


def _transactions(tenant: FileTenant) -> list[dict[str, Any]]:
    run_worker(tenant.client)
    return tenant.transactions(channel="email", page_size=100)["data"]  # type: ignore[no-any-return]


def test_attachments_past_the_limit_are_552_and_nothing_is_stored(
    make_smtp: Any, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    server = make_smtp(email_max_attachments=3)
    files = [(f"f{n}.csv", "text/csv", BODY) for n in range(4)]
    with pytest.raises(smtplib.SMTPDataError) as refused:
        send(server.port, message(inbox["address"], attachments=files))
    assert refused.value.smtp_code == 552 and b"at most 3" in refused.value.smtp_error
    assert _transactions(mail_tenant) == []
    # other attachments do not count; three supported ones pass
    allowed = [*files[:3], ("notes.pdf", "application/pdf", b"%PDF")]
    assert send(server.port, message(inbox["address"], attachments=allowed)) == {}
    assert len(_transactions(mail_tenant)) == 3


def _nested(levels: int, address: str) -> bytes:
    """A message whose CSV attachment sits `levels` multiparts deep."""
    head = f"From: ann@example.com\r\nTo: {address}\r\nSubject: deep\r\nMIME-Version: 1.0\r\n"
    opening, closing = [], []
    for n in range(levels):
        headers = head if n == 0 else ""
        opening.append(f'{headers}Content-Type: multipart/mixed; boundary="b{n}"\r\n\r\n--b{n}\r\n')
        closing.insert(0, f"\r\n--b{n}--\r\n")
    part = (
        'Content-Type: text/csv\r\nContent-Disposition: attachment; filename="deep.csv"\r\n\r\n'
        + BODY.decode().replace("\n", "\r\n")
    )
    return ("".join(opening) + part + "".join(closing)).encode()


@pytest.mark.parametrize(("levels", "code"), [(10, 250), (11, 554), (20_000, 554)])
def test_mime_nested_deeper_than_ten_is_554(
    smtp_server: Any, mail_tenant: FileTenant, inbox: dict[str, Any], levels: int, code: int
) -> None:
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=60) as smtp:
        smtp.ehlo()
        smtp.mail("ann@example.com")
        smtp.rcpt(inbox["address"])
        answer, text = smtp.data(_nested(levels, inbox["address"]))
        assert answer == code, text
        assert smtp.noop()[0] == 250  # the session goes on
    assert len(_transactions(mail_tenant)) == (1 if code == 250 else 0)


def test_recipients_past_one_hundred_are_452(
    smtp_server: Any, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=60) as smtp:
        smtp.ehlo()
        smtp.mail("ann@example.com")
        answers = [smtp.rcpt(inbox["address"])[0] for _ in range(105)]
        assert answers == [250] * 100 + [452] * 5
        mail = message(inbox["address"], attachments=[("a.csv", "text/csv", BODY)])
        assert smtp.data(mail.as_bytes())[0] == 250
    assert len(_transactions(mail_tenant)) == 1  # one inbox: one copy


def _greeting(source: str, port: int) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    return sock, sock.recv(1024)


def test_connections_are_bounded_in_all_and_per_address(
    make_smtp: Any, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    server = make_smtp(smtp_max_connections=14)
    held = []
    try:
        greetings = []
        for _ in range(12):
            sock, greeting = _greeting("127.0.0.2", server.port)
            held.append(sock)
            greetings.append(greeting[:3])
        assert greetings == [b"220"] * 10 + [b"421"] * 2
        for _ in range(4):
            sock, greeting = _greeting("127.0.0.3", server.port)
            held.append(sock)
            greetings.append(greeting[:3])
        assert greetings[12:] == [b"220"] * 4  # 10 + 4: the bound in all is reached
        sock, greeting = _greeting("127.0.0.4", server.port)
        held.append(sock)
        assert greeting.startswith(b"421 ")
    finally:
        for sock in held:
            sock.close()
    # once they have gone, another address sends as before
    mail = message(
        inbox["address"],
        attachments=[("a.csv", "text/csv", BODY)],
        message_id=f"<{uuid.uuid4()}@example.com>",
    )
    for _ in range(50):
        try:
            assert send(server.port, mail) == {}
            break
        except smtplib.SMTPConnectError:
            pass  # the closed sockets are still being counted out
    assert len(_transactions(mail_tenant)) == 1


def test_lines_that_begin_with_a_dot_arrive_as_sent(
    smtp_server: Any, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    """The client doubles a leading dot and the server takes one off, in whatever
    blocks the data arrives; a lone dot inside a line is data."""
    ahead = [("notes.pdf", "application/pdf", bytes(range(256)) * 4096)]  # 1 MiB first
    mail = message(inbox["address"], attachments=ahead)
    text = "order_id,amount\n.A-1,1\n..A-2,2\nA.3,3\n" + "".join(f".D-{n},{n}\n" for n in range(60))
    mail.add_attachment(text, subtype="csv", filename="dots.csv", cte="7bit")
    assert send(smtp_server.port, mail) == {}
    [transaction] = _transactions(mail_tenant)
    assert transaction["status"] == "completed", transaction["errors"]
    ids = {r["data"]["order_id"] for r in mail_tenant.records(page_size=100)}
    assert ids == {".A-1", "..A-2", "A.3"} | {f".D-{n}" for n in range(60)}


@pytest.mark.parametrize(("length", "code"), [(999, 250), (1000, 500)])
def test_a_line_longer_than_1000_bytes_with_its_crlf_is_500_wherever_it_is(
    smtp_server: Any, mail_tenant: FileTenant, inbox: dict[str, Any], length: int, code: int
) -> None:
    """RFC 5321 4.5.3.1.6, after 1 MiB of short lines (so in a later block than the
    first): a line of 1,000 bytes and its CRLF is refused, one byte less is taken."""
    ahead = base64.encodebytes(bytes(range(256)) * 4096).replace(b"\n", b"\r\n")
    raw = (
        (
            f"From: ann@example.com\r\nTo: {inbox['address']}\r\nSubject: long\r\n"
            'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
            "--b\r\nContent-Type: application/pdf\r\nContent-Transfer-Encoding: base64\r\n"
            'Content-Disposition: attachment; filename="a.pdf"\r\n\r\n'
        ).encode()
        + ahead
        + (
            '--b\r\nContent-Type: text/csv\r\nContent-Disposition: attachment; filename="o.csv"'
            f"\r\n\r\norder_id,amount\r\nA-1,1\r\n{'x' * (length - 2)},2\r\n--b--\r\n"
        ).encode()
    )
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=60) as smtp:
        smtp.ehlo()
        smtp.mail("ann@example.com")
        smtp.rcpt(inbox["address"])
        answer, text = smtp.data(raw)
        assert answer == code, text
        assert smtp.noop()[0] == 250  # the session goes on
    stored = _transactions(mail_tenant)
    assert len(stored) == (1 if code == 250 else 0)


class _Talk:
    """A raw SMTP conversation on one socket: a line sent, the reply's code read."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.replies = sock.makefile("rb")

    def reply(self) -> bytes:
        while True:
            line = self.replies.readline()
            if len(line) < 4 or line[3:4] != b"-":
                return line[:3]

    def say(self, line: str) -> bytes:
        self.sock.sendall(line.encode() + b"\r\n")
        return self.reply()


def test_a_message_slower_than_the_idle_timeout_arrives_and_an_idle_one_is_cut(
    make_smtp: Any, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    """The connection's timeout (`HEADWATER_SMTP_IDLE_TIMEOUT_SECONDS`, here 1 s) counts
    the time nothing arrives: a message whose data takes three times as long, arriving
    all the while, is accepted (a 25 MB message beside 99 others took minutes and was
    cut off at the timeout, counted from DATA); data that stops for longer is cut off
    and stores nothing."""
    server = make_smtp(smtp_idle_timeout_seconds=1)
    slow = message(
        inbox["address"],
        attachments=[("slow.csv", "text/csv", BODY)],
        message_id=f"<{uuid.uuid4()}@example.com>",
    )
    data = slow.as_bytes(policy=slow.policy.clone(linesep="\r\n"))
    assert not any(line.startswith(b".") for line in data.split(b"\r\n"))  # nothing to stuff
    sock, greeting = _greeting("127.0.0.5", server.port)
    talk = _Talk(sock)
    try:
        assert greeting[:3] == b"220"
        assert talk.say("EHLO client.example.com") == b"250"
        assert talk.say("MAIL FROM:<ann@example.com>") == b"250"
        assert talk.say(f"RCPT TO:<{inbox['address']}>") == b"250"
        assert talk.say("DATA") == b"354"
        pieces = 8
        for k in range(pieces):
            sock.sendall(data[k * len(data) // pieces : (k + 1) * len(data) // pieces])
            time.sleep(0.4)  # 3.2 s in all, each pause under the timeout
        assert talk.say(".") == b"250"

        assert talk.say("MAIL FROM:<ann@example.com>") == b"250"
        assert talk.say(f"RCPT TO:<{inbox['address']}>") == b"250"
        assert talk.say("DATA") == b"354"
        sock.sendall(data[: len(data) // 2])
        time.sleep(2.5)  # idle past the timeout: the server closes the connection
        assert talk.replies.readline() in (b"", b"421 4.4.2 Connection timed out\r\n")
    finally:
        sock.close()
    [transaction] = _transactions(mail_tenant)
    assert transaction["file_name"] == "slow.csv" and transaction["status"] == "completed"
