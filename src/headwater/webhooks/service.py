"""Webhook endpoints (scope `webhooks:manage`): create, read, change, delete, rotate the
secret; their deliveries; replay. Every query starts from the caller's company
(`_owned`), so another company's endpoint answers 404."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, delete, func, literal, select, update
from sqlalchemy.orm import Session

from headwater import wakeups
from headwater.config import Settings
from headwater.db import Database, delete_in_batches
from headwater.events import outbox
from headwater.events.models import Event
from headwater.kit.actor import Actor
from headwater.kit.clock import utcnow_ms
from headwater.kit.pagination import Page, PageQuery, paginate
from headwater.webhooks import addresses, dispatch
from headwater.webhooks.crypto import SecretBox, new_secret
from headwater.webhooks.errors import EndpointNotFound, InvalidWebhookURL
from headwater.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from headwater.webhooks.schemas import (
    AttemptRead,
    DeliveryQuery,
    DeliveryRead,
    EndpointCreate,
    EndpointRead,
    EndpointUpdate,
    ReplayIn,
)

# how long the secret before a rotation still signs deliveries
PREVIOUS_SECRET_HOURS = 24


@dataclass(frozen=True, slots=True)
class UrlRules:
    allow_http: bool
    allow_private: bool

    @classmethod
    def of(cls, settings: Settings) -> UrlRules:
        """The installation's rules (HEADWATER_WEBHOOK_ALLOW_HTTP, _ALLOW_PRIVATE)."""
        return cls(
            allow_http=settings.webhook_allow_http, allow_private=settings.webhook_allow_private
        )


def check_url(url: str, rules: UrlRules) -> None:
    """400 naming why a URL may not receive webhooks (contract section 13)."""
    try:
        target = addresses.parse(url, allow_http=rules.allow_http)
        addresses.check(target, allow_private=rules.allow_private)
    except addresses.Refused as exc:
        raise InvalidWebhookURL(
            f"The URL cannot receive webhooks: {exc}.",
            errors=[{"location": "body", "field": "/url", "message": str(exc)}],
        ) from None


def view(row: WebhookEndpoint) -> EndpointRead:
    return EndpointRead.model_validate(row)


