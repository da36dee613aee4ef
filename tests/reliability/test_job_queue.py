"""The one job queue's contract (`headwater.jobs`), run by each of its users: file jobs
and exports. Two claimers never hold one job; a dead claimer's job is taken over once its
lease passes, and the old claimant finds its claim gone; a hand-back is not an attempt;
a job past its attempts fails for good. On threads, and on 2 and 4 processes."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from starlette.testclient import TestClient

from headwater import jobs
from headwater.config import Settings
from headwater.exports import service as exports
from headwater.exports.models import Export
from headwater.files import processing
from headwater.files.models import DONE, FileJob, FileUpload
from headwater.runtime import Runtime
from tests.downstream.conftest import FeedTenant
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows
from tests.http_server import claimed_together, process_env, same_database


@dataclass
class User:
    """A user of the queue, as the contract drives it."""

    name: str
    runtime: Runtime
    bucket: str
    make: Callable[[], uuid.UUID]  # a new job in `bucket`
    queue: jobs.Queue

    def claim(self, worker: str, *, stale: float = 3600, max_attempts: int = 5) -> uuid.UUID | None:
        stale_for = timedelta(seconds=stale)
        if self.name == "files":
            settings = processing.JobSettings(
                batch_rows=5000,
                stale=stale_for,
                max_attempts=max_attempts,
                max_depth=64,
                max_expanded=1 << 30,
            )
            return processing.claim_next(
                self.runtime.db, worker=worker, bucket=self.bucket, settings=settings
            )
        return exports.claim_next(
            self.runtime.db,
            worker=worker,
            bucket=self.bucket,
            settings=exports.JobSettings(
                stale=stale_for,
                max_attempts=max_attempts,
                row_group_rows=1000,
                retention=timedelta(hours=1),
            ),
        )

    def release(self, job_id: uuid.UUID, worker: str, *, handed_back: bool = False) -> None:
        if self.name == "files":
            processing.release(self.runtime.db, job_id, worker=worker, handed_back=handed_back)
        else:
            exports.release(self.runtime.db, job_id, worker=worker, handed_back=handed_back)

    def finish(self, job_id: uuid.UUID) -> None:
        done = DONE if self.name == "files" else exports.COMPLETED
        with self.runtime.db.begin() as connection:
            connection.execute(
                update(self.queue.model)
                .where(self.queue.id == job_id)
                .values({self.queue.state: done})
            )

    def state(self, job_id: uuid.UUID) -> tuple[str, int, str | None]:
        q = self.queue
        with self.runtime.db.read_connection() as connection:
            row = connection.execute(
                select(q.state, q.attempts, q.claimed_by).where(q.id == job_id)
            ).one()
        return str(row[0]), int(row[1]), row[2]

    def renew(self, job_id: uuid.UUID, worker: str) -> bool:
        with self.runtime.db.begin() as connection:
            return jobs.renew(connection, self.queue, job_id, worker=worker)


def _files(client: TestClient, admin: dict[str, str], company: str) -> User:
    tenant = FileTenant(client, admin, company)
    bucket = f"contract-{uuid.uuid4().hex[:8]}"
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]

    def make() -> uuid.UUID:
        ticket = tenant.upload_url()
        assert tenant.put(ticket, (CSV_HEADER + csv_rows(2)).encode()).status_code == 200
        with runtime.db.begin() as connection:
            job_id = connection.scalar(
                select(FileJob.id)
                .join(FileUpload, FileUpload.id == FileJob.file_id)
                .where(FileUpload.transaction_id == uuid.UUID(ticket["transaction_id"]))
            )
            # its own store name: only this test's claimers see it
            connection.execute(update(FileJob).where(FileJob.id == job_id).values(bucket=bucket))
        return uuid.UUID(str(job_id))

    return User("files", runtime, bucket, make, processing.QUEUE)


def _exports(client: TestClient, admin: dict[str, str], company: str) -> User:
    tenant = FeedTenant(client, admin, company)
    bucket = f"contract-{uuid.uuid4().hex[:8]}"
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]

    def make() -> uuid.UUID:
        response = client.post(
            "/platform/v1/exports",
            json={"client_id": tenant.client_id, "dataset_id": "orders", "format": "ndjson"},
            headers=tenant.headers,
        )
        assert response.status_code == 202, response.text
        export_id = uuid.UUID(response.json()["export_id"])
        with runtime.db.begin() as connection:
            connection.execute(update(Export).where(Export.id == export_id).values(bucket=bucket))
        return export_id

    return User("exports", runtime, bucket, make, exports.QUEUE)


@pytest.fixture(params=["files", "exports"])
def user(request: pytest.FixtureRequest, client: TestClient, admin: dict[str, str]) -> User:
    from tests.factories import create_company

    company = create_company(client, admin, f"Q {uuid.uuid4().hex[:6]}")
    make = _files if request.param == "files" else _exports
    return make(client, admin, company)


def test_claimers_on_threads_never_hold_one_job(user: User) -> None:
    made = {user.make() for _ in range(10)}
    taken: list[uuid.UUID] = []
    barrier = threading.Barrier(4)

    def claimer(worker: str) -> None:
        barrier.wait()
        while (job_id := user.claim(worker)) is not None or _running(user, made):
            if job_id is None:
                time.sleep(0.01)  # a file job waits for its company's running one
                continue
            taken.append(job_id)
            user.finish(job_id)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(taken) == sorted(made)  # each once, none left


def _running(user: User, made: set[uuid.UUID]) -> bool:
    """Whether a job is claimed and not finished yet (another claimer may finish it)."""
    return any(user.state(job_id)[0] == "running" for job_id in made)


CLAIMER = """
import sys, time, uuid
from datetime import timedelta
from headwater.config import Settings
from headwater.db import Database
from headwater.files import processing
from headwater.exports import service as exports
from headwater import jobs
db = Database(Settings())
user, bucket, worker, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
time.sleep(max(0.0, start - time.time()))
queue = processing.QUEUE if user == "files" else exports.QUEUE
done = processing.DONE if user == "files" else exports.COMPLETED
taken = []
idle_since = None
while True:
    if user == "files":
        s = processing.JobSettings(5000, timedelta(hours=1), 5, 64, 1 << 30)
        job = processing.claim_next(db, worker=worker, bucket=bucket, settings=s)
    else:
        s = exports.JobSettings(
            retention=timedelta(hours=1), stale=timedelta(hours=1), max_attempts=5,
            row_group_rows=1000,
        )
        job = exports.claim_next(db, worker=worker, bucket=bucket, settings=s)
    if job is None:
        idle_since = idle_since or time.time()
        if time.time() - idle_since > 1:
            break
        time.sleep(0.02)
        continue
    idle_since = None
    taken.append(str(job))
    with db.begin() as connection:
        from sqlalchemy import update
        connection.execute(update(queue.model).where(queue.id == job).values({queue.state: done}))
