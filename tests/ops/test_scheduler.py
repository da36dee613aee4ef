"""The one scheduler (issue 33): a periodic job runs once a period however many
processes run the schedule; a job kept per process runs in each."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from headwater import scheduler, worker
from headwater.config import Settings
from headwater.runtime import Runtime
from tests.http_server import claimed_together, process_env, same_database

CLAIMER = """
import sys, time
from headwater.config import Settings
from headwater.db import Database
from headwater import scheduler
db = Database(Settings())
names, owner, start = sys.argv[1].split(","), sys.argv[2], float(sys.argv[3])
time.sleep(max(0.0, start - time.time()))  # every process starts together
won = [name for name in names if scheduler.claim(db, name, every=3600, owner=owner)]
print(",".join(won))
"""


def _runtime(client: TestClient) -> Runtime:
    return client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def test_claimers_on_threads_take_each_period_once(client: TestClient) -> None:
    db = _runtime(client).db
    names = [f"job-{uuid.uuid4().hex[:8]}" for _ in range(20)]
    wins: list[tuple[str, str]] = []
    barrier = threading.Barrier(4)

    def claimer(owner: str) -> None:
        barrier.wait()
        for name in names:
            if scheduler.claim(db, name, every=3600, owner=owner):
                wins.append((name, owner))

    threads = [threading.Thread(target=claimer, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(name for name, _ in wins) == sorted(names)  # each once, none missed
    # the period has not passed: nobody takes them again
    assert not any(scheduler.claim(db, name, every=3600, owner="late") for name in names)
    # a job whose period has passed is taken again, once
    assert scheduler.claim(db, "due-" + names[0], every=0.0, owner="a")
    assert scheduler.claim(db, "due-" + names[0], every=3600, owner="b")


@pytest.mark.parametrize("processes", [2, 4])
def test_worker_processes_take_each_period_once(
    client: TestClient, settings: Settings, processes: int
) -> None:
    """Separate processes (as `serve --workers N` and `headwater worker` run), started
    together, claim 30 jobs: each job is taken by exactly one of them. (`client` made
    the database's tables.)"""
    names = [f"proc-{uuid.uuid4().hex[:8]}" for _ in range(30)]
    env = process_env(same_database(settings.data_dir, settings.database_url))
    argvs = [[",".join(names), f"p{i}"] for i in range(processes)]
    assert sorted(claimed_together(CLAIMER, argvs, env)) == sorted(names)


def test_a_schedule_runs_a_shared_job_once_a_period_and_a_local_one_in_each(
    client: TestClient,
) -> None:
    runtime = _runtime(client)
    runs: list[str] = []

    def job(label: str) -> Any:
        async def run(_context: object) -> None:
            runs.append(label)

        return run

    shared = f"shared-{uuid.uuid4().hex[:8]}"
    jobs = [
        scheduler.Periodic(shared, 3600, job("shared")),
        scheduler.Periodic("local", 3600, job("local"), everywhere=True),
    ]
    one = scheduler.Schedule(runtime.db, jobs, "one")
    two = scheduler.Schedule(runtime.db, jobs, "two")

    async def on_thread(call: Any, *args: Any) -> Any:
        return call(*args)

    async def rounds() -> None:
        for schedule in (one, two, one, two):
            await schedule.run_due(None, on_thread=on_thread)

    asyncio.run(rounds())
    assert sorted(runs) == ["local", "local", "shared"]
    with runtime.db.read_session() as session:
        ran_by = session.scalar(
            select(scheduler.ScheduledJob.ran_by).where(scheduler.ScheduledJob.name == shared)
        )
    assert ran_by == "one"


def test_a_failing_job_does_not_stop_the_others(client: TestClient) -> None:
    runtime = _runtime(client)
    runs: list[str] = []

    async def boom(_context: object) -> None:
        raise RuntimeError("boom")

    async def fine(_context: object) -> None:
        runs.append("fine")

    jobs = [
        scheduler.Periodic(f"boom-{uuid.uuid4().hex[:8]}", 3600, boom),
        scheduler.Periodic(f"fine-{uuid.uuid4().hex[:8]}", 3600, fine),
    ]

    async def on_thread(call: Any, *args: Any) -> Any:
        return call(*args)

    ran = asyncio.run(scheduler.Schedule(runtime.db, jobs, "x").run_due(None, on_thread=on_thread))
    assert runs == ["fine"]
    assert len(ran) == 2


def test_every_periodic_job_is_scheduled(client: TestClient) -> None:
    """The worker's jobs: the orphan sweep hourly, the queues' vacuum every 10 s (a read
    of the server's statistics), the backlogs of webhook endpoints deleted, disabled or
    enabled every worker interval or 10 s, whichever is shorter, the verification keys
    in each process, the rest once a worker interval across processes."""
    settings = _runtime(client).settings
    jobs = {job.name: job for job in worker.periodic(settings)}
    assert jobs["sweep_orphans"].every == worker.ORPHAN_SECONDS
    assert jobs["vacuum_queues"].every == worker.VACUUM_SECONDS == 10
    backlogs = jobs["tend_endpoint_backlogs"]
    assert backlogs.every == min(settings.worker_interval_seconds, 10)
    assert jobs["refresh_verification_keys"].everywhere
    assert {"expire_uploads", "purge_events", "sweep_staged", "send_email_replies"} <= set(jobs)
    shorter = {backlogs.name, "vacuum_queues"}
    shared = [j for j in jobs.values() if not j.everywhere and j.name not in shorter]
    assert all(job.every >= settings.worker_interval_seconds for job in shared)


def test_an_idle_tick_reads_once_and_claims_nothing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between periods a schedule's tick is one read: no claim (a write transaction) is
    tried for a job whose row says it is not due."""
    runtime = _runtime(client)
    names = [f"idle-{uuid.uuid4().hex[:8]}" for _ in range(3)]

    async def nothing(_context: object) -> None:
        return None

    jobs = [scheduler.Periodic(name, 3600, nothing) for name in names]
    schedule = scheduler.Schedule(runtime.db, jobs, "idle")

    async def on_thread(call: Any, *args: Any) -> Any:
        return call(*args)

    first = asyncio.run(schedule.run_due(None, on_thread=on_thread))
    assert sorted(first) == sorted(names)  # new rows: due, claimed, run
    assert scheduler.due(runtime.db, names) == set()
    claims: list[str] = []
    real = scheduler.claim

    def counting(*args: Any, **kwargs: Any) -> bool:
        claims.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(scheduler, "claim", counting)
    again = asyncio.run(schedule.run_due(None, on_thread=on_thread))
    assert again == [] and claims == []