def create_endpoint(
    session: Session, *, actor: Actor, data: EndpointCreate, box: SecretBox, rules: UrlRules
) -> tuple[WebhookEndpoint, str]:
    """The new endpoint and its secret (the only time it is shown, but for rotations)."""
    check_url(data.url, rules)
    now = utcnow_ms()
    endpoint_id = uuid.uuid4()
    secret = new_secret()
    row = WebhookEndpoint(
        id=endpoint_id,
        company_id=actor.company_id,
        url=data.url,
        event_types=list(data.event_types),
        description=data.description,
        status="enabled",
        secret=box.seal(endpoint_id, secret),
        author_id=actor.author_id,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    return row, secret


def _owned(
    session: Session, company_id: uuid.UUID, endpoint_id: uuid.UUID, *, locked: bool = False
) -> WebhookEndpoint:
    """The company's endpoint; `locked`, its row locked before any of its deliveries
    (`dispatch.lock_endpoints`) by a change that writes them."""
    chosen = select(WebhookEndpoint).where(
        WebhookEndpoint.id == endpoint_id,
        WebhookEndpoint.company_id == company_id,
        WebhookEndpoint.status != WebhookEndpoint.DELETED,
    )
    row = session.scalar(chosen.with_for_update(key_share=True) if locked else chosen)
    if row is None:
        raise EndpointNotFound(f"No webhook endpoint has the id {endpoint_id}.")
    return row


def get_endpoint(
    session: Session, *, company_id: uuid.UUID, endpoint_id: uuid.UUID
) -> WebhookEndpoint:
    return _owned(session, company_id, endpoint_id)


def list_endpoints(
    session: Session, *, company_id: uuid.UUID, params: PageQuery
) -> Page[EndpointRead]:
    rows, total = paginate(
        session,
        select(WebhookEndpoint).where(
            WebhookEndpoint.company_id == company_id,
            WebhookEndpoint.status != WebhookEndpoint.DELETED,
        ),
        WebhookEndpoint.created_at,
        WebhookEndpoint.id,
        params=params,
    )
    return Page[EndpointRead].of([view(r) for r in rows], params=params, total=total)


def update_endpoint(
    session: Session,
    *,
    company_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    changes: EndpointUpdate,
    rules: UrlRules,
) -> WebhookEndpoint:
    row = _owned(session, company_id, endpoint_id, locked=True)
    values = changes.changes()
    if "url" in values:
        check_url(values["url"], rules)
    was = row.status
    for name, value in values.items():
        setattr(row, name, list(value) if name == "event_types" else value)
    if values.get("status") == "enabled":
        row.failing_since = None  # a fresh start: five more days before it is disabled again
    row.updated_at = utcnow_ms()
    session.flush()
    if row.status != was:
        dispatch.schedule(session.connection(), row.id, enabled=row.status == "enabled")
    return row


def delete_endpoint(session: Session, *, company_id: uuid.UUID, endpoint_id: uuid.UUID) -> None:
    """The endpoint, gone from the API at once and its deliveries never leased again
    (`WebhookEndpoint.DELETED`); the worker removes them, their attempts and then the
    endpoint after the request, a short database transaction at a time
    (`remove_deleted`). Removed in the request, 100,000 deliveries took 4-5 s in one
    transaction, holding SQLite's one writer (every company's writes), or on PostgreSQL
    the endpoint's row, which the delivery recorder and the company's fan-out wait for."""
    row = _owned(session, company_id, endpoint_id, locked=True)
    row.status = WebhookEndpoint.DELETED
    row.updated_at = utcnow_ms()
    session.flush()


# deliveries a database transaction of `remove_deleted` removes, with their attempts
REMOVAL_BATCH = 5000


def remove_deleted(db: Database, *, batch: int = REMOVAL_BATCH) -> int:
    """Remove the endpoints deleted through the API: each one's deliveries `batch` a
    short database transaction (their attempts go with them, foreign keys), in event
    order through its unique index, then its row (with any delivery a fan-out that
    read it before its deletion added since); how many deliveries went. Stopped
    anywhere, the next run goes on from what is left; two at once remove nothing
    twice."""
    with db.read_connection() as connection:
        deleted = connection.scalars(
            select(WebhookEndpoint.id)
            .where(WebhookEndpoint.status == WebhookEndpoint.DELETED)
            .order_by(WebhookEndpoint.id)
        ).all()
    removed = 0
    for endpoint_id in deleted:
        removed += delete_in_batches(
            db,
            WebhookDelivery.endpoint_id,
            endpoint_id,
            order=WebhookDelivery.event_seq,
            batch=batch,
        )
        with db.begin() as connection:
            dispatch.lock_endpoints(connection, {endpoint_id})
            connection.execute(
                delete(WebhookEndpoint).where(
                    WebhookEndpoint.id == endpoint_id,
                    WebhookEndpoint.status == WebhookEndpoint.DELETED,
                )
            )
    return removed


def rotate_secret(
    session: Session, *, company_id: uuid.UUID, endpoint_id: uuid.UUID, box: SecretBox
) -> str:
    """A new secret; the current one keeps signing (beside it) for 24 h."""
    row = _owned(session, company_id, endpoint_id)
    secret = new_secret()
    row.previous_secret = row.secret
    row.previous_secret_until = utcnow_ms() + timedelta(hours=PREVIOUS_SECRET_HOURS)
    row.secret = box.seal(row.id, secret)
    row.updated_at = utcnow_ms()
    session.flush()
    return secret


def list_deliveries(
    session: Session, *, company_id: uuid.UUID, endpoint_id: uuid.UUID, query: DeliveryQuery
) -> Page[DeliveryRead]:
    """An endpoint's deliveries, newest first, each with its attempts."""
    endpoint = _owned(session, company_id, endpoint_id)
    chosen = select(WebhookDelivery).where(WebhookDelivery.endpoint_id == endpoint.id)
    if query.status:
        chosen = chosen.where(WebhookDelivery.status == query.status)
    rows, total = paginate(
        session,
        chosen,
        WebhookDelivery.created_at.desc(),
        WebhookDelivery.event_seq.desc(),
        params=query,
    )
    attempts: dict[int, list[AttemptRead]] = {row.id: [] for row in rows}
    if rows:
        for attempt in session.scalars(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id.in_(list(attempts)))
            .order_by(WebhookAttempt.id)
        ):
            attempts[attempt.delivery_id].append(AttemptRead.model_validate(attempt))
    items = [
        DeliveryRead(
            event_id=row.event_id,
            event_type=row.event_type,
            status=row.status,
            attempts=attempts[row.id],
            next_attempt_at=row.next_attempt_at if row.status == "pending" else None,
            created_at=row.created_at,
        )
        for row in rows
    ]
    return Page[DeliveryRead].of(items, params=query, total=total)


@dataclass(frozen=True, slots=True)
class Health:
    """An endpoint's deliveries created since a time, by status."""

    endpoint_id: uuid.UUID
    url: str
    status: str  # the endpoint's: enabled or disabled
    delivered: int
    pending: int
    failed: int


