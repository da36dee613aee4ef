"""The background worker: periodic jobs, run inside `serve` or alone as `headwater worker`.

Every job must be safe to run in several processes at once (several API instances each
run one), and must survive a database that is briefly unreachable.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import threading
import uuid
from asyncio import Task
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

import anyio.to_thread
import structlog

from headwater import scheduler
from headwater.config import Settings
from headwater.exports import service as exports
from headwater.files import processing
from headwater.files import service as files
from headwater.kit.clock import utcnow
from headwater.runtime import Runtime

log = structlog.get_logger("headwater.worker")


async def refresh_verification_keys(runtime: Runtime) -> None:
    """Pick up keys rotated or removed by another process (CLI or another instance)."""
    await runtime.verifier.keys.refresh()


async def forget_idempotency_keys(runtime: Runtime) -> None:
    """Delete Idempotency-Key answers past their window (a stale key is ignored anyway)."""
    from headwater.ingestion.service import purge_idempotency_keys

    window = timedelta(seconds=runtime.settings.idempotency_ttl_seconds)

    def purge() -> int:
        with runtime.db.unit_of_work() as session:
            return purge_idempotency_keys(session, older_than=window)

    purged = await anyio.to_thread.run_sync(purge)
    if purged:
        log.info("idempotency keys purged", count=purged)


async def forget_dedupe_claims(runtime: Runtime) -> None:
    """Delete dedupe claims older than the longest window a step may have (720 h)."""
    from headwater.ingestion import dedupe

    purged = await anyio.to_thread.run_sync(lambda: dedupe.purge(runtime.db, now=utcnow()))
    if purged:
        log.info("dedupe claims purged", count=purged)


async def expire_uploads(runtime: Runtime) -> None:
    """File transactions whose upload never came, past the URL's lifetime and a grace."""
    grace = timedelta(seconds=runtime.settings.upload_expiry_grace_seconds)
    expired = await anyio.to_thread.run_sync(lambda: files.expire_uploads(runtime.db, grace=grace))
    if expired:
        log.info("uploads expired", count=expired)


async def poll_uploads(runtime: Runtime) -> None:
    """S3: look for pending uploads' objects, in case a notification was lost."""
    queued = await anyio.to_thread.run_sync(files.poll_pending, runtime.db, runtime.store)
    if queued:
        log.info("uploads noticed by polling", count=queued)


INCOMING_STALE_SECONDS = 3600.0


async def sweep_incoming(runtime: Runtime) -> None:
    """Bytes of files a channel was receiving when its process was killed: removed once
    untouched for an hour (a file being received is written to all the time)."""
    swept = await anyio.to_thread.run_sync(
        lambda: runtime.store.sweep_incoming(older_than=INCOMING_STALE_SECONDS)
    )
    if swept:
        log.info("unfinished incoming files removed", count=swept)


async def expire_sftp_receipts(runtime: Runtime) -> None:
    """SFTP receipts past HEADWATER_SFTP_RECEIPT_DAYS: forgotten."""
    from headwater.sftp.service import expire_receipts

    days = runtime.settings.sftp_receipt_days

    def expire() -> int:
        with runtime.db.unit_of_work() as session:
            return expire_receipts(session, days=days)

    expired = await anyio.to_thread.run_sync(expire)
    if expired:
        log.info("sftp receipts expired", count=expired)


async def expire_sftp_held(runtime: Runtime) -> None:
    """SFTP files held past HEADWATER_SFTP_HELD_HOURS: forgotten, then their bytes removed
    (an entry never points at bytes already gone)."""
    from headwater.sftp import held

    hours = runtime.settings.sftp_held_hours

    def expire() -> int:
        with runtime.db.unit_of_work() as session:
            keys = list(held.expire(session, hours=hours))
        for key in keys:
            runtime.store.delete(key)
        return len(keys)

    expired = await anyio.to_thread.run_sync(expire)
    if expired:
        log.info("sftp held files expired", count=expired)


async def sweep_staged(runtime: Runtime) -> None:
    """Records staged for files that ended without them (a job failed for good, or its
    worker died between rejecting the file and removing what it staged): removed."""
    from headwater.ingestion import staging

    swept = await anyio.to_thread.run_sync(staging.sweep, runtime.db)
    if swept:
        log.info("staged records of ended files removed", transactions=swept)


