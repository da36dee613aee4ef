"""The one scheduler: each periodic job runs once a period across every process.

Every `serve` and `worker` process runs the same periodic jobs (`worker.PERIODIC`).
A job that works on shared state (expiring uploads, purging events, sweeping the store)
must run once a period however many processes there are, not once in each. Its row in
`scheduled_jobs` is its lease: a process runs the job only if it moved the row's
`due_at` from the past to a period ahead (`claim`), one conditional UPDATE, which
PostgreSQL and SQLite let one process win. Each tick reads the rows first (`due`), and
claims only the jobs due: an idle process asks one read a tick, not a transaction a
job. A job that keeps state of its own process (a cache of signing keys) is
`everywhere`: each process runs it on its own clock.

A process that dies while it runs a job leaves the row due a period later: the next
period's run finds the work left (every job is safe to run again).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import String, select, update
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, Database, UTCDateTime, dialect_insert
from headwater.kit.clock import utcnow_ms

log = structlog.get_logger("headwater.scheduler")


class ScheduledJob(Base):
    """A periodic job's lease: when it is next due, and who ran it last."""

    __tablename__ = "scheduled_jobs"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    due_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ran_by: Mapped[str | None] = mapped_column(String(128), default=None)
    ran_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


@dataclass(frozen=True, slots=True)
class Periodic:
    """A job run every `every` seconds: once across all processes, or, `everywhere`,
    in each one."""

    name: str
    every: float
    run: Callable[[Any], Awaitable[None]]
    everywhere: bool = False


def claim(db: Database, name: str, *, every: float, owner: str) -> bool:
    """Take the job's run for this period: True for exactly one caller across every
    process, until `every` seconds have passed."""
    now = utcnow_ms()
    with db.begin() as connection:
        connection.execute(
            dialect_insert(connection.dialect)(ScheduledJob)
            .values(name=name, due_at=now)
            .on_conflict_do_nothing(index_elements=["name"])
        )
        taken = connection.execute(
            update(ScheduledJob)
            .where(ScheduledJob.name == name, ScheduledJob.due_at <= now)
            .values(due_at=now + timedelta(seconds=every), ran_by=owner, ran_at=now)
        )
    return bool(taken.rowcount)


def due(db: Database, names: Sequence[str]) -> set[str]:
    """The jobs among `names` that may be due now: their row's `due_at` has passed, or
    they have no row yet. One read, no transaction: an idle process asks this each tick
    and claims (a write) only what it answers."""
    if not names:
        return set()
    now = utcnow_ms()
    with db.read_connection() as connection:
        found = dict(
            connection.execute(
                select(ScheduledJob.name, ScheduledJob.due_at).where(
                    ScheduledJob.name.in_(list(names))
                )
            ).all()
        )
    return {name for name in names if name not in found or found[name] <= now}


@dataclass
class Schedule:
    """The periodic jobs of one process, run when due (`run_due`)."""

    db: Database
    jobs: Sequence[Periodic]
    owner: str
    # `everywhere` jobs: when each last ran here (time.monotonic())
    _ran: dict[str, float] = field(default_factory=dict)

    def _due(self, job: Periodic, shared: set[str]) -> bool:
        if job.everywhere:
            now = time.monotonic()
            if now - self._ran.get(job.name, -job.every) < job.every:
                return False
            self._ran[job.name] = now
            return True
        if job.name not in shared:  # not due by the tick's read: no claim to try
            return False
        return claim(self.db, job.name, every=job.every, owner=self.owner)

    async def run_due(self, context: Any, *, on_thread: Callable[..., Awaitable[Any]]) -> list[str]:
        """Run every job that is due here (`context` passed to each); their names. A job
        that fails is logged; the others still run."""
        ran: list[str] = []
        names = [job.name for job in self.jobs if not job.everywhere]
        try:
            shared = await on_thread(due, self.db, names)
        except Exception:  # the database is away: the next tick asks again
            log.exception("periodic jobs not read")
            return ran
        for job in self.jobs:
            try:
                if not await on_thread(self._due, job, shared):
                    continue
                ran.append(job.name)
                await job.run(context)
            except Exception:
                log.exception("periodic job failed", job=job.name)
        return ran

    @property
    def tick(self) -> float:
        """How often to look for due jobs: the shortest period."""
        return min((job.every for job in self.jobs), default=30.0)
