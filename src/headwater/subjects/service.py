"""Erasures and suppressions as the API asks for them (contract section 17), and the
erasure queue the worker takes them from (`jobs.Queue`; `runner` runs one).

An erasure keeps its subjects only as digests (`ingestion.subjects`): the plain values
live in the request and nowhere else, not in the database, not in a log line.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.orm import Session

from headwater import jobs, wakeups
from headwater.db import Database
from headwater.identity.tokens import Principal
from headwater.ingestion import api as ingestion
from headwater.kit.actor import Actor
from headwater.kit.clock import utcnow_ms
from headwater.kit.pagination import paginate
from headwater.subjects.errors import ErasureNotFound, SuppressionNotFound
from headwater.subjects.models import FAILED, QUEUED, RUNNING, Erasure
from headwater.subjects.schemas import (
    ErasureCounts,
    ErasureCreate,
    ErasureQuery,
    ErasureRead,
    SuppressionRead,
)

QUEUE = jobs.Queue(
    model=Erasure, state=Erasure.status, queued=QUEUED, running=RUNNING, wakeup="erasures"
)


def create(session: Session, caller: Principal, body: ErasureCreate) -> Erasure:
    """Queue an erasure of the caller's company's subjects (403 for a client the token may
    not use, 404 for a dataset the client does not have); with `suppress`, the
    suppressions are in force from this commit on."""
    company_id = caller.actor.company_id
    if body.dataset_id is not None and body.client_id is not None:
        ingestion.dataset_for(session, caller, body.client_id, body.dataset_id)
    elif body.client_id is not None:
        ingestion.usable_client(session, caller, body.client_id)
    connection = session.connection()
    per_subject = ingestion.subject_digests(connection, company_id, body.subjects)
    digests = list(dict.fromkeys(d for found in per_subject for d in found))
    erasure = Erasure(
        company_id=company_id,
        id=uuid.uuid4(),
        client_id=body.client_id,
        dataset_id=body.dataset_id,
        client_ids=[] if body.client_id is not None else list(caller.client_ids),
        subject_count=len(set(body.subjects)),
        suppress=body.suppress,
        digests=[digest.hex() for digest in digests],
        status=QUEUED,
        records=0,
        quarantined_rows=0,
        files=0,
        exports=0,
        attempts=0,
        author_id=caller.actor.author_id,
        created_at=utcnow_ms(),
    )
    session.add(erasure)
    session.flush()
    wakeups.mark(connection, "erasures")
    if body.suppress:
        unique = list({tuple(found): None for found in per_subject})
        # a token limited to some clients suppresses within them, never in the others
        clients: list[str | None] = (
            [body.client_id] if body.client_id is not None else [*caller.client_ids] or [None]
        )
        for client_id in clients:
            ingestion.suppress(
                connection,
                company_id=company_id,
                erasure_id=erasure.id,
                client_id=client_id,
                dataset_id=body.dataset_id,
                subjects=unique,
            )
    return erasure


def _visible(caller: Principal) -> Any:
    """The erasures a caller may read: its company's, and, when its token names some
    clients, those made within one of them, and those it made itself across its clients."""
    statement = select(Erasure).where(Erasure.company_id == caller.actor.company_id)
    if caller.client_ids:
        statement = statement.where(
            Erasure.client_id.in_(caller.client_ids)
            | (Erasure.client_id.is_(None) & (Erasure.author_id == caller.actor.author_id))
        )
    return statement


def get(session: Session, caller: Principal, erasure_id: uuid.UUID) -> Erasure:
    erasure: Erasure | None = session.scalars(
        _visible(caller).where(Erasure.id == erasure_id)
    ).one_or_none()
    if erasure is None:
        raise ErasureNotFound(f"No erasure {erasure_id}.")
    return erasure


def list_erasures(
    session: Session, caller: Principal, query: ErasureQuery
) -> tuple[Sequence[Erasure], int]:
    statement = _visible(caller)
    if query.status is not None:
        statement = statement.where(Erasure.status == query.status)
    return paginate(session, statement, Erasure.created_at.desc(), Erasure.id, params=query)


def view(erasure: Any) -> ErasureRead:
    return ErasureRead(
        erasure_id=erasure.id,
        status=erasure.status,
        subject_count=erasure.subject_count,
        suppress=erasure.suppress,
        client_id=erasure.client_id,
        dataset_id=erasure.dataset_id,
        counts=ErasureCounts(
            records=erasure.records,
            quarantined_rows=erasure.quarantined_rows,
            files=erasure.files,
            exports=erasure.exports,
        ),
        error=erasure.error,
        created_at=erasure.created_at,
        started_at=erasure.started_at,
        completed_at=erasure.completed_at,
    )


def summary(erasure: Any) -> dict[str, Any]:
    """The erasure as its event and activity entry carry it: counts, never subjects."""
    return view(erasure).model_dump(mode="json")


# --- suppressions -----------------------------------------------------------------------------


def list_suppressions(
    session: Session, caller: Principal, query: Any
) -> tuple[list[SuppressionRead], int]:
    rows, total = ingestion.suppressions(session, caller.actor.company_id, caller.client_ids, query)
    return [suppression_view(row) for row in rows], total


def suppression_view(row: Any) -> SuppressionRead:
    return SuppressionRead(
        suppression_id=row.id,
        erasure_id=row.erasure_id,
        client_id=row.client_id,
        dataset_id=row.dataset_id,
        created_at=row.created_at,
    )


def lift(session: Session, caller: Principal, suppression_id: uuid.UUID) -> None:
    """Lift a suppression of the caller's company (404 for any other), with its activity
    entry: the subject's later records are stored again."""
    from headwater.activity import service as activity

    company_id = caller.actor.company_id
    row = ingestion.find_suppression(session, company_id, caller.client_ids, suppression_id)
    if row is None:
        raise SuppressionNotFound(f"No suppression {suppression_id}.")
    before = suppression_view(row).model_dump(mode="json")
    session.expunge(row)
    ingestion.lift_suppression(session.connection(), company_id, suppression_id)
    activity.record(
        session,
        actor=Actor(company_id=company_id, author_id=caller.actor.author_id),
        action="delete",
        resource_type="suppression",
        resource_id=suppression_id,
        before=before,
        after=None,
    )


# --- the worker's side ------------------------------------------------------------------------


def claim_next(
    db: Database, *, worker: str, stale: timedelta, max_attempts: int
) -> uuid.UUID | None:
    """Take the oldest erasure that is queued, or running under a claim gone stale (its
    worker died); one past its attempts fails for good."""

    def exhausted(connection: Connection, row: Any, now: datetime) -> None:
        connection.execute(
            update(Erasure)
            .where(Erasure.id == row.id)
            .values(
                status=FAILED,
                error=f"the erasure failed {row.attempts} times",
                completed_at=now,
                claimed_by=None,
            )
        )

    row = jobs.claim(
        db,
        QUEUE,
        worker=worker,
        stale=stale,
        max_attempts=max_attempts,
        exhausted=exhausted,
        values={"started_at": lambda now: now},
    )
    return None if row is None else uuid.UUID(str(row.id))


def release(db: Database, erasure_id: uuid.UUID, *, worker: str, handed_back: bool = False) -> None:
    jobs.release(db, QUEUE, erasure_id, worker=worker, handed_back=handed_back)
