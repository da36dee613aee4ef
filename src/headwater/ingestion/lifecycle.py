"""A transaction's one life (contract section 10): how it begins, the statuses it may
move through, and `finish`, the one way to a final status, which writes its event.

Every channel's transaction is made by `new` and every change of status goes through
`advance` or `finish`; no other code sets `transactions.status`. A final status is
reached once: `finish` on a transaction that is final already changes nothing and
answers False. The event (`transaction.<status>`, its `data` the transaction as `GET
/platform/v1/transactions/{id}` answers it) goes into the outbox in the caller's
database transaction, so the change and its event commit together or not at all.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from sqlalchemy import Connection, insert, update

from headwater import wakeups
from headwater.events import outbox
from headwater.ingestion.models import Transaction
from headwater.kit.clock import iso_ms


class Status(StrEnum):
    AWAITING_UPLOAD = "awaiting_upload"
    PROCESSING = "processing"
    COMPLETED = "completed"
    REJECTED = "rejected"
    FAILED = "failed"
    EXPIRED = "expired"


FINAL = frozenset({Status.COMPLETED, Status.REJECTED, Status.FAILED, Status.EXPIRED})
# The statuses a transaction may begin in, and where each status may go.
BEGINS = frozenset({Status.AWAITING_UPLOAD, Status.PROCESSING, Status.COMPLETED, Status.REJECTED})
TRANSITIONS: Mapping[Status, frozenset[Status]] = {
    Status.AWAITING_UPLOAD: frozenset({Status.PROCESSING, Status.REJECTED, Status.EXPIRED}),
    Status.PROCESSING: frozenset({Status.COMPLETED, Status.REJECTED, Status.FAILED}),
    **{status: frozenset() for status in FINAL},
}

Channel = Literal["api", "upload", "sftp", "email"]
CHANNELS: tuple[str, ...] = Channel.__args__  # type: ignore[attr-defined]
Kind = Literal["json", "file"]


class IllegalTransition(Exception):
    """A status change the lifecycle does not have: a programming error, never input."""


def _sources(to: Status) -> list[str]:
    """The statuses from which a transaction may move to `to`."""
    return [source for source, targets in TRANSITIONS.items() if to in targets]


def new(
    *,
    channel: Channel,
    kind: Kind,
    status: Status,
    company_id: uuid.UUID,
    dataset_pk: uuid.UUID,
    client_id: str,
    dataset_id: str,
    author_id: uuid.UUID,
    created_at: datetime,
    schema_version: int | None = None,
    transaction_id: uuid.UUID | None = None,
    **columns: Any,
) -> dict[str, Any]:
    """A transaction row's columns, for any channel. Final ones (a push, a resubmit) are
    stored with their event by the sink; others by `begin`."""
    if status not in BEGINS:
        raise IllegalTransition(f"a transaction cannot begin {status}")
    if channel not in CHANNELS:
        raise IllegalTransition(f"no channel {channel!r}")
    row = {
        "id": transaction_id or uuid.uuid4(),
        "company_id": company_id,
        "dataset_pk": dataset_pk,
        "client_id": client_id,
        "dataset_id": dataset_id,
        "kind": kind,
        "channel": channel,
        "status": status.value,
        "schema_version": schema_version,
        "transform_version": None,
        "records_received": 0,
        "records_processed": None,
        "records_accepted": 0,
        "records_rejected": 0,
        "records_filtered": 0,
        "records_duplicates": 0,
        "records_suppressed": 0,
        "file_erased": False,
        "error_count": 0,
        "errors": [],
        "file_name": None,
        "file_size": None,
        "content_type": None,
        "author_id": author_id,
        "created_at": created_at,
        "uploaded_at": None,
        "started_at": None,
        "completed_at": created_at if status in FINAL else None,
        "resubmit_of": None,
    }
    row.update(columns)
    return row


def begin(connection: Connection, row: Mapping[str, Any]) -> None:
    """Store a transaction that is not final yet (a file awaiting upload or processing)."""
    if row["status"] in FINAL:
        raise IllegalTransition("a final transaction is stored with its event (`finished`)")
    connection.execute(insert(Transaction), [dict(row)])


def advance(connection: Connection, transaction_id: uuid.UUID, to: Status, **columns: Any) -> bool:
    """Move a transaction to a status that is not final (a file's upload arrived:
    `processing`); False if it was not in a status that may move there."""
    if to in FINAL:
        raise IllegalTransition("a final status is reached through `finish`")
    result = connection.execute(
        update(Transaction)
        .where(Transaction.id == transaction_id, Transaction.status.in_(_sources(to)))
        .values(status=str(to), **columns)
    )
    return bool(result.rowcount)


def note(connection: Connection, transaction_id: uuid.UUID, **columns: Any) -> None:
    """Change columns other than the status (a file's progress, when processing began)
    of a transaction that is not final."""
    if "status" in columns:
        raise IllegalTransition("the status changes through `advance` or `finish`")
    connection.execute(
        update(Transaction)
        .where(Transaction.id == transaction_id, Transaction.status.not_in(list(FINAL)))
        .values(**columns)
    )


COLUMNS = tuple(Transaction.__table__.c)


def finish(
    connection: Connection, transaction_id: uuid.UUID, status: Status, **columns: Any
) -> bool:
    """Give the transaction its final status (with `columns`) and write its event, in the
    caller's database transaction; False, changing nothing, if it was final already."""
    if status not in FINAL:
        raise IllegalTransition(f"{status} is not final")
    row = connection.execute(
        update(Transaction)
        .where(Transaction.id == transaction_id, Transaction.status.in_(_sources(status)))
        .values(status=str(status), **columns)
        .returning(*COLUMNS)
    ).one_or_none()
    if row is None:
        return False
    outbox.write(connection, [finished(row._asdict())])
    mark_stored(connection, [row._asdict()])
    return True


def stored_wakeups(transactions: Sequence[Mapping[str, Any]]) -> set[tuple[wakeups.Topic, str]]:
    """What final transactions leave for others once committed (`wakeups`): their
    events to deliver, and the records of completed ones for the feed's readers."""
    found: set[tuple[wakeups.Topic, str]] = {("events", "")} if transactions else set()
    return found | {
        ("feed", t["dataset_pk"].hex)
        for t in transactions
        if t["status"] == Status.COMPLETED and t.get("records_accepted")
    }


def mark_stored(connection: Connection, transactions: Sequence[Mapping[str, Any]]) -> None:
    """Mark the caller's database transaction with `stored_wakeups`."""
    for topic, key in stored_wakeups(transactions):
        wakeups.mark(connection, topic, key)


def finished(row: Mapping[str, Any]) -> dict[str, Any]:
    """The event of a transaction row in its final status: `transaction.<status>`,
    naming the transaction (its data, `event_json`)."""
    status = row["status"]
    if status not in FINAL:
        raise IllegalTransition(f"{status} is not final")
    return outbox.event(
        f"transaction.{status}",  # type: ignore[arg-type]
        company_id=row["company_id"],
        transaction_id=row["id"],
        created_at=row["completed_at"],
    )


def event_json(event: Any, transaction: Mapping[str, Any] | None) -> dict[str, Any]:
    """An event as the feed and webhooks carry it: a transaction's with the transaction
    (its row, final and so unchanged since) as `data`."""
    if event.transaction_id is None:
        return outbox.as_json(event)
    assert transaction is not None, "a transaction's event and its transaction go together"
    return outbox.as_json(event, view(transaction))


def _error(error: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "record": error["record"],
        "path": error["path"],
        "keyword": error["keyword"],
        "message": error["message"],
        "line": error.get("line"),
    }


def _time(value: datetime | None) -> str | None:
    return None if value is None else iso_ms(value)


def records_processed(status: str, processed: int | None, received: int) -> int | None:
    """Rows read so far; once final, every row was read (a push never writes it)."""
    if processed is None and status in FINAL:
        return received
    return processed


def view(row: Mapping[str, Any]) -> dict[str, Any]:
    """A transaction row as `GET /platform/v1/transactions/{id}` answers it (JSON),
    built without a model: a push's event is made on the ingestion hot path."""
    processed = records_processed(row["status"], row["records_processed"], row["records_received"])
    return {
        "transaction_id": str(row["id"]),
        "kind": row["kind"],
        "channel": row["channel"],
        "client_id": row["client_id"],
        "dataset_id": row["dataset_id"],
        "schema_version": row["schema_version"],
        "transform_version": row["transform_version"],
        "status": row["status"],
        "records_received": row["records_received"],
        "records_processed": processed,
        "records_accepted": row["records_accepted"],
        "records_rejected": row["records_rejected"],
        "records_filtered": row["records_filtered"],
        "records_duplicates": row["records_duplicates"],
        "records_suppressed": row["records_suppressed"],
        "file_erased": row["file_erased"],
        "error_count": row["error_count"],
        "errors": [_error(error) for error in row["errors"]],
        "file_name": row["file_name"],
        "file_size": row["file_size"],
        "content_type": row["content_type"],
        "created_at": iso_ms(row["created_at"]),
        "uploaded_at": _time(row["uploaded_at"]),
        "started_at": _time(row["started_at"]),
        "completed_at": _time(row["completed_at"]),
        "resubmit_of": None if row["resubmit_of"] is None else str(row["resubmit_of"]),
    }