ORPHAN_SECONDS = 3600  # an object this old that nothing refers to is a crash's leftover
ORPHAN_BATCH = 500


async def sweep_orphans(runtime: Runtime) -> None:
    """Stored objects that no upload, held SFTP file or export refers to, older than
    ORPHAN_SECONDS: the bytes of a channel's file whose process died between storing
    them and the commit of their transaction. Removed (the scheduler runs it hourly)."""
    from headwater.sftp import held

    def known(ids: list[uuid.UUID]) -> set[uuid.UUID]:
        with runtime.db.read_session() as session:
            return (
                files.known_files(session, ids)
                | held.known(session, ids)
                | exports.known_exports(session, ids)
            )

    def sweep() -> int:
        removed = 0
        stored = runtime.store.stored_files(older_than=ORPHAN_SECONDS)
        while batch := list(itertools.islice(stored, ORPHAN_BATCH)):
            found = known([file_id for _, file_id in batch])
            for key, file_id in batch:
                if file_id not in found:
                    runtime.store.delete(key)
                    removed += 1
        return removed

    removed = await anyio.to_thread.run_sync(sweep)
    if removed:
        log.warning("stored objects with no transaction removed", count=removed)


async def send_email_replies(runtime: Runtime) -> None:
    """Replies to messages whose transactions are all final (a relay must be set)."""
    if not runtime.settings.smtp_relay_url:
        return
    from headwater.inbox.replies import send_due

    sent = await anyio.to_thread.run_sync(send_due, runtime.db, runtime.settings)
    if sent:
        log.info("email replies sent", count=sent)


async def make_partitions(runtime: Runtime) -> None:
    """The event log's partitions of the days ahead (PostgreSQL; `webhooks.partitions`)."""
    from headwater.webhooks import partitions

    def make() -> tuple[list[date], list[date]]:
        with runtime.db.begin() as connection:
            if not partitions.partitioned(connection):
                return [], []
            ahead = utcnow().date() + timedelta(days=partitions.DAYS_AHEAD)
            return partitions.make(connection, ahead)

    made, left = await anyio.to_thread.run_sync(make)
    if made:
        log.info("event partitions made", days=len(made), last=str(made[-1]))
    if left:
        log.warning("event partition days left in the default partitions", days=len(left))


async def purge_events(runtime: Runtime) -> None:
    """Events past HEADWATER_EVENT_RETENTION_DAYS, with their deliveries: on PostgreSQL,
    whole days' partitions first (`webhooks.partitions`), then any row left (a default
    partition's, or SQLite's), oldest first."""
    from headwater.events import log as event_log
    from headwater.webhooks import partitions

    older_than = utcnow() - timedelta(days=runtime.settings.event_retention_days)

    def purge() -> int:
        total = 0
        with runtime.db.begin() as connection:
            if partitions.partitioned(connection):
                days, total = partitions.drop_before(connection, older_than)
                if days:
                    log.info("event partitions dropped", first=str(days[0]), last=str(days[-1]))
        while True:
            with runtime.db.begin() as connection:
                purged = event_log.purge(connection, older_than=older_than)
            total += purged
            if not purged:
                return total

    purged = await anyio.to_thread.run_sync(purge)
    if purged:
        log.info("events past retention removed", count=purged)


VACUUM_SECONDS = 10.0  # how often the queues' dead rows are looked at (one read)


async def vacuum_queues(runtime: Runtime) -> None:
    """The job queues' tables holding many dead rows: vacuumed (PostgreSQL; `jobs.vacuum`)."""
    from headwater import jobs
    from headwater.inbox.service import REPLIES
    from headwater.subjects.service import QUEUE as ERASURES
    from headwater.webhooks.dispatch import DELIVERIES

    queues = (DELIVERIES, REPLIES, processing.QUEUE, exports.QUEUE, ERASURES)
    vacuumed = await anyio.to_thread.run_sync(lambda: jobs.vacuum(runtime.db, queues))
    for table, dead in vacuumed:
        log.info("queue table vacuumed", table=table, dead_rows=dead)


