"""Inboxes (operator use cases), the check of an SMTP envelope against them, taking a
message in, and the replies' queue (contract section 12)."""

from __future__ import annotations

import functools
import hashlib
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Insert, bindparam, delete, func, insert, select
from sqlalchemy.orm import Session

from headwater import jobs
from headwater.config import Settings
from headwater.db import UTCDateTime, dialect_insert
from headwater.files import service as files
from headwater.files.stores import Store
from headwater.identity import service as identity
from headwater.identity.tokens import Principal
from headwater.inbox.errors import InboxNotFound
from headwater.inbox.models import Inbox, InboxMessage, InboxMessageId
from headwater.inbox.schemas import InboxQuery, InboxRead
from headwater.ingestion import api as ingestion
from headwater.kit.clock import utcnow, utcnow_ms
from headwater.kit.pagination import paginate

# base32 without padding: 20 characters are 100 random bits
_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
DEDUPE_WINDOW = timedelta(hours=24)


def _local_part() -> str:
    return "in-" + "".join(secrets.choice(_ALPHABET) for _ in range(20))


def view(inbox: Inbox, *, domain: str) -> InboxRead:
    return InboxRead(
        inbox_id=inbox.id,
        address=f"{inbox.local_part}@{domain}",
        client_id=inbox.client_id,
        dataset_id=inbox.dataset_id,
        allowed_senders=list(inbox.allowed_senders),
        created_at=inbox.created_at,
    )


def create_inbox(
    session: Session, *, client_id: str, dataset_id: str, allowed_senders: Sequence[str]
) -> Inbox:
    """An inbox for the dataset (404 if the client has no such dataset)."""
    client = identity.get_client_by_id(session, client_id)
    dataset = ingestion.find_dataset(session, client_id=client_id, dataset_id=dataset_id)
    inbox = Inbox(
        id=uuid.uuid4(),
        local_part=_local_part(),
        company_id=client.company_id,
        client_id=client_id,
        dataset_id=dataset.dataset_id,
        allowed_senders=list(dict.fromkeys(allowed_senders)),
        author_id=uuid.uuid4(),
        created_at=utcnow(),
    )
    session.add(inbox)
    session.flush()
    return inbox


def ensure_inbox(
    session: Session, *, client_id: str, dataset_id: str, allowed_senders: Sequence[str]
) -> Inbox:
    """The dataset's first inbox, made if it has none (the demo's)."""
    found = session.scalars(
        select(Inbox)
        .where(Inbox.client_id == client_id, Inbox.dataset_id == dataset_id)
        .order_by(Inbox.created_at)
        .limit(1)
    ).first()
    if found is not None:
        return found
    return create_inbox(
        session, client_id=client_id, dataset_id=dataset_id, allowed_senders=allowed_senders
    )


def get_inbox(session: Session, inbox_id: uuid.UUID) -> Inbox:
    inbox = session.get(Inbox, inbox_id)
    if inbox is None:
        raise InboxNotFound(f"No inbox {inbox_id}.")
    return inbox


def list_inboxes(session: Session, query: InboxQuery) -> tuple[Sequence[Inbox], int]:
    statement = select(Inbox)
    if query.client_id is not None:
        identity.get_client_by_id(session, query.client_id)
        statement = statement.where(Inbox.client_id == query.client_id)
    return paginate(session, statement, Inbox.created_at, Inbox.id, params=query)


def update_inbox(session: Session, inbox_id: uuid.UUID, allowed_senders: Sequence[str]) -> Inbox:
    inbox = get_inbox(session, inbox_id)
    inbox.allowed_senders = list(dict.fromkeys(allowed_senders))
    session.flush()
    return inbox


def delete_inbox(session: Session, inbox_id: uuid.UUID) -> None:
    get_inbox(session, inbox_id)
    session.execute(delete(Inbox).where(Inbox.id == inbox_id))


