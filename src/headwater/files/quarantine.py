"""Quarantined rows: read, and resubmitted against the dataset's current schema."""

from __future__ import annotations

import csv
import io
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection, Text, cast, delete, select, update
from sqlalchemy.orm import Session

from headwater.db import Database
from headwater.files.errors import NothingToResubmit, NotQuarantined
from headwater.files.models import QuarantinedRow
from headwater.files.processing import MAX_ROW_ERRORS, Tally
from headwater.files.schemas import QuarantineQuery
from headwater.identity.tokens import Principal
from headwater.ingestion import api as ingestion
from headwater.kit.clock import utcnow_ms
from headwater.kit.pagination import paginate


def quarantined(
    session: Session, caller: Principal, transaction_id: uuid.UUID, query: QuarantineQuery
) -> tuple[Sequence[QuarantinedRow], int]:
    transaction = ingestion.file_transaction(session, caller, transaction_id)
    if transaction.status == ingestion.Status.PROCESSING:
        return [], 0  # its rows are held as they are read, and shown with its outcome
    statement = select(QuarantinedRow).where(QuarantinedRow.transaction_id == transaction_id)
    if query.status == "open":
        statement = statement.where(QuarantinedRow.resolved_by.is_(None))
    elif query.status == "resolved":
        statement = statement.where(QuarantinedRow.resolved_by.is_not(None))
    return paginate(session, statement, QuarantinedRow.seq, params=query)


RESUBMIT_CHUNK = 1000


def resubmit(
    db: Database,
    caller: Principal,
    transaction_id: uuid.UUID,
    corrections: Mapping[int, dict[str, Any]] | None = None,
) -> ingestion.TransactionRead:
    """Validate a file transaction's open quarantined rows against the dataset's current
    schema in a new transaction (`resubmit_of` the old one): valid rows are stored, the
    others move to it with their new errors. With `corrections` (data by line), only
    those rows, each with its corrected data; a line that is not an open quarantined row
    of the transaction refuses them all (400). One database transaction: all of it
    happens, or none. Answers the new transaction as read after the commit."""
    with db.read_session() as session:
        source = ingestion.file_transaction(session, caller, transaction_id)
    if source.status == ingestion.Status.PROCESSING:
        raise NothingToResubmit(f"Transaction {transaction_id} is still processing.")
    new_id = uuid.uuid4()
    now = utcnow_ms()
    with db.begin() as connection:
        # resubmissions of one transaction take turns: a second finds the rows the first
        # resolved or moved, not the rows it read (PostgreSQL; SQLite has one writer)
        target = ingestion.file_target(connection, transaction_id, lock=True, steps_now=True)
        check = target.check
        tally = Tally()
        after = 0
        found: set[int] = set()
        while True:
            chosen = select(
                QuarantinedRow.seq,
                QuarantinedRow.line,
                QuarantinedRow.record,
                QuarantinedRow.data,
                QuarantinedRow.errors,
            ).where(
                QuarantinedRow.transaction_id == transaction_id,
                QuarantinedRow.resolved_by.is_(None),
                QuarantinedRow.seq > after,
            )
            if corrections is not None:
                chosen = chosen.where(QuarantinedRow.line.in_(list(corrections)))
            rows = connection.execute(
                chosen.order_by(QuarantinedRow.seq).limit(RESUBMIT_CHUNK)
            ).all()
            if not rows:
                break
            after = rows[-1].seq
            stored: list[dict[str, Any]] = []
            for row in rows:
                tally.received += 1
                errors: list[dict[str, Any]] = row.errors
                data = row.data
                moved: dict[str, Any] = {}
                if corrections is not None:
                    found.add(row.line)
                    data = corrections[row.line]
                    moved = {"data": data, "raw": None}
                if data is not None:
                    cleaned, errors = ingestion.check_one(check, data)
                    if not errors:
                        stored.append(cleaned)
                        connection.execute(
                            update(QuarantinedRow)
                            .where(QuarantinedRow.seq == row.seq)
                            .values(resolved_by=new_id)
                        )
                        continue
                tally.invalid(row.record, row.line, errors)
                connection.execute(
                    update(QuarantinedRow)
                    .where(QuarantinedRow.seq == row.seq)
                    .values(transaction_id=new_id, errors=errors[:MAX_ROW_ERRORS], **moved)
                )
            kept = tally.kept(ingestion.transform(check, stored))
            tally.claimed += ingestion.store_rows(connection, target, kept, transaction_id=new_id)
        if corrections is not None and len(found) < len(corrections):
            missing = sorted(set(corrections) - found)
            raise NotQuarantined(
                f"Lines {missing} are not open quarantined rows of transaction "
                f"{transaction_id}; nothing was resubmitted.",
                errors=[
                    {"location": "body", "field": "/rows", "message": f"line {line} not open"}
                    for line in missing[:MAX_ROW_ERRORS]
                ],
            )
        if not tally.received:
            raise NothingToResubmit(f"Transaction {transaction_id} has no open quarantined rows.")
        ingestion.record_finished(
            connection,
            source,
            target,
            transaction_id=new_id,
            author_id=caller.author_id,
            started_at=now,
            **tally.columns(),
        )
    with db.read_session() as session:
        return ingestion.transaction_read(session, caller, new_id)


