"""The job queue's contract for jobs that fall due (`headwater.jobs.Due`), run by each of
its users: webhook deliveries and email replies. Two claimers never lease one job; a
dead claimant's job is due again when its lease ends, and its late record finds the
lease gone; a hand-back makes a job due at once and is not an attempt. On threads, and
on 2 and 4 processes. Then webhooks' own rule on top: an endpoint's slots hold across
processes."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, insert, select, text, update
from starlette.testclient import TestClient

from headwater import jobs, worker
from headwater.config import Settings
from headwater.inbox import service as inboxes
from headwater.inbox.models import InboxMessage
from headwater.kit.clock import utcnow
from headwater.runtime import Runtime
from headwater.webhooks import dispatch
from headwater.webhooks.models import WebhookDelivery, WebhookEndpoint
from tests.factories import create_company
from tests.http_server import claimed_together, process_env, same_database
from tests.webhooks.conftest import HookTenant


@dataclass
class User:
    """A user of the queue's jobs that fall due, as the contract drives it."""

    name: str
    runtime: Runtime
    queue: jobs.Due
    attempts: Any  # the column counting its attempts
    made: Callable[[int], list[Any]]  # n new jobs, due now
    mine: list[Any] = field(default_factory=list)  # the jobs this test made

    def make(self, n: int) -> list[Any]:
        ids = self.made(n)
        self.mine.extend(ids)
        return ids

    def lease(self, *, limit: int = 1, seconds: float = 60) -> tuple[list[Any], Any]:
        with self.runtime.db.begin() as connection:
            rows, until = jobs.lease(
                connection,
                self.queue,
                now=utcnow(),
                duration=timedelta(seconds=seconds),
                limit=limit,
                where=(self.queue.model.id.in_(self.mine),),
            )
        return [row.id for row in rows], until

    def settle(self, job_id: Any, until: Any) -> bool:
        """The claimant's record of a successful attempt, if its lease holds."""
        with self.runtime.db.begin() as connection:
            if not jobs.holds(connection, self.queue, job_id, until):
                return False
            done = "delivered" if self.name == "deliveries" else "sent"
            connection.execute(
                update(self.queue.model)
                .where(self.queue.model.id == job_id)
                .values({self.queue.state: done, self.queue.leased: None})
            )
        return True

    def state(self, job_id: Any) -> tuple[str, int, bool]:
        """(state, attempts, whether due now)."""
        with self.runtime.db.read_connection() as connection:
            row = connection.execute(
                select(self.queue.state, self.attempts, self.queue.due).where(
                    self.queue.model.id == job_id
                )
            ).one()
        return row[0], row[1], row[2] is not None and row[2] <= utcnow()


def _runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def _deliveries(client: TestClient, admin: dict[str, str], loopback_client: TestClient) -> User:
    return _deliveries_of(client, admin, loopback_client)[0]


def _deliveries_of(
    client: TestClient, admin: dict[str, str], loopback_client: TestClient
) -> tuple[User, HookTenant, uuid.UUID]:
    """Deliveries to one endpoint of a new company, made by sequencing its events (an
    address nothing listens on: the contract never attempts them); with the company
    and the endpoint."""
    company = create_company(client, admin, f"D {uuid.uuid4().hex[:6]}")
    hooks = HookTenant(client, admin, company).using(loopback_client)
    endpoint = uuid.UUID(hooks.endpoint("http://127.0.0.1:9/h")["id"])
    runtime = _runtime(client)

    def made(n: int) -> list[Any]:
        with runtime.db.read_connection() as connection:
            before = set(_of(connection, endpoint))
        hooks.write_events(runtime.settings, n)
        dispatch.sequence_all(runtime.db, uuid.UUID(company))
        with runtime.db.read_connection() as connection:
            return sorted(set(_of(connection, endpoint)) - before)

    user = User("deliveries", runtime, dispatch.DELIVERIES, WebhookDelivery.attempt_count, made)
    return user, hooks, endpoint


def _of(connection: Any, endpoint: uuid.UUID) -> Sequence[int]:
    return (
        connection.execute(
            select(WebhookDelivery.id).where(WebhookDelivery.endpoint_id == endpoint)
        )
        .scalars()
        .all()
    )