# --- the SMTP envelope ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recipient:
    """An inbox as the SMTP server sees it for one message."""

    inbox_id: uuid.UUID
    company_id: uuid.UUID
    client_id: str
    dataset_id: str
    author_id: uuid.UUID

    def principal(self) -> Principal:
        """The inbox as a caller of the ingestion core: its company, its one client."""
        return Principal(
            subject=f"inbox:{self.inbox_id}",
            author_id=self.author_id,
            company_id=self.company_id,
            client_ids=(self.client_id,),
            scopes=frozenset({"data:read", "data:write"}),
        )


def sender_allowed(allowed: Sequence[str], sender: str) -> bool:
    sender = sender.strip().lower()
    domain = "@" + sender.rpartition("@")[2]
    return any(rule in (sender, domain) for rule in allowed)


_INBOX_AT = select(
    Inbox.id,
    Inbox.company_id,
    Inbox.client_id,
    Inbox.dataset_id,
    Inbox.author_id,
    Inbox.allowed_senders,
).where(Inbox.local_part == bindparam("local_part"))


def recipient(
    connection: Connection, address: str, *, domain: str, sender: str
) -> Recipient | None:
    """The inbox at `address` if it exists and takes mail from `sender`; else None (the
    same 550 whichever it is)."""
    local, _, at = address.strip().lower().rpartition("@")
    if at != domain.lower() or not local:
        return None
    inbox = connection.execute(_INBOX_AT, {"local_part": local}).first()
    if inbox is None or not sender_allowed(inbox.allowed_senders, sender):
        return None
    return Recipient(inbox.id, inbox.company_id, inbox.client_id, inbox.dataset_id, inbox.author_id)


def _message_key(message_id: str) -> str:
    return hashlib.sha256(message_id.encode("utf-8", "surrogateescape")).hexdigest()


@functools.cache
def _claim(dialect: str) -> Insert:
    """`claim_message`'s statement, built once a dialect (values bound at each call)."""
    table = InboxMessageId.__table__
    upsert = dialect_insert(dialect)(table)
    return upsert.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=["inbox_id", "message_key", "company_id"],
        set_={"received_at": upsert.excluded.received_at},
        where=table.c.received_at < bindparam("taken_before", type_=UTCDateTime()),
    ).returning(table.c.inbox_id)


def claim_message(connection: Connection, to: Recipient, message_id: str) -> bool:
    """Take this Message-ID for this inbox, unless it was taken within the last 24 h:
    whether this copy is the one to store. The primary key decides between copies that
    arrive at once (on PostgreSQL the second waits for the first's commit, then finds
    its row); the first statement of the message's unit of work, so a repeat stores
    nothing."""
    now = utcnow_ms()
    claimed = connection.execute(
        _claim(connection.dialect.name),
        {
            "inbox_id": to.inbox_id,
            "company_id": to.company_id,
            "message_key": _message_key(message_id),
            "received_at": now,
            "taken_before": now - DEDUPE_WINDOW,
        },
    )
    return claimed.first() is not None


_RECEIVED = select(InboxMessageId.received_at).where(
    InboxMessageId.inbox_id == bindparam("inbox_id"),
    InboxMessageId.message_key == bindparam("message_key"),
)


def seen(connection: Connection, inbox_id: uuid.UUID, message_id: str) -> bool:
    """Whether this Message-ID reached this inbox within the last 24 h (a fast answer
    before storing anything; `claim_message` is the one that decides)."""
    received = connection.execute(
        _RECEIVED, {"inbox_id": inbox_id, "message_key": _message_key(message_id)}
    ).scalar()
    return received is not None and received >= utcnow() - DEDUPE_WINDOW


@dataclass(frozen=True, slots=True)
class StoredAttachment:
    """An attachment of a message, stored whole in the file store."""

    name: str
    content_type: str
    file_id: uuid.UUID
    key: str
    size: int
    etag: str