async def tend_endpoint_backlogs(runtime: Runtime) -> None:
    """The backlogs of webhook endpoints changed through the API or by the disabling
    rule, moved after the change in short database transactions: a deleted endpoint's
    removed, then the endpoint (`webhooks.service.remove_deleted`); a disabled one's out
    of the schedule, an enabled one's due again (`webhooks.dispatch.reschedule`)."""
    from headwater.webhooks import dispatch
    from headwater.webhooks import service as webhooks

    removed = await anyio.to_thread.run_sync(webhooks.remove_deleted, runtime.db)
    if removed:
        log.info("deleted webhook endpoints' deliveries removed", count=removed)
    moved = await anyio.to_thread.run_sync(dispatch.reschedule, runtime.db)
    if moved:
        log.info("webhook deliveries rescheduled after a status change", count=moved)


async def purge_exports(runtime: Runtime) -> None:
    """Export files past their lifetime (HEADWATER_EXPORT_RETENTION_HOURS): deleted."""
    purged = await anyio.to_thread.run_sync(exports.purge, runtime.db, runtime.store)
    if purged:
        log.info("export files past their lifetime deleted", count=purged)


RETENTION_SECONDS = 3600  # contract section 17: removed within 24 h; run hourly


async def apply_retention(runtime: Runtime) -> None:
    """Records past their dataset's `retention_days` (with their quarantined rows and raw
    files), and raw files past HEADWATER_RAW_FILE_RETENTION_DAYS: removed."""
    from headwater.subjects import retention

    removed = await anyio.to_thread.run_sync(
        lambda: retention.run(
            runtime.db,
            runtime.store,
            now=utcnow(),
            raw_file_days=runtime.settings.raw_file_retention_days,
        )
    )
    if removed.records or removed.files or removed.quarantined_rows:
        log.info(
            "retention removed data",
            records=removed.records,
            quarantined_rows=removed.quarantined_rows,
            files=removed.files,
        )


def periodic(settings: Settings) -> list[scheduler.Periodic]:
    """The periodic jobs: each once a period across every process (`scheduler`), but the
    verification keys, which each process keeps for itself."""
    every = settings.worker_interval_seconds
    return [
        scheduler.Periodic("refresh_verification_keys", every, refresh_verification_keys, True),
        *(
            scheduler.Periodic(job.__name__, every, job)
            for job in (
                forget_idempotency_keys,
                forget_dedupe_claims,
                expire_uploads,
                poll_uploads,
                expire_sftp_receipts,
                expire_sftp_held,
                sweep_incoming,
                sweep_staged,
                send_email_replies,
                make_partitions,
                purge_events,
                purge_exports,
            )
        ),
        scheduler.Periodic("vacuum_queues", VACUUM_SECONDS, vacuum_queues),
        # soon after a change: until then each lease passes over a deleted or disabled
        # endpoint's due deliveries, and an enabled one's oldest wait
        scheduler.Periodic(
            "tend_endpoint_backlogs", min(every, VACUUM_SECONDS), tend_endpoint_backlogs
        ),
        scheduler.Periodic("sweep_orphans", ORPHAN_SECONDS, sweep_orphans),
        scheduler.Periodic("apply_retention", RETENTION_SECONDS, apply_retention),
    ]


async def run_forever(runtime: Runtime, stop: asyncio.Event) -> None:
    """Run the periodic jobs when due, until `stop`."""
    owner = f"{socket.gethostname()}:{os.getpid()}"
    schedule = scheduler.Schedule(runtime.db, periodic(runtime.settings), owner)
    while not stop.is_set():
        await schedule.run_due(runtime, on_thread=anyio.to_thread.run_sync)
        try:
            await asyncio.wait_for(stop.wait(), timeout=schedule.tick)
        except TimeoutError:
            continue


async def refresh_revocations_forever(runtime: Runtime, stop: asyncio.Event) -> None:
    """Keep the token verifier's revocation list fresh (every
    `revocation_refresh_seconds`), so that a credential or company revoked through any
    instance stops verifying here too, with no database read on the request path."""
    from headwater.identity import service as identity

    settings = runtime.settings
    window = timedelta(seconds=settings.token_lifetime_seconds + settings.token_leeway_seconds)

    def load() -> Any:
        with runtime.db.read_session() as session:
            return identity.revocations(session, since=utcnow() - window)

    while not stop.is_set():
        try:
            runtime.verifier.revoked = await anyio.to_thread.run_sync(load)
        except Exception as exc:  # the database is briefly away: keep the last list
            log.warning("revocation list not refreshed", error=str(exc).splitlines()[0])
        try:
            await asyncio.wait_for(stop.wait(), timeout=settings.revocation_refresh_seconds)
        except TimeoutError:
            continue


