"""The background worker: periodic jobs, run inside `serve` or alone as `headwater worker`.

Every job must be safe to run in several processes at once (several API instances each
run one), and must survive a database that is briefly unreachable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from headwater.runtime import Runtime

log = structlog.get_logger("headwater.worker")

Job = Callable[[Runtime], Awaitable[None]]


async def refresh_verification_keys(runtime: Runtime) -> None:
    """Pick up keys rotated or removed by another process (CLI or another instance)."""
    await runtime.verifier.keys.refresh()


async def forget_idempotency_keys(runtime: Runtime) -> None:
    """Delete Idempotency-Key answers past their window (a stale key is ignored anyway)."""
    from datetime import timedelta

    import anyio.to_thread

    from headwater.ingestion.service import purge_idempotency_keys

    window = timedelta(seconds=runtime.settings.idempotency_ttl_seconds)

    def purge() -> int:
        with runtime.db.session() as session:
            return purge_idempotency_keys(session, older_than=window)

    purged = await anyio.to_thread.run_sync(purge)
    if purged:
        log.info("idempotency keys purged", count=purged)


JOBS: list[Job] = [refresh_verification_keys, forget_idempotency_keys]


async def run_once(runtime: Runtime) -> None:
    for job in JOBS:
        try:
            await job(runtime)
        except Exception:
            log.exception("worker job failed", job=job.__name__)


async def run_forever(runtime: Runtime, stop: asyncio.Event) -> None:
    interval = runtime.settings.worker_interval_seconds
    while not stop.is_set():
        await run_once(runtime)
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval)
        except TimeoutError:
            continue