def accept_message(
    connection: Connection,
    to: Recipient,
    *,
    message_id: str,
    sender: str,
    subject: str,
    attachments: Sequence[StoredAttachment],
    ignored: Sequence[str],
    store: Store,
    replies: bool,
) -> list[uuid.UUID] | None:
    """A message for an inbox, in the caller's database transaction: its Message-ID
    claimed, each attachment a transaction with a queued job (`files.service.
    accept_stored`), the message recorded. The transactions made, or None when another
    copy of the message took its Message-ID first (nothing was then written)."""
    if not claim_message(connection, to, message_id):
        return None
    caller = to.principal()
    ids = [
        files.accept_stored(
            connection,
            caller,
            channel="email",
            client_id=to.client_id,
            dataset_id=to.dataset_id,
            file_name=attachment.name[:255],
            content_type=attachment.content_type,
            store=store,
            key=attachment.key,
            file_id=attachment.file_id,
            size=attachment.size,
            etag=attachment.etag,
        )
        for attachment in attachments
    ]
    record_message(
        connection,
        to,
        message_id=message_id,
        sender=sender,
        subject=subject,
        transaction_ids=ids,
        ignored=ignored,
        replies=replies,
    )
    return ids


def record_message(
    connection: Connection,
    to: Recipient,
    *,
    message_id: str,
    sender: str,
    subject: str,
    transaction_ids: Sequence[uuid.UUID],
    ignored: Sequence[str],
    replies: bool,
) -> None:
    """The message, with its reply queued (`pending`) when a relay is configured."""
    now = utcnow_ms()
    connection.execute(
        insert(InboxMessage),
        [
            {
                "id": uuid.uuid4(),
                "inbox_id": to.inbox_id,
                "company_id": to.company_id,
                "message_id": message_id[:998],
                "sender": sender[:320],
                "subject": subject[:998],
                "transaction_ids": [str(t) for t in transaction_ids],
                "ignored": list(ignored),
                "received_at": now,
                "reply_state": "pending" if replies else "none",
                "attempts": 0,
                "next_attempt_at": now,
            }
        ],
    )


# --- replies ----------------------------------------------------------------------------------


# the replies to send: the job queue's jobs that fall due
REPLIES = jobs.Due(
    model=InboxMessage,
    state=InboxMessage.reply_state,
    pending="pending",
    due=InboxMessage.next_attempt_at,
    leased=InboxMessage.leased_until,
)


def claim_reply(connection: Connection, *, lease: timedelta) -> tuple[uuid.UUID, datetime] | None:
    """Lease the oldest due reply (`jobs.lease`): no other worker sees it due until the
    lease ends, and it is due again then if this one dies. Its id and the lease's end,
    which the caller's later writes must still find (`leased`); None when none is due."""
    rows, until = jobs.lease(connection, REPLIES, now=utcnow(), duration=lease, limit=1)
    return (rows[0].id, until) if rows else None


def leased(session: Session, message_id: uuid.UUID, until: datetime) -> InboxMessage | None:
    """The reply, locked and its lease ended, if this worker's lease on it (`until`)
    still holds; the caller writes what became of it."""
    if not jobs.holds(session.connection(), REPLIES, message_id, until):
        return None
    message = session.scalars(select(InboxMessage).where(InboxMessage.id == message_id)).one()
    message.leased_until = None
    return message


def replies_sent_since(session: Session, sender: str, since: datetime) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(InboxMessage)
            .where(InboxMessage.sender == sender, InboxMessage.replied_at >= since)
        )
        or 0
    )


RETRY_DELAYS = (10, 60, 300, 1800, 7200, 21600)


def retry_later(message: InboxMessage, error: str) -> None:
    message.attempts += 1
    message.last_error = error[:500]
    if message.attempts > len(RETRY_DELAYS):
        message.reply_state = "failed"
        return
    message.next_attempt_at = utcnow() + timedelta(seconds=RETRY_DELAYS[message.attempts - 1])


def relay_settings(settings: Settings) -> dict[str, Any] | None:
    """host, port, user, password of HEADWATER_SMTP_RELAY_URL; None if unset."""
    from urllib.parse import unquote, urlsplit

    if not settings.smtp_relay_url:
        return None
    parts = urlsplit(settings.smtp_relay_url)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 25,
        "user": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
    }