# --- erasure (contract section 17) ------------------------------------------------------------

ERASE_SCAN = 1000


def _values(row: Any) -> list[str]:
    """A quarantined row's whole values: its JSON strings (and integers), or the cells of
    a line that could not be read (as JSON if it is JSON, else as CSV)."""
    data = None if row.data is None else orjson.loads(row.data)  # its JSON text: orjson
    if data is not None:
        return list(ingestion.whole_values(data))
    if not row.raw:
        return []
    try:
        return list(ingestion.whole_values(orjson.loads(row.raw)))
    except orjson.JSONDecodeError:
        pass
    # a line that is not JSON: its JSON string literals, and its CSV cells
    found = [cell for line in csv.reader(io.StringIO(row.raw)) for cell in line]
    for literal in _JSON_STRING.findall(row.raw):
        try:
            found.append(orjson.loads(literal))
        except orjson.JSONDecodeError:
            continue
    return found


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def matching_rows(
    connection: Connection,
    dataset_pk: uuid.UUID,
    matches: Callable[[str], bool],
    *,
    after: int,
    limit: int = ERASE_SCAN,
) -> tuple[list[tuple[int, uuid.UUID]], int | None]:
    """Look at up to `limit` of the dataset's quarantined rows after `seq` `after`: those
    in which a value `matches` (seq, transaction), and the last `seq` looked at (None:
    there are no more). A read: the caller removes them (`remove_rows`) in a short write
    of its own, so no writer waits while rows are parsed (SQLite has one)."""
    rows = connection.execute(
        select(
            QuarantinedRow.seq,
            QuarantinedRow.transaction_id,
            cast(QuarantinedRow.data, Text).label("data"),
            QuarantinedRow.raw,
        )
        .where(QuarantinedRow.dataset_pk == dataset_pk, QuarantinedRow.seq > after)
        .order_by(QuarantinedRow.seq)
        .limit(limit)
    ).all()
    if not rows:
        return [], None
    hit = [(row.seq, row.transaction_id) for row in rows if any(map(matches, _values(row)))]
    return hit, rows[-1].seq


def remove_rows(connection: Connection, company_id: uuid.UUID, seqs: Sequence[int]) -> int:
    """Remove these quarantined rows of the company (those still there); how many. By
    their whole key: given a thousand `seq`s alone, a PostgreSQL without statistics read
    the whole table (as `ingestion.erasure` found for records)."""
    result = connection.execute(
        delete(QuarantinedRow).where(
            QuarantinedRow.company_id == company_id, QuarantinedRow.seq.in_(list(seqs))
        )
    )
    return int(result.rowcount)


def remove_of(connection: Connection, transaction_ids: Sequence[uuid.UUID]) -> int:
    """Remove the quarantined rows of these transactions (retention); how many."""
    if not transaction_ids:
        return 0
    result = connection.execute(
        delete(QuarantinedRow).where(QuarantinedRow.transaction_id.in_(list(transaction_ids)))
    )
    return int(result.rowcount)
