"""Replies go through the job queue's rules (contract 12 and 19): any number of workers
send each reply once, no database transaction is open while the relay is called, and a
worker that dies mid-reply leaves the reply due again when its lease ends."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from headwater.inbox import replies
from headwater.inbox import service as inboxes
from headwater.inbox.models import InboxMessage
from headwater.kit.clock import utcnow
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.http_server import Listener
from tests.inbox.conftest import Sink, message, send

pytestmark = pytest.mark.http

MESSAGES = 8


def _queue(
    smtp_server: Listener, tenant: FileTenant, inbox: dict[str, Any], relay_port: int
) -> tuple[Any, Any]:
    """MESSAGES messages whose transactions are final, their replies due now; the
    runtime, and its settings with the relay."""
    body = (CSV_HEADER + csv_rows(2)).encode()
    for n in range(MESSAGES):
        mail = message(
            inbox["address"],
            attachments=[("a.csv", "text/csv", body)],
            message_id=f"<reply-{n}-{uuid.uuid4()}@example.com>",
        )
        send(smtp_server.port, mail)
    run_worker(tenant.client)
    runtime = tenant.client.app.state.runtime  # type: ignore[attr-defined]
    with runtime.db.unit_of_work() as session:
        session.execute(
            update(InboxMessage)
            .where(InboxMessage.inbox_id == uuid.UUID(inbox["inbox_id"]))
            .values(reply_state="pending", next_attempt_at=utcnow())
        )
    relayed = runtime.settings.model_copy(
        update={"smtp_relay_url": f"smtp://127.0.0.1:{relay_port}"}
    )
    return runtime, relayed


def test_workers_side_by_side_send_each_reply_once(
    smtp_server: Listener, mail_tenant: FileTenant, inbox: dict[str, Any], relay: tuple[Sink, int]
) -> None:
    sink, port = relay
    runtime, relayed = _queue(smtp_server, mail_tenant, inbox, port)
    counts: list[int] = []
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        counts.append(replies.send_due(runtime.db, relayed))

    workers = [threading.Thread(target=work) for _ in range(4)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert sum(counts) == MESSAGES
    got = sink.wait_for(MESSAGES)
    assert len(got) == MESSAGES
    assert len({mail["In-Reply-To"] for mail in got}) == MESSAGES
    assert replies.send_due(runtime.db, relayed) == 0


def test_a_reply_claimed_by_a_worker_that_died_is_sent_after_its_lease(
    smtp_server: Listener, mail_tenant: FileTenant, inbox: dict[str, Any], relay: tuple[Sink, int]
) -> None:
    sink, port = relay
    runtime, relayed = _queue(smtp_server, mail_tenant, inbox, port)
    with runtime.db.begin() as connection:  # a worker claims one, then dies
        claim = inboxes.claim_reply(connection, lease=timedelta(seconds=120))
    assert claim is not None
    assert replies.send_due(runtime.db, relayed) == MESSAGES - 1  # its lease holds
    with runtime.db.unit_of_work() as session:  # the lease ends
        session.execute(
            update(InboxMessage).where(InboxMessage.id == claim[0]).values(next_attempt_at=utcnow())
        )
    assert replies.send_due(runtime.db, relayed) == 1
    assert len(sink.wait_for(MESSAGES)) == MESSAGES
    with runtime.db.read_session() as session:
        states = {
            m.reply_state
            for m in session.query(InboxMessage).filter_by(inbox_id=uuid.UUID(inbox["inbox_id"]))
        }
    assert states == {"sent"}