def _replies(client: TestClient, admin: dict[str, str], loopback_client: TestClient) -> User:
    """Replies due now, as the SMTP door leaves them."""
    runtime = _runtime(client)

    def made(n: int) -> list[Any]:
        now = utcnow()
        rows = [
            {
                "id": uuid.uuid4(),
                "inbox_id": uuid.uuid4(),
                "company_id": uuid.uuid4(),
                "message_id": f"<{uuid.uuid4()}@example.com>",
                "sender": "someone@example.com",
                "subject": "s",
                "transaction_ids": [],
                "ignored": [],
                "received_at": now,
                "reply_state": "pending",
                "attempts": 0,
                "next_attempt_at": now,
            }
            for _ in range(n)
        ]
        with runtime.db.begin() as connection:
            connection.execute(insert(InboxMessage), rows)
        return [row["id"] for row in rows]

    return User("replies", runtime, inboxes.REPLIES, InboxMessage.attempts, made)


@pytest.fixture(params=["deliveries", "replies"])
def user(
    request: pytest.FixtureRequest,
    client: TestClient,
    admin: dict[str, str],
    loopback_client: TestClient,
) -> User:
    make = _deliveries if request.param == "deliveries" else _replies
    return make(client, admin, loopback_client)


def test_claimers_on_threads_never_lease_one_job(user: User) -> None:
    made = user.make(30)
    taken: list[Any] = []
    barrier = threading.Barrier(4)

    def claimer() -> None:
        barrier.wait()
        while True:
            ids, until = user.lease(limit=3)
            if not ids:
                return
            for job_id in ids:
                assert user.settle(job_id, until)
                taken.append(job_id)

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(taken) == sorted(made)  # each once, none left


CLAIMER = """
import sys, time, uuid
from datetime import timedelta
from sqlalchemy import update
from headwater import jobs
from headwater.config import Settings
from headwater.db import Database
from headwater.inbox import service as inboxes
from headwater.kit.clock import utcnow
from headwater.webhooks import dispatch
db = Database(Settings())
name, ids, start = sys.argv[1], sys.argv[2].split(","), float(sys.argv[3])
queue = dispatch.DELIVERIES if name == "deliveries" else inboxes.REPLIES
ids = [int(i) if name == "deliveries" else uuid.UUID(i) for i in ids]
done = "delivered" if name == "deliveries" else "sent"
time.sleep(max(0.0, start - time.time()))
taken = []
while True:
    with db.begin() as connection:
        rows, until = jobs.lease(
            connection, queue, now=utcnow(), duration=timedelta(minutes=5), limit=2,
            where=(queue.model.id.in_(ids),),
        )
    if not rows:
        break
    for row in rows:
        with db.begin() as connection:
            assert jobs.holds(connection, queue, row.id, until)
            connection.execute(
                update(queue.model).where(queue.model.id == row.id)
                .values({queue.state: done, queue.leased: None})
            )
        taken.append(str(row.id))
print(",".join(taken))
"""


@pytest.mark.parametrize("processes", [2, 4])
def test_claimer_processes_never_lease_one_job(
    user: User, settings: Settings, processes: int
) -> None:
    made = user.make(24)
    env = process_env(same_database(settings.data_dir, settings.database_url))
    ids = ",".join(str(job_id) for job_id in made)
    taken = claimed_together(CLAIMER, [[user.name, ids]] * processes, env)
    assert sorted(taken) == sorted(str(job_id) for job_id in made)


def test_a_dead_claimants_job_is_due_again_when_its_lease_ends(user: User) -> None:
    [job_id] = user.make(1)
    ids, dead = user.lease(seconds=3600)  # a claimant that then dies
    assert ids == [job_id]
    assert user.lease()[0] == []  # its lease holds
    with user.runtime.db.begin() as connection:  # the lease ends
        connection.execute(
            update(user.queue.model)
            .where(user.queue.model.id == job_id)
            .values({user.queue.due: utcnow() - timedelta(seconds=1)})
        )
    ids, until = user.lease()
    assert ids == [job_id]
    assert not user.settle(job_id, dead)  # the old claimant's late record finds it gone
    assert user.settle(job_id, until)
    assert user.state(job_id)[:2] == ("delivered" if user.name == "deliveries" else "sent", 0)