def start_jobs(runtime: Runtime, stop: asyncio.Event, *, file_workers: int) -> list[Task[None]]:
    """The periodic jobs, the webhook deliveries and `file_workers` file workers, running
    until `stop`."""
    from headwater.webhooks.sender import Deliverer

    deliverer = Deliverer(
        runtime.db,
        runtime.secret_box,
        runtime.settings,
        ready=runtime.events_ready,
        poll=runtime.poll,
    )
    return (
        [
            asyncio.create_task(run_forever(runtime, stop)),
            asyncio.create_task(deliverer.run(stop)),
        ]
        + [
            asyncio.create_task(run_files_forever(runtime, stop, slot))
            for slot in range(file_workers)
        ]
        + [
            asyncio.create_task(run_exports_forever(runtime, stop, slot))
            for slot in range(runtime.settings.export_workers)
        ]
        + [
            asyncio.create_task(run_erasures_forever(runtime, stop, slot))
            for slot in range(runtime.settings.erasure_workers)
        ]
    )


async def stop_jobs(runtime: Runtime, stop: asyncio.Event, tasks: list[Task[None]]) -> None:
    """Stop the background tasks: file workers hand their jobs back at the next 1,000 rows;
    whatever still runs after `shutdown_timeout_seconds` is abandoned (its claim goes
    stale and another worker takes the job over)."""
    stop.set()
    runtime.files_queued.set()
    runtime.exports_queued.set()
    runtime.erasures_queued.set()
    if tasks:
        await asyncio.wait(tasks, timeout=runtime.settings.shutdown_timeout_seconds)


def job_settings(settings: Settings) -> processing.JobSettings:
    return processing.JobSettings(
        batch_rows=settings.file_batch_rows,
        stale=timedelta(seconds=settings.file_job_stale_seconds),
        max_attempts=settings.file_job_max_attempts,
        max_depth=settings.max_json_depth,
        max_expanded=settings.max_expanded_bytes or 4 * settings.max_file_bytes,
        hold=settings.file_commit_seconds,
    )


def process_one(runtime: Runtime, worker: str, stop: threading.Event | None = None) -> bool:
    """Claim and process one file job; False when the queue is empty. Once `stop` is set,
    a job in progress is handed back (it runs again, here or elsewhere, still once)."""
    settings = job_settings(runtime.settings)
    return _attempt(
        "file job",
        processing.claim_next(
            runtime.db, worker=worker, bucket=runtime.store.bucket, settings=settings
        ),
        lambda job_id: processing.run_job(
            runtime.db, runtime.store, job_id, worker=worker, settings=settings, stop=stop
        ),
        lambda job_id, **how: processing.release(runtime.db, job_id, worker=worker, **how),
        processing.Interrupted,
    )


def _attempt(
    kind: str,
    job_id: uuid.UUID | None,
    run: Callable[[uuid.UUID], object],
    release: Callable[..., None],
    interrupted: type[Exception],
) -> bool:
    """Run a claimed job (none: False). Interrupted by shutdown, it is handed back
    uncounted; failed, it is queued again with the attempt counted."""
    if job_id is None:
        return False
    try:
        run(job_id)
    except interrupted:
        log.info(f"{kind} handed back at shutdown", job=str(job_id))
        release(job_id, handed_back=True)
    except Exception:
        log.exception(f"{kind} attempt failed", job=str(job_id))
        release(job_id)
    return True


Take = Callable[[Runtime, str, threading.Event], bool]


async def run_files_forever(runtime: Runtime, stop: asyncio.Event, slot: int = 0) -> None:
    """Process file jobs one after another until `stop`; between jobs, wait for an upload
    in this process (at once) or for the poll interval (uploads to other processes)."""
    worker = f"{socket.gethostname()}:{os.getpid()}:{slot}"
    await _drain_forever(runtime, stop, process_one, worker, runtime.files_queued, "file")


