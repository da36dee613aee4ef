"""The SMTP server (aiosmtpd): envelopes checked against inboxes at RCPT, supported
attachments stored and turned into file transactions before the 250 (contract 12).

A channel, not a pipeline: each attachment's bytes go to the file store, and one use
case, `inbox.service.accept_message`, claims the Message-ID, opens each attachment's
transaction (`channel: "email"`, through `files.service.accept_stored`) and queues its
job, all of one message in one unit of work with the message's record (its reply's
queue entry). The worker processes the files exactly as uploads, and sends the reply.
Message bodies are never logged.
"""

from __future__ import annotations

import asyncio
import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio.to_thread
import structlog
from aiosmtpd.smtp import SMTP, Envelope, Session

from headwater.config import Settings
from headwater.db import Database
from headwater.files import parsers
from headwater.files.stores import Store, make_store
from headwater.inbox import metrics, mime
from headwater.inbox import service as inboxes
from headwater.inbox.service import Recipient
from headwater.inbox.session import MAX_PER_ADDRESS, BoundedSMTP
from headwater.kit import memory
from headwater.kit.connections import Connections

log = structlog.get_logger("headwater.email")

NO_INBOX = "550 5.1.1 No such inbox, or it does not take mail from this sender"
NOTHING_USABLE = (
    "554 5.6.1 No attachment of a supported type: send CSV (text/csv), JSON "
    "(application/json) or NDJSON (application/x-ndjson), by content type or by file name "
    f"({parsers.SUPPORTED_NAMES})"
)
TRY_LATER = "451 4.3.0 The message could not be stored; try again later"


@dataclass(frozen=True, slots=True)
class Attachment:
    """A supported attachment: its name, content type, and where its body lies in the
    spooled message (decoded from there straight into the store)."""

    name: str
    content_type: str
    leaf: mime.Leaf
    encoding: str


class TooManyAttachments(Exception):
    """More supported attachments than a message may carry."""


@dataclass(frozen=True, slots=True)
class Digest:
    message_id: str
    subject: str
    sha256: str


@dataclass(frozen=True, slots=True)
class Message:
    """A received message as the handler uses it: its supported attachments, the names
    of the others, its digest, and the spool its bodies are read from."""

    found: list[Attachment]
    ignored: list[str]
    digest: Digest
    spool: IO[bytes]


READ_AT_ONCE = 2  # messages whose parts are read at the same time
ANSWER_SECONDS = 50  # a message is answered within 60 s of its final dot (contract 12)


def read(envelope: Envelope, most: int | None = None) -> Message:
    """The message's supported attachments (by content type or file name), the names of
    the others, and its digest. The message's own text is not data. Past `most`
    supported attachments, TooManyAttachments."""
    # what BoundedSMTP received: the spooled message, its parts, its SHA-256
    spool: IO[bytes] = envelope.spool  # type: ignore[attr-defined]
    structure: mime.Structure = envelope.structure  # type: ignore[attr-defined]
    found: list[Attachment] = []
    ignored: list[str] = []
    for leaf in structure.finish():
        part = leaf.header()
        name = part.get_filename()
        if name is None and part.get_content_disposition() != "attachment":
            continue  # the body
        given = part.get_content_type()
        kind = given if given in parsers.CONTENT_TYPES else None
        kind = kind or (parsers.content_type_of(name) if name else None)
        label = name or f"(unnamed {given})"
        if kind is None:
            ignored.append(label)
            continue
        encoding = str(part.get("Content-Transfer-Encoding") or "7bit").strip().lower()
        found.append(Attachment(label, kind, leaf, encoding))
        if most is not None and len(found) > most:
            raise TooManyAttachments()
    top = mime.Leaf(structure.top_headers or b"", 0).header()
    digest = Digest(
        message_id=str(top.get("Message-ID") or "").strip(),
        subject=str(top.get("Subject") or ""),
        sha256=envelope.sha256,  # type: ignore[attr-defined]
    )
    return Message(found, ignored, digest, spool)


