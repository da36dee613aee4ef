"""The objects one running service shares between requests, built from Settings."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field

import anyio.to_thread
import jwt
import structlog

from headwater import migrations
from headwater.config import Settings
from headwater.db import Database, Role, sealing_material, transaction_lock
from headwater.errors import is_unreachable
from headwater.files.stores import Store, make_store
from headwater.identity import keys as keyring
from headwater.identity import service as identity
from headwater.identity import shared
from headwater.identity.tokens import TokenVerifier
from headwater.ingestion.groups import PushQueue
from headwater.ingestion.readahead import ReadAhead
from headwater.kit import memory, sealing
from headwater.kit.coalesce import Coalescer
from headwater.kit.gate import Gate
from headwater.kit.ratelimit import FailureLimit, RateLimiter, make_rate_limiter
from headwater.kit.sealing import SecretBox
from headwater.kit.signals import Signals
from headwater.wakeups import Listener

log = structlog.get_logger("headwater.runtime")


@dataclass
class Runtime:
    settings: Settings
    db: Database
    verifier: TokenVerifier
    limiter: RateLimiter
    store: Store
    pushes: PushQueue
    # client secret checks (argon2): a few at a time, on threads of their own
    secret_checks: Gate
    # failed token requests per address; past the limit, the address waits a minute
    token_failures: FailureLimit
    # seals and opens webhook endpoint secrets
    secret_box: SecretBox
    # Set when an upload has queued a job, so an in-process worker starts at once.
    files_queued: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when an export is queued, so an in-process worker starts at once.
    exports_queued: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when an erasure is queued, so an in-process worker starts at once.
    erasures_queued: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when events are committed, so that the delivery loop sequences them at once.
    events_ready: asyncio.Event = field(default_factory=asyncio.Event)
    # Wakes record feed requests waiting on a dataset (its primary key, in hex) when
    # records are committed there (`wakeups`).
    commits: Signals = field(default_factory=Signals)
    # Full record feed pages read before their readers ask (`ingestion.readahead`).
    feed_ahead: ReadAhead = field(default_factory=ReadAhead)
    # Numbers the feeds' committed rows when a reader asks, off its request (`db.Numbering`).
    numbering: Coalescer = field(default_factory=lambda: Coalescer("numbering"))
    # Hears other processes' wake-ups (PostgreSQL; None where it cannot: `wakeups`).
    listener: Listener | None = None
    loop: asyncio.AbstractEventLoop | None = None

    def poll(self, polling: float) -> float:
        """How long an idle loop waits between looks at the database: `polling` while
        no wake-up can reach it, else HEADWATER_IDLE_POLL_SECONDS (`wakeups`)."""
        if self.listener is not None and self.listener.listening:
            return max(polling, self.settings.idle_poll_seconds)
        return polling

    def wake(self, topic: str, key: str) -> None:
        """Wake the loops waiting for work of `topic` (from any thread); `key`, the
        dataset of a feed's wake-up; none: every waiter of the topic."""
        if topic == "feed":
            if key:
                self.commits.notify(key)
            else:
                self.commits.notify_all()
            return
        ready = {
            "files": self.files_queued,
            "exports": self.exports_queued,
            "erasures": self.erasures_queued,
            "events": self.events_ready,
        }.get(topic)
        loop = self.loop
        if ready is None or loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # a thread's commit
            running = None
        if running is loop:
            ready.set()
        else:
            loop.call_soon_threadsafe(ready.set)

    def listen(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """Wake this process's loops on announcements, its own (at once) and, where the
        database can carry them, every other process's: the listening task, until `stop`."""
        self.loop = asyncio.get_running_loop()
        self.db.announcer.handle(self.wake)
        if not self.db.can_listen:
            return []
        self.listener = Listener(self.db.connect_listener, self.wake)
        return [asyncio.create_task(self.listener.run(stop))]

    async def close(self) -> None:
        await self.limiter.close()
        await self.token_failures.close()
        await self.pushes.close()
        await self.db.close_loop_reads()
        self.feed_ahead.close()
        self.numbering.close()
        self.secret_checks.close()
        self.db.dispose()


def _embedded_loader(db: Database) -> keyring.KeyLoader:
    def load() -> dict[str, jwt.PyJWK]:
        with db.unit_of_work() as session:
            return identity.verification_keys(session)

    async def load_async() -> dict[str, jwt.PyJWK]:
        return await anyio.to_thread.run_sync(load)

    return load_async


def _jwks_loader(url: str, algorithms: list[str]) -> keyring.KeyLoader:
    import httpx  # here, not at import: only an external identity provider needs it

    async def load() -> dict[str, jwt.PyJWK]:
        async with httpx.AsyncClient(timeout=5.0) as client:
            response = await client.get(url, headers={"Accept": "application/json"})
            response.raise_for_status()
            return keyring.public_keys(response.json(), algorithms)

    return load


def secret_box(settings: Settings) -> SecretBox:
    """The key of webhook endpoint secrets (`kit.sealing`'s material)."""
    return SecretBox(sealing_material(settings), sealing.WEBHOOK_SECRETS)


def build_runtime(settings: Settings, *, role: Role = "api") -> Runtime:
    """What a process of `role` ("api", or "other" for the worker alone) works with."""
    memory.return_large_blocks()
    db = Database(settings, role=role)
    if settings.external_idp:
        assert settings.oidc_jwks_url and settings.oidc_issuer and settings.oidc_audience
        loader = _jwks_loader(settings.oidc_jwks_url, settings.oidc_algorithms)
        issuer, audience, algorithms = (
            settings.oidc_issuer,
            settings.oidc_audience,
            settings.oidc_algorithms,
        )
        claim_map = settings.oidc_claim_map
    else:
        loader = _embedded_loader(db)
        issuer, audience, algorithms = settings.token_issuer, settings.audience, ["RS256"]
        claim_map = {}
    cache = keyring.KeyCache(
        loader,
        min_refresh=settings.jwks_min_refresh_seconds,
        max_age=settings.jwks_max_age_seconds,
    )
    verifier = TokenVerifier(
        keys=cache,
        issuer=issuer,
        audience=audience,
        algorithms=algorithms,
        claim_map=claim_map,
        leeway=settings.token_leeway_seconds,
    )
    limiter = make_rate_limiter(
        redis_url=settings.redis_url,
        rate=settings.rate_limit_per_second,
        burst=settings.rate_limit_burst,
    )
    return Runtime(
        settings=settings,
        db=db,
        verifier=verifier,
        limiter=limiter,
        store=make_store(settings),
        pushes=PushQueue(db),
        secret_checks=Gate(
            workers=max(2, os.cpu_count() or 2),
            queue=4 * max(2, os.cpu_count() or 2),
            wait=1.0,
            name="secret-check",
        ),
        token_failures=FailureLimit.per_minute(
            settings.token_failures_per_minute, redis_url=settings.redis_url, prefix="hw:tf:"
        ),
        secret_box=secret_box(settings),
    )


# An arbitrary constant naming the start-up lock among PostgreSQL advisory locks.
START_LOCK = 0x4857_7374_6172


def start(runtime: Runtime) -> None:
    """Blocking start-up work: migrate, ensure the bootstrap credential, load signing keys.

    A database that is down at start does not stop the process: /readyz answers 503 and
    the work is done again by the worker's key refresh once it is back.
    """
    settings = runtime.settings
    try:
        if settings.auto_migrate:
            migrations.bring_current(settings, runtime.db.engine)
        migrations.wait_while_locked(
            lambda: _start_once(runtime), seconds=settings.shutdown_timeout_seconds + 30
        )
    except Exception as exc:
        if not is_unreachable(exc):
            raise
        log.error("database unreachable at start; serving 503 until it is back")


def _start_once(runtime: Runtime) -> None:
    settings = runtime.settings
    # Instances and workers starting together would race to create the bootstrap
    # credential and the first signing key: one does it, the others then find them.
    with runtime.db.unit_of_work() as session:
        transaction_lock(session, START_LOCK)
        shared.check_sealing(session)
        if settings.bootstrap_client_id and settings.bootstrap_client_secret:
            identity.ensure_credential(
                session,
                client_id=settings.bootstrap_client_id,
                client_secret=settings.bootstrap_client_secret,
                name="bootstrap operator",
                company_id=None,
                scopes=["admin"],
            )
        if settings.embedded_idp_enabled and not settings.external_idp:
            issuer = identity.token_issuer(
                session, proposed=settings.token_issuer, named=settings.issuer_named
            )
            runtime.settings = settings.model_copy(update={"issuer": issuer})
            runtime.verifier.issuer = issuer
        if settings.embedded_idp_enabled:
            identity.current_signing_key(session, passphrase=settings.signing_key_passphrase)
            if not settings.external_idp:
                runtime.verifier.keys.prime(identity.verification_keys(session))