def test_a_hand_back_is_due_at_once_and_not_an_attempt(user: User) -> None:
    [job_id] = user.make(1)
    ids, until = user.lease(seconds=3600)
    jobs.hand_back(user.runtime.db, user.queue, [(job_id, until)])
    assert user.state(job_id) == ("pending", 0, True)
    assert not user.settle(job_id, until)  # its lease ended with the hand-back
    ids, again = user.lease(seconds=3600)
    assert ids == [job_id]
    jobs.hand_back(user.runtime.db, user.queue, [(job_id, until)])  # an old lease
    assert user.state(job_id) == ("pending", 0, False)  # changes nothing
    assert user.settle(job_id, again)


def _claim(runtime: Runtime, endpoint: uuid.UUID | None = None) -> list[dispatch.Claimed]:
    """One process's claim, with two slots per endpoint: what it leased (of `endpoint`)."""
    claimed = dispatch.claim(
        runtime.db, runtime.secret_box, limit=10, per_endpoint=2, lease=timedelta(minutes=5)
    )
    return [c for c in claimed if endpoint is None or c.endpoint_id == endpoint]


def test_an_endpoints_slots_hold_across_processes(
    client: TestClient, admin: dict[str, str], loopback_client: TestClient
) -> None:
    user = _deliveries(client, admin, loopback_client)
    user.make(6)
    endpoint = _endpoint_of(user)
    runtime = user.runtime
    first = _claim(runtime, endpoint)
    assert len(first) == 2
    assert _claim(runtime, endpoint) == []  # another process: the endpoint's slots are taken
    assert _record(runtime, first[0], 204) == ["delivered"]
    assert len(_claim(runtime, endpoint)) == 1  # the slot it freed


def test_an_endpoints_slots_hold_under_claims_at_once(
    client: TestClient, admin: dict[str, str], loopback_client: TestClient
) -> None:
    """Eight processes' claims at once, three rounds, each round's leases then recorded:
    however the claims interleave, the endpoint never has more deliveries leased than
    its slots (they are counted once its row is locked, by the claim holding it)."""
    user = _deliveries(client, admin, loopback_client)
    user.make(6)
    endpoint = _endpoint_of(user)
    runtime = user.runtime

    def claim(start: threading.Barrier) -> list[dispatch.Claimed]:
        start.wait(timeout=60)
        return _claim(runtime, endpoint)

    with ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            start = threading.Barrier(8)
            taken = [c for claimed in pool.map(claim, [start] * 8) for c in claimed]
            assert 1 <= len(taken) <= 2
            with runtime.db.read_connection() as connection:
                leased = connection.scalar(
                    select(func.count()).where(
                        WebhookDelivery.endpoint_id == endpoint,
                        WebhookDelivery.leased_until > utcnow(),
                    )
                )
            assert leased == len(taken)
            for claimed in taken:
                assert _record(runtime, claimed, 204) == ["delivered"]


def _record(runtime: Runtime, claimed: dispatch.Claimed, status: int) -> list[str]:
    """An attempt of the claimed delivery answered `status`, recorded: its state."""
    outcome = dispatch.Outcome(at=utcnow(), duration_ms=1, status_code=status)
    return dispatch.record(
        runtime.db, [(claimed, outcome)], schedule=[60], disable_after=timedelta(days=3)
    )


def test_a_success_ends_an_endpoints_failing_spell(
    client: TestClient, admin: dict[str, str], loopback_client: TestClient
) -> None:
    user = _deliveries(client, admin, loopback_client)
    user.make(3)
    endpoint = _endpoint_of(user)
    runtime = user.runtime
    first, second = _claim(runtime, endpoint)

    def failing_since() -> Any:
        with runtime.db.read_connection() as connection:
            return connection.scalar(
                select(WebhookEndpoint.failing_since).where(WebhookEndpoint.id == endpoint)
            )

    assert _record(runtime, first, 500) == ["retry"]
    since = failing_since()
    assert since is not None
    (third,) = _claim(runtime, endpoint)
    assert _record(runtime, third, 503) == ["retry"]
    assert failing_since() == since  # its first failure since the last success
    assert _record(runtime, second, 204) == ["delivered"]
    assert failing_since() is None