class Handler:
    """aiosmtpd's hooks: RCPT checks the inbox and sender, DATA takes the message."""

    def __init__(self, db: Database, store: Store, settings: Settings) -> None:
        self.db = db
        self.store = store
        self.settings = settings
        self.replies = inboxes.relay_settings(settings) is not None
        self.reading = anyio.CapacityLimiter(READ_AT_ONCE)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        sender = envelope.mail_from or ""
        to = await anyio.to_thread.run_sync(self._recipient, address, sender)
        if to is None:
            metrics.REFUSED.labels("recipient").inc()
            log.info("email refused at RCPT", sender=sender)
            return NO_INBOX
        envelope.rcpt_tos.append(address)
        recipients: list[Recipient] = getattr(envelope, "headwater_recipients", [])
        if to not in recipients:
            recipients.append(to)
        envelope.headwater_recipients = recipients  # type: ignore[attr-defined]
        return "250 2.1.5 OK"

    def _recipient(self, address: str, sender: str) -> Recipient | None:
        with self.db.read_connection() as connection:
            return inboxes.recipient(
                connection, address, domain=self.settings.inbound_email_domain, sender=sender
            )

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        try:
            return await asyncio.wait_for(self._data(envelope), ANSWER_SECONDS)
        except TimeoutError:
            # the storing thread, if it began, goes on to its end: a retry is then a repeat
            log.warning("email not answered in time")
            return TRY_LATER

    async def _data(self, envelope: Envelope) -> str:
        # reading every part's headers (a message may have thousands of parts): not on
        # the event loop, where the other sessions wait, and a few messages at a time
        most = self.settings.email_max_attachments
        try:
            message = await anyio.to_thread.run_sync(read, envelope, most, limiter=self.reading)
        except TooManyAttachments:
            metrics.REFUSED.labels("attachments").inc()
            return (
                f"552 5.3.4 Too many attachments: at most {most} CSV, JSON or NDJSON "
                "attachments a message (HEADWATER_EMAIL_MAX_ATTACHMENTS)"
            )
        if not message.found:
            metrics.REFUSED.labels("no_attachment").inc()
            log.info("email refused: no usable attachment", ignored=len(message.ignored))
            return NOTHING_USABLE
        digest = message.digest
        message_id = digest.message_id or f"<sha256-{digest.sha256}@headwater>"
        sender = (envelope.mail_from or "").lower()
        taken = 0
        for to in getattr(envelope, "headwater_recipients", []):
            try:
                taken += await self._take(to, message_id, sender, message)
            except Exception as exc:
                log.error("email not stored", error=str(exc).splitlines()[0])
                return TRY_LATER
        metrics.MESSAGES.inc()
        return f"250 2.0.0 Accepted: {taken} attachment(s) became transactions"

    async def _take(
        self,
        to: Recipient,
        message_id: str,
        sender: str,
        message: Message,
    ) -> int:
        """`_store` on a thread that runs to its end even if the connection drops or
        times out meanwhile: once its unit of work has committed, the message is
        accepted, and only that thread knows whether it did (contract 12)."""
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(None, self._store, to, message_id, sender, message)
        return await asyncio.shield(work)

    def _store(
        self,
        to: Recipient,
        message_id: str,
        sender: str,
        message: Message,
    ) -> int:
        """Store the attachments (decoded from the spool a piece at a time), then their
        transactions and the message in one unit of work; a Message-ID seen in 24 h
        stores nothing. How many transactions. The stored bytes are removed only when
        that unit of work did not commit."""
        if self._seen(to, message_id):
            log.info("email repeated: stored once", inbox_id=str(to.inbox_id))
            return 0
        stored: list[tuple[Attachment, uuid.UUID, str, Any]] = []
        ids: list[uuid.UUID] | None = None
        try:
            for attachment in message.found:
                file_id = uuid.uuid4()
                key = self.store.object_key(company_id=to.company_id, file_id=file_id)
                writer = self.store.incoming_file(key)
                try:
                    for piece in mime.body(message.spool, attachment.leaf, attachment.encoding):
                        writer.write(piece)
                    writer.commit()
                except BaseException:
                    writer.discard()
                    raise
                stored.append((attachment, file_id, key, writer))
            ids = self._accept(to, message_id, sender, message, stored)
        finally:
            if ids is None:  # not committed, or a repeat that arrived meanwhile
                for _, _, key, _ in stored:
                    self.store.delete(key)
        if ids is None:
            log.info("email repeated: stored once", inbox_id=str(to.inbox_id))
            return 0
        metrics.ATTACHMENTS.inc(len(ids))
        log.info(
            "email received",
            inbox_id=str(to.inbox_id),
            transaction_ids=[str(i) for i in ids],
            ignored=len(message.ignored),
        )
        return len(ids)

    def _seen(self, to: Recipient, message_id: str) -> bool:
        with self.db.read_connection() as connection:
            return inboxes.seen(connection, to.inbox_id, message_id)

    def _accept(
        self,
        to: Recipient,
        message_id: str,
        sender: str,
        message: Message,
        stored: list[tuple[Attachment, uuid.UUID, str, Any]],
    ) -> list[uuid.UUID] | None:
        """The transactions made, or None when another copy of the message took its
        Message-ID first (nothing is then committed)."""
        attachments = [
            inboxes.StoredAttachment(
                name=attachment.name,
                content_type=attachment.content_type,
                file_id=file_id,
                key=key,
                size=writer.size,
                etag=writer.etag,
            )
            for attachment, file_id, key, writer in stored
        ]
        with self.db.begin() as connection:
            ids = inboxes.accept_message(
                connection,
                to,
                message_id=message_id,
                sender=sender,
                subject=message.digest.subject,
                attachments=attachments,
                ignored=message.ignored,
                store=self.store,
                replies=self.replies,
            )
        return ids


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    if not (settings.smtp_tls_cert_file and settings.smtp_tls_key_file):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(settings.smtp_tls_cert_file), str(settings.smtp_tls_key_file))
    return context


async def serve(settings: Settings, host: str, port: int, *, ready: Path | None = None) -> None:
    """Run the SMTP server until cancelled."""
    memory.return_large_blocks()  # a message's big buffers go back to the system
    db = Database(settings)
    handler = Handler(db, make_store(settings), settings)
    context = tls_context(settings)
    loop = asyncio.get_running_loop()
    gate = Connections(most=settings.smtp_max_connections, per_address=MAX_PER_ADDRESS)
    spool = settings.data_dir / "smtp-spool"
    spool.mkdir(parents=True, exist_ok=True)
    server = await loop.create_server(
        lambda: BoundedSMTP(
            handler,
            gate=gate,
            spool_dir=spool,
            data_size_limit=settings.max_email_bytes,
            hostname=settings.inbound_email_domain,
            ident="Headwater",
            tls_context=context,
            enable_SMTPUTF8=True,
            timeout=settings.smtp_idle_timeout_seconds,
        ),
        host=host,
        port=port,
    )
    bound = server.sockets[0].getsockname()[1]
    log.info("smtp listening", host=host, port=bound, starttls=context is not None)
    if ready is not None:
        ready.write_text(str(bound))
    try:
        await server.serve_forever()
    finally:
        server.close()
        db.dispose()
