"""Once a message's transactions commit it is accepted, whatever becomes of its
connection; two copies of one message store once (contract 12).

The handler is driven in-process here, exactly as aiosmtpd drives it, so that its task
can be cancelled at a chosen step (aiosmtpd cancels the DATA handler when the client
drops or the session times out). The copies that race run over real SMTP sockets too.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from email import policy
from typing import Any

import pytest
from aiosmtpd.smtp import Envelope
from sqlalchemy import func, select
from starlette.testclient import TestClient

from headwater.inbox import mime
from headwater.inbox import service as inboxes
from headwater.inbox.models import Inbox, InboxMessage
from headwater.inbox.server import Handler
from headwater.runtime import Runtime
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.http_server import Listener
from tests.inbox.conftest import DOMAIN, message, send


def _runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def _envelope(runtime: Runtime, address: str, mail: Any) -> Envelope:
    envelope = Envelope()
    envelope.mail_from = "ann@example.com"
    # as BoundedSMTP hands a message over: spooled with CRLF lines, its parts found
    raw = mail.as_bytes(policy=policy.SMTP)
    envelope.spool = io.BytesIO(raw)  # type: ignore[attr-defined]
    envelope.structure = mime.Structure()  # type: ignore[attr-defined]
    envelope.structure.feed_block(raw)  # type: ignore[attr-defined]
    envelope.sha256 = hashlib.sha256(raw).hexdigest()  # type: ignore[attr-defined]
    with runtime.db.read_connection() as connection:
        to = inboxes.recipient(connection, address, domain=DOMAIN, sender="ann@example.com")
    assert to is not None
    envelope.headwater_recipients = [to]  # type: ignore[attr-defined]
    return envelope


class _SlowAfterCommit(Handler):
    """Holds the DATA answer for a while after the message's unit of work committed,
    as a slow machine or a large message does."""

    committed = threading.Event()

    def _accept(self, *args: Any) -> Any:
        ids = super()._accept(*args)
        self.committed.set()
        threading.Event().wait(0.5)
        return ids


def _mail(address: str, message_id: str, files: int = 3) -> Any:
    body = (CSV_HEADER + csv_rows(4)).encode()
    return message(
        address,
        attachments=[(f"part{i}.csv", "text/csv", body) for i in range(files)],
        message_id=message_id,
    )


def test_a_message_dropped_after_its_commit_keeps_its_files(
    mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    runtime = _runtime(mail_tenant.client)
    handler = _SlowAfterCommit(runtime.db, runtime.store, runtime.settings)
    handler.committed = threading.Event()
    mail = _mail(inbox["address"], f"<{uuid.uuid4()}@example.com>")

    async def drop_after_commit() -> None:
        task = asyncio.create_task(
            handler.handle_DATA(None, None, _envelope(runtime, inbox["address"], mail))  # type: ignore[arg-type]
        )
        while not handler.committed.is_set():
            await asyncio.sleep(0.01)
        task.cancel()  # the client went away before the 250
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(1)  # the storing thread runs to its end

    asyncio.run(drop_after_commit())
    run_worker(mail_tenant.client)
    made = mail_tenant.transactions(channel="email", page_size=100)["data"]
    assert [t["status"] for t in made] == ["completed"] * 3
    assert {t["records_accepted"] for t in made} == {4}

    # the sender's retry is a repeat: answered 250, nothing new stored
    answer = asyncio.run(
        Handler(runtime.db, runtime.store, runtime.settings).handle_DATA(
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            _envelope(runtime, inbox["address"], mail),
        )
    )
    assert answer.startswith("250 ") and "0 attachment" in answer
    assert len(mail_tenant.transactions(channel="email", page_size=100)["data"]) == 3


def test_a_message_dropped_before_its_commit_leaves_nothing(
    mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    runtime = _runtime(mail_tenant.client)
    failing = Handler(runtime.db, runtime.store, runtime.settings)
    keys: list[str] = []
    store_incoming = runtime.store.incoming_file

    def remember(key: str) -> Any:
        keys.append(key)
        return store_incoming(key)

    def refuse(*args: Any) -> Any:
        raise OSError("the database went away")

    failing.store = type(  # type: ignore[assignment]
        "Watched", (), {"__getattr__": lambda s, n: getattr(runtime.store, n)}
    )()
    failing.store.incoming_file = remember  # type: ignore[method-assign]
    failing._accept = refuse  # type: ignore[method-assign]
    mail = _mail(inbox["address"], f"<{uuid.uuid4()}@example.com>")
    answer = asyncio.run(
        failing.handle_DATA(None, None, _envelope(runtime, inbox["address"], mail))  # type: ignore[arg-type]
    )
    assert answer.startswith("451 ")
    assert len(keys) == 3 and all(runtime.store.head(key) is None for key in keys)
    assert mail_tenant.transactions(channel="email", page_size=100)["data"] == []


def test_only_one_of_two_units_of_work_claims_a_message_id(
    mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    """The second copy waits for the first's commit (a row lock on PostgreSQL, the write
    lock on SQLite), then finds the Message-ID taken."""
    db = _runtime(mail_tenant.client).db
    with db.read_session() as session:
        row = session.get_one(Inbox, uuid.UUID(inbox["inbox_id"]))
        to = inboxes.Recipient(row.id, row.company_id, row.client_id, row.dataset_id, row.author_id)
    message_id = f"<{uuid.uuid4()}@example.com>"
    second: list[bool] = []
    with db.begin() as connection:
        assert inboxes.claim_message(connection, to, message_id)

        def other() -> None:
            with db.begin() as later:
                second.append(inboxes.claim_message(later, to, message_id))

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(0.5)
        assert second == []  # still waiting for the first copy
    thread.join(10)
    assert second == [False]
    with db.begin() as connection:  # another Message-ID is free
        assert inboxes.claim_message(connection, to, f"<{uuid.uuid4()}@example.com>")


@pytest.mark.http
def test_copies_sent_at_once_on_two_connections_store_once(
    smtp_server: Listener, mail_tenant: FileTenant, inbox: dict[str, Any]
) -> None:
    ids = [f"<{uuid.uuid4()}@example.com>" for _ in range(4)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(
                lambda message_id: send(smtp_server.port, _mail(inbox["address"], message_id)),
                [message_id for message_id in ids for _ in range(2)],
            )
        )
    assert answers == [{}] * 8
    run_worker(mail_tenant.client)
    made = mail_tenant.transactions(channel="email", page_size=100)["data"]
    assert len(made) == 3 * len(ids)
    with _runtime(mail_tenant.client).db.read_session() as session:
        rows = session.execute(
            select(InboxMessage.message_id, func.count())
            .where(InboxMessage.inbox_id == uuid.UUID(inbox["inbox_id"]))
            .group_by(InboxMessage.message_id)
        ).all()
    assert sorted(rows) == sorted((message_id, 1) for message_id in ids)
