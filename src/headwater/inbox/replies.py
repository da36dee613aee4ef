"""One reply per message, once all its transactions are final (contract section 12):
sent by the worker from the durable queue (`inbox_messages`) through the relay, threaded
under the original message, at most N per sender per hour."""

from __future__ import annotations

import smtplib
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import make_msgid

import structlog
from sqlalchemy import select

from headwater.config import Settings
from headwater.db import Database
from headwater.identity.tokens import Principal
from headwater.inbox import metrics
from headwater.inbox import service as inboxes
from headwater.inbox.models import InboxMessage
from headwater.ingestion import api as ingestion
from headwater.kit.clock import utcnow

log = structlog.get_logger("headwater.email")

NOT_FINAL_RETRY = timedelta(seconds=5)
MAX_ERRORS = 10


def _outcome(views: list[ingestion.TransactionRead]) -> str:
    statuses = {view.status for view in views}
    if statuses == {"completed"}:
        return "completed"
    if "completed" in statuses:
        return "partly completed"
    return "rejected" if statuses <= {"rejected"} else "failed"


def compose(
    message: InboxMessage, views: list[ingestion.TransactionRead], *, sender_from: str
) -> EmailMessage:
    """The reply: subject `[Headwater] <outcome>: <subject>`, threaded, a text body with
    each attachment's outcome, counts and first errors with their lines."""
    reply = EmailMessage()
    reply["From"] = sender_from
    reply["To"] = message.sender
    original = message.subject or "(no subject)"
    reply["Subject"] = f"[Headwater] {_outcome(views)}: {original}"[:900]
    reply["In-Reply-To"] = message.message_id
    reply["References"] = message.message_id
    reply["Message-ID"] = make_msgid(domain=sender_from.rpartition("@")[2] or None)
    reply["Auto-Submitted"] = "auto-replied"
    lines = [f"Your message {message.message_id} was received. Its attachments:", ""]
    for view in views:
        lines.append(f"- {view.file_name}: {view.status} (transaction {view.transaction_id})")
        lines.append(
            f"  {view.records_received} records: {view.records_accepted} accepted, "
            f"{view.records_rejected} rejected, {view.error_count} errors" + _steps(view)
        )
        for error in view.errors[:MAX_ERRORS]:
            where = f"line {error.line}" if error.line is not None else f"record {error.record}"
            lines.append(f"  {where}, {error.path or '/'}: {error.message}")
        if view.error_count > MAX_ERRORS:
            lines.append(f"  ... and {view.error_count - MAX_ERRORS} more errors")
    for name in message.ignored:
        lines.append(f"- {name}: ignored (not CSV, JSON or NDJSON)")
    reply.set_content("\n".join(lines) + "\n")
    return reply


def _steps(view: ingestion.TransactionRead) -> str:
    """What the dataset's transform steps kept out, where they did."""
    if not view.records_filtered and not view.records_duplicates:
        return ""
    return f"; {view.records_filtered} filtered, {view.records_duplicates} duplicates"


def _send(settings: Settings, reply: EmailMessage) -> None:
    relay = inboxes.relay_settings(settings)
    assert relay is not None
    with smtplib.SMTP(relay["host"], relay["port"], timeout=30) as smtp:
        if relay["user"]:
            smtp.login(relay["user"], relay["password"] or "")
        smtp.send_message(reply)


LEASE = timedelta(seconds=120)  # a reply being sent: longer than the relay's 30 s timeout


def send_due(db: Database, settings: Settings, *, limit: int = 50) -> int:
    """Send up to `limit` replies that are due and whose transactions are all final;
    how many were sent. Each is leased in a short transaction of its own (the job
    queue's `Due` jobs), sent with no database transaction open, then marked sent, so
    any number of workers send each reply once; a worker that dies between the send and
    the mark leaves it due again when its lease ends (sent twice, never a batch again)."""
    sent = 0
    for _ in range(limit):
        with db.begin() as connection:
            claim = inboxes.claim_reply(connection, lease=LEASE)
        if claim is None:
            break
        sent += _reply(db, settings, *claim)
    return sent


def _reply(db: Database, settings: Settings, message_id: uuid.UUID, until: datetime) -> bool:
    """Decide, send and record one claimed reply; whether it was sent."""
    sender_from = settings.email_from or f"no-reply@{settings.inbound_email_domain}"
    with db.read_session() as session:
        message = session.scalars(select(InboxMessage).where(InboxMessage.id == message_id)).one()
        # its company's reader: the inbox may be gone, its transactions are not
        caller = Principal(
            subject=f"inbox:{message.inbox_id}",
            author_id=message.inbox_id,
            company_id=message.company_id,
            client_ids=(),
            scopes=frozenset({"data:read"}),
        )
        try:
            views = [
                ingestion.transaction_read(session, caller, uuid.UUID(t))
                for t in message.transaction_ids
            ]
        except ingestion.TransactionNotFound:
            _record(db, message_id, until, _gone)
            return False
        if any(view.status in ingestion.PENDING_STATUSES for view in views):
            _record(db, message_id, until, _not_final)
            return False
        hour_ago = utcnow() - timedelta(hours=1)
        limited = (
            inboxes.replies_sent_since(session, message.sender, hour_ago)
            >= settings.email_replies_per_sender_per_hour
        )
    if limited:
        metrics.REPLIES.labels("limited").inc()
        log.warning("email reply not sent: sender's hourly limit")
        _record(db, message_id, until, _limited)
        return False
    try:
        _send(settings, compose(message, views, sender_from=sender_from))
    except (OSError, smtplib.SMTPException) as exc:
        metrics.REPLIES.labels("retried").inc()
        log.warning("email reply not sent yet", error=type(exc).__name__)
        error = f"{type(exc).__name__}: {exc}"
        _record(db, message_id, until, lambda m: inboxes.retry_later(m, error))
        return False
    metrics.REPLIES.labels("sent").inc()
    _record(db, message_id, until, _sent)
    return True


def _record(
    db: Database,
    message_id: uuid.UUID,
    until: datetime,
    change: Callable[[InboxMessage], None],
) -> None:
    """Apply `change` to the reply if this worker's lease on it still holds."""
    with db.unit_of_work() as session:
        message = inboxes.leased(session, message_id, until)
        if message is None:
            log.warning("email reply lease lost", message=str(message_id))
            return
        change(message)


def _gone(message: InboxMessage) -> None:
    message.reply_state = "failed"
    message.last_error = "a transaction is gone"


def _not_final(message: InboxMessage) -> None:
    message.next_attempt_at = utcnow() + NOT_FINAL_RETRY


def _limited(message: InboxMessage) -> None:
    message.reply_state = "limited"


def _sent(message: InboxMessage) -> None:
    message.reply_state = "sent"
    message.replied_at = utcnow()