def test_concurrent_claimers_never_fill_an_endpoint_past_its_slots(
    client: TestClient, admin: dict[str, str], loopback_client: TestClient
) -> None:
    user = _deliveries(client, admin, loopback_client)
    user.make(20)
    endpoint = _endpoint_of(user)
    leased: list[dispatch.Claimed] = []
    barrier = threading.Barrier(4)

    def claimer() -> None:
        barrier.wait()
        for _ in range(3):
            leased.extend(_claim(user.runtime, endpoint))

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(leased) == 2
    with user.runtime.db.read_connection() as connection:
        in_flight = connection.scalar(
            select(func.count()).where(
                WebhookDelivery.endpoint_id == endpoint, WebhookDelivery.leased_until > utcnow()
            )
        )
    assert in_flight == 2


def test_a_full_endpoint_does_not_hold_up_another(
    client: TestClient, admin: dict[str, str], loopback_client: TestClient
) -> None:
    busy = _deliveries(client, admin, loopback_client)
    busy.make(60)  # older, and more than a claim looks at
    quiet = _deliveries(client, admin, loopback_client)
    [waiting] = quiet.make(1)
    leased = {c.delivery_id for c in _claim(busy.runtime) + _claim(busy.runtime)}
    assert waiting in leased  # the busy endpoint full after the first claim, the second
    # looks past its deliveries


def _endpoint_of(user: User) -> uuid.UUID:
    with user.runtime.db.read_connection() as connection:
        return connection.execute(
            select(WebhookDelivery.endpoint_id).where(WebhookDelivery.id == user.mine[0])
        ).scalar_one()


ENDPOINTS = "/platform/v1/webhook_endpoints"


def _record_failures(hooks: HookTenant, endpoint: uuid.UUID, runtime: Runtime) -> Any:
    """Claims the endpoint's deliveries now; the writer records them as failed."""
    claimed = _claim(runtime, endpoint)
    failed = dispatch.Outcome(at=utcnow(), duration_ms=1, status_code=500)

    def call() -> object:
        return dispatch.record(
            runtime.db,
            [(c, failed) for c in claimed],
            schedule=[60],
            disable_after=timedelta(days=3),
        )

    return call


def _http(method: str, suffix: str = "", body: dict[str, Any] | None = None) -> Any:
    """Marks the endpoint's deliveries delivered (a replay and a delete both write such
    ones); the writer calls the API."""

    def prepare(hooks: HookTenant, endpoint: uuid.UUID, runtime: Runtime) -> Any:
        with runtime.db.begin() as connection:
            connection.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.endpoint_id == endpoint)
                .values(status="delivered", next_attempt_at=None)
            )
        url = f"{ENDPOINTS}/{endpoint}{suffix}"
        return lambda: (
            hooks.client.request(method, url, json=body, headers=hooks.headers).status_code
        )

    return prepare


# each writer of an endpoint's deliveries, and what it gives when it has waited
WRITERS = {
    "a record": (_record_failures, ["retry", "retry"]),
    "a replay": (_http("POST", "/replay", {"since": "2020-01-01T00:00:00Z"}), 202),
    "a status change": (_http("PATCH", "", {"status": "disabled"}), 200),
    "a delete": (_http("DELETE"), 204),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_an_endpoints_writers_lock_it_before_its_deliveries(
    client: TestClient,
    admin: dict[str, str],
    loopback_client: TestClient,
    backend: str,
    writer: str,
) -> None:
    """While another transaction holds an endpoint's row (a delete has begun, say), each
    writer waits for it holding none of the endpoint's deliveries: the other reaches
    them, and both finish (in the other order, PostgreSQL ends one as a deadlock)."""
    if backend != "postgresql":
        pytest.skip("row locks are PostgreSQL's (SQLite has one writer)")
    user, hooks, endpoint = _deliveries_of(client, admin, loopback_client)
    user.make(2)
    runtime = user.runtime
    prepare, expected = WRITERS[writer]
    write = prepare(hooks, endpoint, runtime)
    outcome: list[object] = []
    with runtime.db.begin() as holder:
        pid = holder.execute(text("SELECT pg_backend_pid()")).scalar_one()
        holder.execute(
            text("SELECT id FROM webhook_endpoints WHERE id = :e FOR NO KEY UPDATE"),
            {"e": endpoint},
        )
        thread = threading.Thread(target=lambda: outcome.append(write()), daemon=True)
        thread.start()
        _wait_until_blocked_by(runtime, pid)
        holder.execute(  # raises if the waiting writer holds any of them
            text("SELECT id FROM webhook_deliveries WHERE endpoint_id = :e FOR UPDATE NOWAIT"),
            {"e": endpoint},
        )
    thread.join(timeout=60)
    assert outcome == [expected]


def _wait_until_blocked_by(runtime: Runtime, pid: int) -> None:
    """Until a session waits for `pid`'s locks (a hang guard, not a timing)."""
    for _ in range(600):
        with runtime.db.read_connection() as connection:
            waiting = connection.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE :p = ANY(pg_blocking_pids(pid))"),
                {"p": pid},
            ).scalar_one()
        if waiting:
            return
        time.sleep(0.05)
    raise AssertionError("the writer never waited for the endpoint's row")


