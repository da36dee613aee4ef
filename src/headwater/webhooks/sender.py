"""The delivery loop run by every worker (`headwater worker`, and `serve` with its
worker on): sequences the event log, claims due deliveries and POSTs them.

Each attempt: the URL's host is resolved and every address checked (contract section
13), and the connection resolves the name through `CheckedResolver`, which checks every
address it answers, with no DNS cache: a connection only ever goes to an address that
passed (TLS verifies the host's name as usual), so a DNS answer that changes after the
check (rebinding) cannot point it elsewhere. The client is aiohttp's: httpx's
asynchronous one (through httpcore) looks for `sniffio` on every request, an import
search of the whole path when it is absent (1.4 s of CPU in 5,000 deliveries), and
installing sniffio makes anyio detect the event loop library on each of its calls,
which cost the API's own request path (single-record pushes -7% in an A/B run). The body
is the event's JSON; the headers carry the Standard Webhooks signature. A 2xx within
the timeout is delivered; anything else is a failed attempt. Redirects are not
followed, no proxy from the environment is used, and at most 64 KiB of an answer is
read.

Slots: at most `webhook_concurrency` attempts in flight in this process, and at most
`webhook_endpoint_concurrency` per endpoint across every process (`dispatch.claim`
counts the leases in the database, queued or attempted), so a slow receiver holds a few
slots and never delays another's deliveries. The process leases up to `LEASE_AHEAD`
rounds of deliveries at once and keeps those it cannot attempt yet in a queue, so that
leasing the next ones (tens of milliseconds of database work) overlaps the attempts
instead of leaving every slot idle while it runs; a queued delivery is attempted only
while its lease still covers the timeout with a margin. A slot is free once the
receiver has answered; the outcomes are written by one recorder, many in a database
transaction (until then the delivery's lease keeps it from being claimed again; a
process that dies first leaves it to be attempted again: at least once).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import socket
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import aiohttp
import anyio.to_thread
import structlog
from aiohttp.abc import AbstractResolver, ResolveResult

from headwater import jobs
from headwater.config import Settings
from headwater.db import Database
from headwater.kit.clock import utcnow_ms
from headwater.webhooks import addresses, crypto, dispatch, metrics
from headwater.webhooks.dispatch import Claimed, Outcome

log = structlog.get_logger("headwater.webhooks")

MAX_ANSWER_BYTES = 65536
USER_AGENT = "Headwater-Webhooks/1"
# how often the oldest pending delivery's age is measured for the metric
GAUGE_SECONDS = 5.0
# outcomes written in one database transaction, at most
RECORD_BATCH = 500
# connection pools kept, one per endpoint, before idle ones are let go
MAX_SESSIONS = 512
# seconds between tries while the database cannot be reached
UNAVAILABLE_PAUSE = 2.0
# deliveries leased at most, queued and in flight, in rounds of `webhook_concurrency`
LEASE_AHEAD = 2
# a queued delivery is attempted only while its lease has this much beyond the timeout
LEASE_MARGIN = timedelta(seconds=5)
# a round that found nothing is followed by the next no sooner than this after it began:
# under a stream of pushes every commit wakes the loop, and each round is two database
# transactions (events sequenced, deliveries leased)
WAKE_GAP = 0.05
# ... and the gap doubles after each round that found nothing, with no attempt in hand,
# following another such round, up to this: a stream of pushes of companies without an
# endpoint, where every round is woken by a commit and finds nothing, costs a few rounds
# a second rather than 20 (2.7 ms of an API process's GIL a round: 3 us a record pushed
# in 500-record batches). A round that finds work or ends with attempts in hand brings
# it back to WAKE_GAP, and the empty round after it (the work drained) keeps it there:
# a company's pushes a few tenths of a second apart are sequenced as soon as ever
# (`bench.webhooks` part (2): commit to arrival p50 50 ms, 100-120 ms when every empty
# round doubled it)
MAX_WAKE_GAP = 0.4


def headers(claimed: Claimed, timestamp: int) -> dict[str, str]:
    signatures = " ".join(
        crypto.signature(secret, claimed.event_id, timestamp, claimed.body)
        for secret in claimed.secrets
    )
    return {
        "content-type": "application/json",
        "webhook-id": claimed.event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signatures,
        "user-agent": USER_AGENT,
    }


class Deliverer:
    """One process's delivery loop and its attempts in flight."""

    def __init__(
        self,
        db: Database,
        box: crypto.SecretBox,
        settings: Settings,
        *,
        ready: asyncio.Event | None = None,
        poll: Callable[[float], float] | None = None,
    ) -> None:
        """`ready`: set when events are committed (`wakeups`); `poll`: how long an idle
        loop waits, given how long it would without wake-ups (`Runtime.poll`)."""
        self.db = db
        self.ready = ready or asyncio.Event()
        self.poll = poll or (lambda polling: polling)
        self.box = box
        self.settings = settings
        self.timeout = settings.webhook_timeout_seconds
        # an attempt's lease: its timeout and a margin for recording it
        self.lease = timedelta(seconds=self.timeout + 15)
        self.in_flight: dict[uuid.UUID, int] = collections.defaultdict(int)
        self.tasks: dict[asyncio.Task[None], Claimed] = {}
        self.queued: collections.deque[Claimed] = collections.deque()
        self.stopping = False
        self.freed = asyncio.Event()
        self.sessions: dict[uuid.UUID, aiohttp.ClientSession] = {}
        self.closing: set[asyncio.Future[None]] = set()
        self.outcomes: asyncio.Queue[tuple[Claimed, Outcome]] = asyncio.Queue()
        self._gauge_at = 0.0
        # the least time from a round's start to the next's after a round that found
        # nothing: `WAKE_GAP`, doubled after each empty round that follows another
        self.gap = WAKE_GAP
        self._was_empty = True  # the last round found nothing, with no attempt in hand

    def _session(self, endpoint_id: uuid.UUID) -> aiohttp.ClientSession:
        """The endpoint's connection pool (kept alive between deliveries); its
        connections resolve names through `CheckedResolver`, never a cache."""
        session = self.sessions.get(endpoint_id)
        if session is None:
            if len(self.sessions) >= MAX_SESSIONS:
                # many endpoints: let go of the idle pools (endpoints deleted among them)
                for idle in [e for e in self.sessions if not self.in_flight.get(e)]:
                    closing = asyncio.ensure_future(self.sessions.pop(idle).close())
                    self.closing.add(closing)
                    closing.add_done_callback(self.closing.discard)
            connector = aiohttp.TCPConnector(
                limit=self.settings.webhook_endpoint_concurrency,
                resolver=CheckedResolver(allow_private=self.settings.webhook_allow_private),
                use_dns_cache=False,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                trust_env=False,
                auto_decompress=False,
            )
            self.sessions[endpoint_id] = session
        return session

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`: sequence, claim, attempt; then let attempts in flight finish
        (up to the shutdown timeout; any left are leased and run again elsewhere)."""
        recorder = asyncio.create_task(self._record_forever())
        try:
            while not stop.is_set():
                began = time.monotonic()
                # a wake-up from now on starts another round: this one may not see it
                self.freed.clear()
                self.ready.clear()
                try:
                    busy, found = await self._step()
                except Exception as exc:  # the database is briefly away: try again soon
                    log.warning("webhook loop unavailable", error=str(exc).splitlines()[0])
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=UNAVAILABLE_PAUSE)
                    continue
                empty = not (found or self.tasks or self.queued)  # a full round found work
                if not empty:
                    self.gap = WAKE_GAP
                if not busy:
                    await self._idle(stop, began)
                    if empty and self._was_empty:
                        self.gap = min(self.gap * 2, MAX_WAKE_GAP)
                self._was_empty = empty
        finally:
            self.stopping = True  # no queued delivery starts now: they are handed back
            try:
                if self.tasks:
                    await asyncio.wait(self.tasks, timeout=self.settings.shutdown_timeout_seconds)
                await self._hand_back()
                await self.outcomes.join()
            finally:
                # also when the loop cancels this task while it waits above (its end
                # at shutdown): the pools' connections are closed, not left to the
                # garbage collector
                recorder.cancel()
                for session in self.sessions.values():
                    await session.close()

    async def _idle(self, stop: asyncio.Event, began: float) -> None:
        """After a round that began at `began` (`time.monotonic()`) and found nothing:
        wait for a slot to free, or events to be committed (`ready`; heeded from
        `gap` after the round began), or the poll: the poll interval, or, where
        wake-ups are heard, until the next delivery falls due (a retry) if that comes
        first."""
        rest = began + self.gap - time.monotonic()
        if rest > 0 and await _first((stop, self.freed), rest):
            return
        if self.ready.is_set():  # committed while it rested: no due time to look up
            return
        polling = self.settings.webhook_poll_seconds
        timeout = self.poll(polling)
        if timeout > polling:
            due = await anyio.to_thread.run_sync(dispatch.next_due_seconds, self.db)
            timeout = max(polling, min(timeout, due))
        await _first((stop, self.freed, self.ready), timeout)

    async def _hand_back(self) -> None:
        """Attempts still running at shutdown are stopped and queued ones dropped, their
        deliveries due again at once for another worker (`jobs.hand_back`) rather than
        after their leases."""
        left = {task: claimed for task, claimed in self.tasks.items() if not task.done()}
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left)
        leases = [(c.delivery_id, c.until) for c in [*left.values(), *self.queued]]
        self.queued.clear()
        try:
            await anyio.to_thread.run_sync(jobs.hand_back, self.db, dispatch.DELIVERIES, leases)
        except Exception as exc:  # their leases run out instead
            log.warning("webhook deliveries not handed back", error=str(exc).splitlines()[0])

    async def _record_forever(self) -> None:
        """Write outcomes as they come, all that are waiting in one database transaction."""
        disable_after = timedelta(seconds=self.settings.webhook_disable_after_seconds)
        while True:
            done = [await self.outcomes.get()]
            while not self.outcomes.empty() and len(done) < RECORD_BATCH:
                done.append(self.outcomes.get_nowait())
            record = functools.partial(
                dispatch.record,
                self.db,
                done,
                schedule=self.settings.webhook_retry_schedule,
                disable_after=disable_after,
            )
            try:
                await anyio.to_thread.run_sync(record)
                self.ready.set()  # a retry's due time may be sooner than the loop's wait
            except Exception as exc:
                # not recorded: the leases run out and the deliveries are attempted again
                log.warning("webhook attempts not recorded", error=str(exc).splitlines()[0])
            finally:
                for _ in done:
                    self.outcomes.task_done()

    async def _step(self) -> tuple[bool, bool]:
        """One round: whether it was full (the next round starts at once), and whether
        it found any work (events sequenced or deliveries leased)."""
        sequenced = await anyio.to_thread.run_sync(dispatch.sequence_followed, self.db)
        concurrency = self.settings.webhook_concurrency
        # lease when at least half a round has room, so that leases come in rounds
        room = LEASE_AHEAD * concurrency - len(self.tasks) - len(self.queued)
        claimed: list[Claimed] = []
        if room >= max(1, concurrency // 2):
            claimed = await anyio.to_thread.run_sync(
                lambda: dispatch.claim(
                    self.db,
                    self.box,
                    limit=room,
                    per_endpoint=self.settings.webhook_endpoint_concurrency,
                    lease=self.lease,
                )
            )
        self.queued.extend(claimed)
        self._start_queued()
        now = time.monotonic()
        if now - self._gauge_at > GAUGE_SECONDS:
            self._gauge_at = now
            age = await anyio.to_thread.run_sync(dispatch.oldest_pending_seconds, self.db)
            metrics.OLDEST_PENDING.set(age)
        busy = bool(sequenced) or (bool(claimed) and len(claimed) == room)
        return busy, bool(sequenced) or bool(claimed)

    def _start_queued(self) -> None:
        """Attempt queued deliveries while slots are free, in the order they were
        leased; one whose lease no longer covers an attempt is left to run out (the
        delivery is due again then)."""
        latest = utcnow_ms() + timedelta(seconds=self.timeout) + LEASE_MARGIN
        while (
            self.queued
            and not self.stopping
            and len(self.tasks) < self.settings.webhook_concurrency
        ):
            item = self.queued.popleft()
            if item.until < latest:
                continue
            self.in_flight[item.endpoint_id] += 1
            task = asyncio.create_task(self._attempt(item))
            self.tasks[task] = item
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self.tasks.pop(task, None)
        self._start_queued()

    async def _attempt(self, claimed: Claimed) -> None:
        try:
            self.outcomes.put_nowait((claimed, await self.post(claimed)))
        except Exception:
            # not recorded: the lease runs out and the delivery is attempted again
            log.exception("webhook attempt failed", delivery=str(claimed.delivery_id))
        finally:
            self.in_flight[claimed.endpoint_id] -= 1
            if not self.in_flight[claimed.endpoint_id]:
                del self.in_flight[claimed.endpoint_id]
            self.freed.set()

    async def post(self, claimed: Claimed) -> Outcome:
        at = utcnow_ms()
        started = time.perf_counter()

        def outcome(status_code: int | None = None, error: str | None = None) -> Outcome:
            took = round((time.perf_counter() - started) * 1000)
            return Outcome(at=at, duration_ms=took, status_code=status_code, error=error)

        allow_private = self.settings.webhook_allow_private
        try:
            target = addresses.parse(claimed.url, allow_http=self.settings.webhook_allow_http)
            # a literal address is never given to the resolver: checked here, as names are
            await addresses.resolve(target, allow_private=allow_private)
            async with self._session(claimed.endpoint_id).post(
                claimed.url,
                data=claimed.body,
                headers=headers(claimed, int(time.time())),
                allow_redirects=False,
            ) as response:
                await response.content.read(MAX_ANSWER_BYTES)
                status = response.status
        except addresses.Refused as exc:
            return outcome(error=f"refused: {exc}")
        except TimeoutError:
            return outcome(error=f"timed out after {self.timeout:g} s")
        except aiohttp.ClientError as exc:
            return outcome(error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        if 300 <= status < 400:
            return outcome(status, "redirects are not followed")
        return outcome(status)


async def _first(events: tuple[asyncio.Event, ...], timeout: float) -> bool:
    """Wait until one of `events` is set or `timeout` seconds pass; whether one was."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for waiting in waits:
        waiting.cancel()
    return bool(done)


class CheckedResolver(AbstractResolver):
    """Name resolution for a delivery's connection: every address is checked (contract
    section 13), so the connection can only go to an address that passed."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        target = addresses.Target(host=host, port=port)
        checked = await addresses.resolve(target, allow_private=self.allow_private)
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in checked
        ]

    async def close(self) -> None:
        return None
