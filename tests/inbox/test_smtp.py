"""The SMTP server over real sockets (smtplib as the sender, an aiosmtpd sink as the
relay): refusals at the right stage, attachments that become transactions, replies."""

from __future__ import annotations

import base64
import gzip
import quopri
import smtplib
import uuid
from datetime import timedelta
from email.message import EmailMessage
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from email.mime.text import MIMEText
from typing import Any

import pytest
from sqlalchemy import update

from headwater.inbox.models import InboxMessageId
from headwater.kit.clock import utcnow
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.http_server import Listener
from tests.inbox.conftest import Sink, create_inbox, message, send

pytestmark = pytest.mark.http


def _email_transactions(tenant: FileTenant) -> list[dict[str, Any]]:
    run_worker(tenant.client)
    return tenant.transactions(channel="email", page_size=100)["data"]  # type: ignore[no-any-return]


def test_an_attachment_becomes_a_transaction(
    smtp_server: Listener, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    body = (CSV_HEADER + csv_rows(15)).encode()
    refused = send(
        smtp_server.port,
        message(inbox["address"], attachments=[("orders.csv", "text/csv", body)]),
    )
    assert refused == {}
    [transaction] = _email_transactions(mail_tenant)
    assert transaction["status"] == "completed" and transaction["channel"] == "email"
    assert transaction["file_name"] == "orders.csv" and transaction["records_accepted"] == 15


def test_the_same_bytes_as_an_upload_url_make_the_same_transaction(
    smtp_server: Listener, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    body = CSV_HEADER + csv_rows(5) + "X-1,bad,oops,1,true,\n"
    by_url = mail_tenant.upload(body)
    send(
        smtp_server.port,
        message(inbox["address"], attachments=[("orders.csv", "text/csv", body.encode())]),
    )
    [by_mail] = _email_transactions(mail_tenant)
    ignore = {
        "transaction_id",
        "channel",
        "created_at",
        "uploaded_at",
        "started_at",
        "completed_at",
    }
    assert {k: v for k, v in by_mail.items() if k not in ignore} == {
        k: v for k, v in by_url.items() if k not in ignore
    }


def test_refusals_at_rcpt_size_and_data(
    make_smtp: Any, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    server = make_smtp(max_email_bytes=20_000)
    with smtplib.SMTP("127.0.0.1", server.port, timeout=30) as smtp:
        code, features = smtp.ehlo()
        assert code == 250 and b"SIZE 20000" in features
        smtp.mail("ann@example.com")
        code, _ = smtp.rcpt("in-unknownunknownunkn@ingest.localhost")
        assert code == 550
        smtp.rset()
        smtp.mail("mallory@evil.example")  # not an allowed sender
        code, _ = smtp.rcpt(inbox["address"])
        assert code == 550
        smtp.rset()
        smtp.mail("someone@example.org")  # allowed by @example.org
        assert smtp.rcpt(inbox["address"])[0] == 250
    big = message(inbox["address"], attachments=[("big.csv", "text/csv", b"x" * 40_000)])
    with pytest.raises(smtplib.SMTPSenderRefused) as too_big:
        send(server.port, big)
    assert too_big.value.smtp_code == 552
    nothing = message(inbox["address"], attachments=[("notes.pdf", "application/pdf", b"%PDF")])
    with pytest.raises(smtplib.SMTPDataError) as useless:
        send(server.port, nothing)
    assert useless.value.smtp_code == 554
    assert b"text/csv" in useless.value.smtp_error and b".ndjson" in useless.value.smtp_error
    assert _email_transactions(mail_tenant) == []


def test_a_deleted_inbox_refuses_mail(smtp_server: Listener, mail_tenant: FileTenant) -> None:
    made = create_inbox(mail_tenant)
    mail_tenant.client.delete(f"/admin/v1/inboxes/{made['inbox_id']}", headers=mail_tenant.admin)
    mail = message(made["address"], attachments=[("a.csv", "text/csv", b"order_id,amount\nA,1\n")])
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        send(smtp_server.port, mail)


def test_a_repeated_message_id_is_stored_once(
    smtp_server: Listener, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    body = (CSV_HEADER + csv_rows(3)).encode()
    for _ in range(2):
        send(
            smtp_server.port,
            message(
                inbox["address"],
                attachments=[("a.csv", "text/csv", body)],
                message_id="<same-1@example.com>",
            ),
        )
    assert len(_email_transactions(mail_tenant)) == 1


def test_a_message_id_is_taken_again_after_24_hours(
    smtp_server: Listener, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    """Within 24 h a repeat stores nothing; once the first copy is 24 h old, the same
    Message-ID is a new message (its claim is taken again)."""
    body = (CSV_HEADER + csv_rows(3)).encode()
    mail = message(
        inbox["address"], attachments=[("a.csv", "text/csv", body)], message_id="<aged@example.com>"
    )
    send(smtp_server.port, mail)
    db = mail_tenant.client.app.state.runtime.db  # type: ignore[attr-defined]
    with db.begin() as connection:
        connection.execute(
            update(InboxMessageId)
            .where(InboxMessageId.inbox_id == uuid.UUID(inbox["inbox_id"]))
            .values(received_at=utcnow() - timedelta(hours=23))
        )
    send(smtp_server.port, mail)
    assert len(_email_transactions(mail_tenant)) == 1
    with db.begin() as connection:
        connection.execute(
            update(InboxMessageId)
            .where(InboxMessageId.inbox_id == uuid.UUID(inbox["inbox_id"]))
            .values(received_at=utcnow() - timedelta(hours=24, seconds=1))
        )
    send(smtp_server.port, mail)
    assert len(_email_transactions(mail_tenant)) == 2


def _mime_shapes(address: str) -> EmailMessage | MIMEMultipart:
    """base64, quoted-printable, multipart/mixed inside multipart/alternative, an RFC 2231
    file name, an RFC 2047 one (as Gmail and Outlook write a name that is not ASCII), a
    gzip attachment known by its name, and an attachment to ignore."""
    outer = MIMEMultipart("alternative")
    outer["From"] = "ann@example.com"
    outer["To"] = address
    outer["Subject"] = "Shapes"
    outer["Message-ID"] = "<shapes-1@example.com>"
    outer.attach(MIMEText("plain text body", "plain"))
    inner = MIMEMultipart("mixed")
    inner.attach(MIMEText("<p>html body</p>", "html"))
    b64 = MIMEApplication((CSV_HEADER + csv_rows(2)).encode(), "csv", name="b64.csv")
    b64.replace_header("Content-Type", "text/csv")
    b64.add_header("Content-Disposition", "attachment", filename="b64.csv")
    inner.attach(b64)
    qp = MIMENonMultipart("text", "csv", charset="utf-8")
    qp.set_payload(quopri.encodestring((CSV_HEADER + csv_rows(3, start=10)).encode()).decode())
    qp["Content-Transfer-Encoding"] = "quoted-printable"
    qp.add_header("Content-Disposition", "attachment", filename="qp.csv")
    inner.attach(qp)
    named = MIMEApplication(
        b"".join(b'{"order_id": "R-%d", "amount": %d}\n' % (i, i) for i in range(4)),
        "octet-stream",
    )
    named.add_header(
        "Content-Disposition", "attachment", filename=("utf-8", "", "commandes été.ndjson")
    )
    inner.attach(named)
    worded = MIMEApplication((CSV_HEADER + csv_rows(6, start=30)).encode(), "octet-stream")
    encoded = base64.b64encode("ventes été.csv".encode()).decode()
    worded.add_header("Content-Disposition", f'attachment; filename="=?utf-8?b?{encoded}?="')
    inner.attach(worded)
    zipped = MIMEApplication(gzip.compress((CSV_HEADER + csv_rows(5, start=20)).encode()), "gzip")
    zipped.add_header("Content-Disposition", "attachment", filename="z.csv.gz")
    inner.attach(zipped)
    ignored = MIMEApplication(b"%PDF-1.4", "pdf")
    ignored.add_header("Content-Disposition", "attachment", filename="notes.pdf")
    inner.attach(ignored)
    outer.attach(inner)
    return outer


def test_mime_shapes(smtp_server: Listener, mail_tenant: FileTenant, inbox: dict[str, Any]) -> None:
    mail = _mime_shapes(inbox["address"])
    with smtplib.SMTP("127.0.0.1", smtp_server.port, timeout=30) as smtp:
        smtp.send_message(mail, from_addr="ann@example.com", to_addrs=[inbox["address"]])
    got = {t["file_name"]: t for t in _email_transactions(mail_tenant)}
    assert {name: t["records_accepted"] for name, t in got.items()} == {
        "b64.csv": 2,
        "qp.csv": 3,
        "commandes été.ndjson": 4,
        "ventes été.csv": 6,
        "z.csv.gz": 5,
    }
    assert all(t["status"] == "completed" for t in got.values())


def test_a_reply_when_all_are_final(
    make_smtp: Any, mail_tenant: FileTenant, inbox: dict[str, Any], relay: tuple[Sink, int]
) -> None:
    sink, relay_port = relay
    server = make_smtp(smtp_relay_url=f"smtp://127.0.0.1:{relay_port}")
    steps = [{"op": "dedupe", "keys": ["/order_id"]}]  # the reply counts what it kept out
    response = mail_tenant.client.put(
        f"/admin/v1/clients/{mail_tenant.client_id}/datasets/orders/transforms",
        json={"steps": steps},
        headers=mail_tenant.admin,
    )
    assert response.status_code == 200, response.text
    good = (CSV_HEADER + csv_rows(4) + csv_rows(1, start=1)).encode()
    bad = (CSV_HEADER + "Z-1,z@example.com,not-a-number,1,true,\n").encode()
    send(
        server.port,
        message(
            inbox["address"],
            attachments=[
                ("good.csv", "text/csv", good),
                ("bad.csv", "text/csv", bad),
                ("notes.pdf", "application/pdf", b"%PDF"),
            ],
            message_id="<reply-me@example.com>",
            subject="Nightly",
        ),
    )
    from headwater.inbox.replies import send_due

    runtime = mail_tenant.client.app.state.runtime  # type: ignore[attr-defined]
    relayed = runtime.settings.model_copy(
        update={"smtp_relay_url": f"smtp://127.0.0.1:{relay_port}"}
    )
    assert send_due(runtime.db, relayed) == 0  # not final yet: no reply
    run_worker(mail_tenant.client)
    _due_now(runtime, inbox)  # it was put back a few seconds
    assert send_due(runtime.db, relayed) == 1
    assert send_due(runtime.db, relayed) == 0  # one reply per message
    [reply] = sink.wait_for(1)
    assert reply["To"] == "ann@example.com"
    assert reply["In-Reply-To"] == "<reply-me@example.com>"
    assert reply["References"] == "<reply-me@example.com>"
    assert reply["Subject"].startswith("[Headwater] partly completed: Nightly")
    text = reply.get_content()
    assert "good.csv: completed" in text and "bad.csv: rejected" in text
    assert "line 2" in text and "notes.pdf: ignored" in text
    assert "5 records: 4 accepted, 0 rejected, 0 errors; 0 filtered, 1 duplicates" in text


def _due_now(runtime: Any, inbox: dict[str, Any]) -> None:
    from sqlalchemy import update

    from headwater.inbox.models import InboxMessage
    from headwater.kit.clock import utcnow

    with runtime.db.unit_of_work() as session:
        session.execute(
            update(InboxMessage)
            .where(InboxMessage.inbox_id == uuid.UUID(inbox["inbox_id"]))
            .values(next_attempt_at=utcnow())
        )


def test_a_relay_that_is_down_is_retried(
    smtp_server: Listener, mail_tenant: FileTenant, inbox: dict[str, Any], relay: tuple[Sink, int]
) -> None:
    """The queue is in the database: a relay that refuses connections is tried again
    later, and the reply goes once it answers."""
    from sqlalchemy import update

    from headwater.inbox.models import InboxMessage
    from headwater.inbox.replies import send_due
    from headwater.kit.clock import utcnow
    from tests.http_server import free_port

    sink, relay_port = relay
    runtime = mail_tenant.client.app.state.runtime  # type: ignore[attr-defined]
    down = runtime.settings.model_copy(update={"smtp_relay_url": f"smtp://127.0.0.1:{free_port()}"})
    # this server was started without a relay: its messages wait with `none`; queue one
    send(
        smtp_server.port,
        message(
            inbox["address"],
            attachments=[("a.csv", "text/csv", (CSV_HEADER + csv_rows(1)).encode())],
        ),
    )
    run_worker(mail_tenant.client)
    with runtime.db.unit_of_work() as session:
        session.execute(
            update(InboxMessage)
            .where(InboxMessage.inbox_id == uuid.UUID(inbox["inbox_id"]))
            .values(reply_state="pending", next_attempt_at=utcnow())
        )
    assert send_due(runtime.db, down) == 0
    with runtime.db.read_session() as session:
        [queued] = (
            session.query(InboxMessage).filter_by(inbox_id=uuid.UUID(inbox["inbox_id"])).all()
        )
        assert queued.reply_state == "pending" and queued.attempts == 1
        assert queued.next_attempt_at > utcnow() and "Connection" in (queued.last_error or "")
    _due_now(runtime, inbox)
    up = runtime.settings.model_copy(update={"smtp_relay_url": f"smtp://127.0.0.1:{relay_port}"})
    assert send_due(runtime.db, up) == 1
    assert len(sink.wait_for(1)) == 1


def test_starttls_when_a_certificate_is_configured(
    make_smtp: Any, mail_tenant: FileTenant, inbox: dict[str, Any], tmp_path: Any
) -> None:
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ingest.localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = make_smtp(smtp_tls_cert_file=cert_file, smtp_tls_key_file=key_file)
    context = ssl.create_default_context(cafile=str(cert_file))
    context.check_hostname = False
    mail = message(
        inbox["address"],
        attachments=[("tls.csv", "text/csv", (CSV_HEADER + csv_rows(2)).encode())],
    )
    with smtplib.SMTP("127.0.0.1", server.port, timeout=30) as smtp:
        smtp.ehlo()
        assert smtp.has_extn("starttls")
        smtp.starttls(context=context)
        smtp.ehlo()
        assert smtp.sock is not None and smtp.sock.version() is not None  # type: ignore[attr-defined]
        smtp.send_message(mail, from_addr="ann@example.com")
    [transaction] = _email_transactions(mail_tenant)
    assert transaction["file_name"] == "tls.csv" and transaction["records_accepted"] == 2
    without = make_smtp()  # no certificate: no STARTTLS offered
    with smtplib.SMTP("127.0.0.1", without.port, timeout=30) as plain:
        plain.ehlo()
        assert not plain.has_extn("starttls")