async def _drain_forever(
    runtime: Runtime,
    stop: asyncio.Event,
    take: Take,
    worker: str,
    queued: asyncio.Event,
    name: str,
) -> None:
    """Run `take` (one job of a queue, on a thread) until it finds none, then wait for
    `queued` (work queued here, or in another process: `wakeups`) or the poll interval;
    until `stop`."""
    stopping = threading.Event()  # `stop`, as the worker thread can see it
    watcher = asyncio.create_task(_mirror(stop, stopping))
    try:
        while not stop.is_set():
            try:
                worked = await anyio.to_thread.run_sync(take, runtime, worker, stopping)
            except Exception as exc:
                # the database is unreachable or busy (SQLite: another process's file)
                log.warning(f"{name} queue unavailable", error=str(exc).splitlines()[0])
                worked = False
            if worked:
                continue
            queued.clear()
            try:
                poll = runtime.poll(runtime.settings.file_poll_seconds)
                await asyncio.wait_for(queued.wait(), timeout=poll)
            except TimeoutError:
                continue
    finally:
        watcher.cancel()


async def _mirror(stop: asyncio.Event, stopping: threading.Event) -> None:
    await stop.wait()
    stopping.set()


def export_settings(settings: Settings) -> exports.JobSettings:
    return exports.JobSettings(
        retention=timedelta(hours=settings.export_retention_hours),
        stale=timedelta(seconds=settings.export_job_stale_seconds),
        max_attempts=settings.export_max_attempts,
        row_group_rows=settings.export_row_group_rows,
    )


def export_one(runtime: Runtime, worker: str, stop: threading.Event | None = None) -> bool:
    """Claim and run one export; False when the queue is empty. Once `stop` is set, an
    export in progress is handed back (it runs again, here or elsewhere)."""
    settings = export_settings(runtime.settings)

    def run(export_id: uuid.UUID) -> None:
        # pyarrow (about 30 MB) is loaded by the first export a process runs, not by
        # its first look at an empty queue: most API processes never run one
        from headwater.exports import runner

        runner.run(
            runtime.db, runtime.store, export_id, worker=worker, settings=settings, stop=stop
        )

    return _attempt(
        "export",
        exports.claim_next(
            runtime.db, worker=worker, bucket=runtime.store.bucket, settings=settings
        ),
        run,
        lambda export_id, **how: exports.release(runtime.db, export_id, worker=worker, **how),
        exports.Interrupted,
    )


async def run_exports_forever(runtime: Runtime, stop: asyncio.Event, slot: int = 0) -> None:
    """Run exports one after another until `stop`; between them, wait for an export
    asked of this process (at once) or for the poll interval (those of other processes)."""
    worker = f"{socket.gethostname()}:{os.getpid()}:export-{slot}"
    await _drain_forever(runtime, stop, export_one, worker, runtime.exports_queued, "export")


def erase_one(runtime: Runtime, worker: str, stop: threading.Event | None = None) -> bool:
    """Claim and run one erasure; False when the queue is empty. Once `stop` is set, an
    erasure in progress is handed back at its next step (it goes on elsewhere)."""
    from headwater.subjects import runner
    from headwater.subjects import service as subjects

    settings = runtime.settings
    return _attempt(
        "erasure",
        subjects.claim_next(
            runtime.db,
            worker=worker,
            stale=timedelta(seconds=settings.erasure_job_stale_seconds),
            max_attempts=settings.erasure_max_attempts,
        ),
        lambda erasure_id: runner.run(
            runtime.db,
            runtime.store,
            erasure_id,
            worker=worker,
            stop=stop,
            duty=settings.erasure_duty,
        ),
        lambda erasure_id, **how: subjects.release(runtime.db, erasure_id, worker=worker, **how),
        runner.Interrupted,
    )


async def run_erasures_forever(runtime: Runtime, stop: asyncio.Event, slot: int = 0) -> None:
    """Run erasures one after another until `stop`; between them, wait for an erasure
    asked of this process (at once) or for the poll interval (those of other processes)."""
    worker = f"{socket.gethostname()}:{os.getpid()}:erasure-{slot}"
    await _drain_forever(runtime, stop, erase_one, worker, runtime.erasures_queued, "erasure")