def health(session: Session, *, company_id: uuid.UUID, since: datetime) -> list[Health]:
    """Each of the company's endpoints with its deliveries created since `since`,
    counted by status: one range read a endpoint (`endpoint_id, created_at`)."""
    endpoints = session.scalars(
        select(WebhookEndpoint)
        .where(
            WebhookEndpoint.company_id == company_id,
            WebhookEndpoint.status != WebhookEndpoint.DELETED,
        )
        .order_by(WebhookEndpoint.created_at, WebhookEndpoint.id)
    ).all()
    counts: dict[tuple[uuid.UUID, str], int] = {}
    if endpoints:
        rows = session.execute(
            select(WebhookDelivery.endpoint_id, WebhookDelivery.status, func.count())
            .where(
                WebhookDelivery.endpoint_id.in_([e.id for e in endpoints]),
                WebhookDelivery.created_at >= since,
            )
            .group_by(WebhookDelivery.endpoint_id, WebhookDelivery.status)
        )
        counts = {(endpoint_id, status): n for endpoint_id, status, n in rows}
    return [
        Health(
            e.id,
            e.url,
            e.status,
            counts.get((e.id, "delivered"), 0),
            counts.get((e.id, "pending"), 0),
            counts.get((e.id, "failed"), 0),
        )
        for e in endpoints
    ]


def replay(
    session: Session, *, company_id: uuid.UUID, endpoint_id: uuid.UUID, body: ReplayIn
) -> int:
    """Queue again each event of the window that the endpoint subscribes to (all, or only
    those whose delivery failed): a delivery that exists starts the retry schedule over
    (its attempts kept), and an event the endpoint never had gets a delivery. The same
    event id, so a receiver that dedupes on `webhook-id` sees a repeat."""
    endpoint = _owned(session, company_id, endpoint_id, locked=True)
    now = utcnow_ms()
    # a disabled endpoint's deliveries wait unscheduled until it is enabled (`schedule`)
    due = now if endpoint.status == "enabled" else None
    until = body.until or now + timedelta(milliseconds=1)
    matching = [
        Event.company_id == company_id,
        Event.created_at >= body.since,
        Event.created_at < until,
        Event.pos > outbox.OFF_THE_LOG,  # in the log: not a test event (`send_test`)
    ]
    if "*" not in endpoint.event_types:
        matching.append(Event.type.in_(endpoint.event_types))
    in_window = select(Event.seq).where(*matching)
    requeue = update(WebhookDelivery).where(
        WebhookDelivery.endpoint_id == endpoint.id,
        WebhookDelivery.event_seq.in_(in_window),
        WebhookDelivery.status == "failed"
        if body.only_failed
        else WebhookDelivery.status != "pending",
    )
    result = session.execute(requeue.values(status="pending", attempt_count=0, next_attempt_at=due))
    queued = result.rowcount  # type: ignore[attr-defined]
    if not body.only_failed:
        missing = (
            select(
                literal(endpoint.id, WebhookDelivery.endpoint_id.type).label("endpoint_id"),
                Event.seq,
                Event.company_id,
                Event.id,
                Event.type,
                Event.created_at,
            )
            .where(*matching)
            .where(
                ~select(WebhookDelivery.id)
                .where(
                    and_(
                        WebhookDelivery.endpoint_id == endpoint.id,
                        WebhookDelivery.event_seq == Event.seq,
                    )
                )
                .exists()
            )
        )
        # counted from what it returns: an ORM session answers no rowcount for it
        added = dispatch.deliveries_of(missing, now, due=due).returning(WebhookDelivery.id)
        queued += len(session.execute(added).all())
    session.flush()
    if queued and due is not None:  # the workers start them at once (`wakeups`)
        wakeups.mark(session.connection(), "events")
    return int(queued)


TEST_EVENT = "webhook.test"


def send_test(session: Session, *, company_id: uuid.UUID, endpoint_id: uuid.UUID) -> uuid.UUID:
    """A `webhook.test` event for this endpoint alone: the event, off the log (never in
    a feed, a fan-out or a replay), and its one delivery, due now (a disabled endpoint's
    waits until it is enabled, as a replay's does), signed and retried like any other.
    The event's id."""
    endpoint = _owned(session, company_id, endpoint_id, locked=True)  # its status holds
    row = outbox.off_the_log(
        TEST_EVENT, company_id=company_id, data={"endpoint_id": str(endpoint.id)}
    )
    outbox.write(session.connection(), [row])
    event = select(
        literal(endpoint.id, WebhookDelivery.endpoint_id.type).label("endpoint_id"),
        Event.seq,
        Event.company_id,
        Event.id,
        Event.type,
        Event.created_at,
    ).where(Event.id == row["id"])
    due = row["created_at"] if endpoint.status == "enabled" else None
    session.execute(dispatch.deliveries_of(event, row["created_at"], due=due))
    session.flush()
    event_id: uuid.UUID = row["id"]
    return event_id