print(",".join(taken))
"""


@pytest.mark.parametrize("processes", [2, 4])
def test_claimer_processes_never_hold_one_job(
    user: User, settings: Settings, processes: int
) -> None:
    made = {user.make() for _ in range(12)}
    env = process_env(same_database(settings.data_dir, settings.database_url))
    argvs = [[user.name, user.bucket, f"p{i}"] for i in range(processes)]
    taken = claimed_together(CLAIMER, argvs, env)
    assert sorted(uuid.UUID(job) for job in taken) == sorted(made)


def test_a_dead_claimers_job_is_taken_over_after_its_lease(user: User) -> None:
    job_id = user.make()
    assert user.claim("dead") == job_id
    assert user.claim("other") is None  # its lease holds
    assert user.claim("other", stale=-1) == job_id  # its lease passed
    assert user.state(job_id) == ("running", 2, "other")
    assert not user.renew(job_id, "dead")  # the old claimant finds its claim gone
    assert user.renew(job_id, "other")


def test_a_hand_back_is_not_an_attempt_and_a_failure_is(user: User) -> None:
    job_id = user.make()
    assert user.claim("w") == job_id
    user.release(job_id, "w", handed_back=True)
    assert user.state(job_id) == ("queued", 0, None)
    assert user.claim("w") == job_id
    user.release(job_id, "w")
    assert user.state(job_id) == ("queued", 1, None)
    user.release(job_id, "nobody")  # not its claimant: nothing changes
    assert user.state(job_id) == ("queued", 1, None)


def test_a_job_past_its_attempts_fails_for_good(user: User) -> None:
    job_id = user.make()
    assert user.claim("w", max_attempts=1) == job_id
    user.release(job_id, "w")
    assert user.claim("w", max_attempts=1) is None
    state = user.state(job_id)[0]
    assert state == ("done" if user.name == "files" else "failed")
    assert user.claim("w") is None  # and it is never claimed again