def _lease_again(db: Any, queue: jobs.Due, ids: Sequence[Any]) -> None:
    """As a lease does: a new due time, so a new version of each row and a dead one; the
    server's statistics told at once."""
    with db.begin() as connection:
        connection.execute(
            update(queue.model).where(queue.model.id.in_(ids)).values({queue.due: utcnow()})
        )
        connection.execute(text("SELECT pg_stat_force_next_flush()"))


def _vacuums(db: Any, queue: jobs.Due, count: str = "vacuum_count") -> int:
    """How many times the queue's table (its partitions included) was vacuumed by hand
    (`count`: or analysed, `analyze_count`)."""
    assert count in ("vacuum_count", "analyze_count")
    with db.begin() as connection:
        return int(
            connection.scalar(
                text(
                    f"SELECT coalesce(sum({count}), 0) FROM pg_stat_user_tables"
                    " WHERE relname LIKE :table"
                ),
                {"table": queue.model.__tablename__ + "%"},
            )
        )


def test_a_queue_table_is_vacuumed_once_enough_of_its_rows_died(user: User) -> None:
    """Leases leave dead rows whose index entries a lease's scan reads past until a
    vacuum (PostgreSQL): `jobs.vacuum` runs one on the queue's table, or the partition
    holding them, once as many died as it is told, and not again until more die; it
    analyses the table too (a server without autovacuum never would, and the queue's
    statements were planned for a table of default size). SQLite has none to run."""
    db, queue = user.runtime.db, user.queue
    if db.engine.dialect.name != "postgresql":
        assert jobs.vacuum(db, [queue], dead=1, share=0) == []
        return
    made = user.make(40)
    _lease_again(db, queue, made)
    before, analysed = _vacuums(db, queue), _vacuums(db, queue, "analyze_count")
    assert jobs.vacuum(db, [queue], dead=1000, share=0) == []  # too few died
    [(table, dead)] = jobs.vacuum(db, [queue], dead=40, share=0)
    assert table.startswith("public." + queue.model.__tablename__) and dead >= 40
    assert _vacuums(db, queue) == before + 1
    assert _vacuums(db, queue, "analyze_count") == analysed + 1
    assert jobs.vacuum(db, [queue], dead=40, share=0) == []  # none died since
    _lease_again(db, queue, made)
    assert [name for name, _ in jobs.vacuum(db, [queue], dead=40, share=0)] == [table]


def test_the_worker_vacuums_the_replies_once_10000_died_and_not_before(
    client: TestClient, admin: dict[str, str], loopback_client: TestClient
) -> None:
    """The periodic job `vacuum_queues` at its own bounds, on a queue of its list."""
    user = _replies(client, admin, loopback_client)
    db = user.runtime.db
    if db.engine.dialect.name != "postgresql":
        asyncio.run(worker.vacuum_queues(user.runtime))  # nothing to do, nothing fails
        return
    jobs.vacuum(db, [user.queue], dead=1, share=0)  # what earlier tests left: gone
    made = user.make(jobs.VACUUM_DEAD_ROWS)
    _lease_again(db, user.queue, made[:100])
    before = _vacuums(db, user.queue)
    asyncio.run(worker.vacuum_queues(user.runtime))
    assert _vacuums(db, user.queue) == before  # far too few died
    _lease_again(db, user.queue, made)
    asyncio.run(worker.vacuum_queues(user.runtime))
    assert _vacuums(db, user.queue) == before + 1
