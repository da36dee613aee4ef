"""Events and webhooks end to end (issue 22's benchmark).

PostgreSQL; `headwater serve --workers 2` (API and worker, which delivers); ENDPOINTS
endpoints on a receiver on loopback (an asyncio HTTP server in a process of its own):
SLOW of them answer after 2 s, FAILING of them answer 500 half the time, the rest at
once. Pushes of one record each from THREADS threads.

  (0) delivery throughput against its anchors, in turns: A a bare aiohttp client posting
      DRAIN_EVENTS bodies of an event's size, signed, to each of ENDPOINTS healthy
      endpoints with the service's limits (64 in flight, 4 per endpoint); D the same
      POSTs through the simplest durable queue (`durable_client`: a row a delivery in
      PostgreSQL, leased before its POST, deleted with an attempt's row written after
      it), what keeping each delivery costs at least; B the service delivering
      DRAIN_EVENTS events pushed at once to the same number of endpoints (from the first
      push to the last arrival) -> deliveries/s of each, and the ratios
  (1r) the cost of delivering at a rate the deliveries keep up with, on the same
      endpoints: KEEP_RATE pushes/s for SECONDS, A B A B, A every endpoint disabled and
      B every endpoint enabled -> pushes/s reached and push latency p50/p99 in each, B/A,
      and how long after B's last push its last delivery arrived (the backlog drained)
  (1) the cost of delivering, on the same 2 cores: pushes as fast as they go for SECONDS,
      alternating (A B A B) A: every endpoint disabled (events are written, nothing is
      delivered) and B: every endpoint enabled (each event fanned out and delivered)
      -> pushes/s in each, B/A, deliveries/s
  (2) latency at a rate the machine can deliver: RATE pushes/s for SECONDS, first with
      only the healthy endpoints enabled (C0), then with the slow and failing ones too
      (C1) -> p50/p99 from commit (the event's `created_at`) to arrival, for the healthy
      endpoints, and what the slow and failing ones saw

The cost of the outbox itself (the event row each push writes) is measured by
`bench.ingest` A/B against the code before it (docs/benchmarks.md). Targets: (0) >= 0.5
of the bare client; healthy p99 <= 1 s with slow and failing endpoints present; pushes
with events >= 0.9 of without.

    uv run python -m bench.webhooks [--endpoints 100 --slow 10 --failing 10 --seconds 20
                                     --rate 4 --keep-rate 8 --drain-events 100]
                                    [--drain-only: part (0) alone]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import aiohttp
import httpx
import psycopg

from bench.common import (
    OPERATOR,
    SECRET,
    bench_database,
    fresh_database,
    kept_client,
    production_server,
    server_env,
    token,
)
from headwater.webhooks.crypto import signature


def arrived(port: int) -> int:
    return int(kept_client().get(f"http://127.0.0.1:{port}/count").text)


def wait_arrived(port: int, count: int, timeout: float = 600) -> float:
    """Wait until the receiver has seen `count` requests in all; when (time.time())."""
    deadline = time.monotonic() + timeout
    while arrived(port) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {arrived(port)} of {count} deliveries arrived")
        time.sleep(0.02)
    return time.time()


async def signed_post(
    session: aiohttp.ClientSession, port: int, path: str, n: int, body: bytes
) -> int:
    """One POST of `body` (event `n`) to `path` on the receiver, signed as the service
    signs; the answer's status."""
    stamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "webhook-id": f"evt_{n}",
        "webhook-timestamp": str(stamp),
        "webhook-signature": signature(BARE_SECRET, f"evt_{n}", stamp, body),
    }
    url = f"http://127.0.0.1:{port}{path}"
    async with session.post(url, data=body, headers=headers) as response:
        await response.read()
        return response.status


def bare_client(port: int, paths: list[str], bodies: list[bytes], *, limit: int, per: int) -> None:
    """The anchor: aiohttp posting every body to every path, signed as the service signs,
    at most `limit` in flight and `per` per path (the service's limits)."""

    async def run() -> None:
        slots = {path: asyncio.Semaphore(per) for path in paths}
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def post(path: str, body: bytes, n: int) -> None:
                async with slots[path]:
                    status = await signed_post(session, port, path, n, body)
                    assert status == 200, status

            await asyncio.gather(
                *(post(path, body, n) for n, body in enumerate(bodies) for path in paths)
            )

    asyncio.run(run())


BARE_SECRET = "whsec_" + "QmVuY2htYXJrIHNlY3JldCBvZiAzMiBieXRlcyEhISE="

# The durable anchor's tables: the simplest queue that loses nothing. A row a delivery,
# leased (`leased_until`, in no index: the update stays HOT) before its POST, deleted
# with its attempt's row written after it.
_DURABLE_TABLES = """
CREATE TABLE bare_queue (
    id bigserial PRIMARY KEY, path text NOT NULL, n int NOT NULL, body bytea NOT NULL,
    due timestamptz NOT NULL, leased_until timestamptz
);
CREATE INDEX ON bare_queue (due);
CREATE TABLE bare_attempts (
    id bigserial PRIMARY KEY, queue_id bigint NOT NULL, path text NOT NULL,
    at timestamptz NOT NULL, status int NOT NULL
)
"""
_DURABLE_LEASE = """
UPDATE bare_queue SET leased_until = now() + interval '30 seconds'
WHERE id IN (
    SELECT id FROM bare_queue
    WHERE due <= now() AND (leased_until IS NULL OR leased_until < now())
      AND NOT (path = ANY(%(full)s))
    ORDER BY due LIMIT %(free)s FOR UPDATE SKIP LOCKED
)
RETURNING id, path, n, body
"""


@contextmanager
def durable_database() -> Iterator[str]:
    """A fresh database of its own for the durable anchor (not the service's: its
    connections stay out of the service's count), with its tables."""
    with fresh_database("hw_bench_webhooks_durable") as url:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(_DURABLE_TABLES)
        yield url


def durable_client(
    database_url: str, port: int, paths: list[str], bodies: list[bytes], *, limit: int, per: int
) -> None:
    """The durable anchor: the bare client's POSTs (same limits, same signatures) through
    the simplest queue in PostgreSQL that loses nothing, in one process: every delivery
    a row, inserted together (the fan-out); leased in batches (`FOR UPDATE SKIP LOCKED`,
    at most `per` a path in flight) and committed before its POST; its row deleted and its
    attempt's row inserted, committed in batches, after it."""

    async def run() -> None:
        lease = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        recorder = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        await lease.execute(
            "INSERT INTO bare_queue (path, n, body, due)"
            " SELECT path, n, body, now() FROM unnest(%s::text[], %s::int[], %s::bytea[])"
            " AS d(path, n, body)",
            (
                [path for _ in bodies for path in paths],
                [n for n in range(len(bodies)) for _ in paths],
                [body for body in bodies for _ in paths],
            ),
        )
        total = len(bodies) * len(paths)
        flying: dict[str, int] = dict.fromkeys(paths, 0)
        done: list[tuple[int, str, int]] = []
        finished, freed = asyncio.Event(), asyncio.Event()
        recorded = 0
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def post(row: tuple[int, str, int, bytes]) -> None:
                queue_id, path, n, body = row
                status = await signed_post(session, port, path, n, body)
                flying[path] -= 1
                freed.set()
                done.append((queue_id, path, status))
                finished.set()

            async def record() -> None:
                nonlocal recorded
                while recorded < total:
                    await finished.wait()
                    finished.clear()
                    batch = done[:]
                    del done[: len(batch)]
                    if not batch:
                        continue
                    async with recorder.transaction():
                        await recorder.execute(
                            "DELETE FROM bare_queue WHERE id = ANY(%s)", ([b[0] for b in batch],)
                        )
                        await recorder.execute(
                            "INSERT INTO bare_attempts (queue_id, path, at, status)"
                            " SELECT q, p, now(), s FROM unnest(%s::bigint[], %s::text[],"
                            " %s::int[]) AS a(q, p, s)",
                            ([b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch]),
                        )
                    recorded += len(batch)

            recording = asyncio.create_task(record())
            tasks: set[asyncio.Task[None]] = set()
            leased = 0
            while leased < total:
                freed.clear()  # before counting: a POST ending after it wakes the wait
                free = limit - sum(flying.values())
                full = [path for path, count in flying.items() if count >= per]
                rows = []
                if free > 0:
                    cursor = await lease.execute(_DURABLE_LEASE, {"full": full, "free": free})
                    rows = await cursor.fetchall()
                for row in rows:
                    if flying[row[1]] >= per:  # two of a path in one lease: the rest later
                        await lease.execute(
                            "UPDATE bare_queue SET leased_until = NULL WHERE id = %s", (row[0],)
                        )
                        continue
                    flying[row[1]] += 1
                    leased += 1
                    task = asyncio.create_task(post(row))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if not rows or free <= 0:
                    await freed.wait()
            await recording
        await lease.close()
        await recorder.close()

    asyncio.run(run())


SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id"],
}


def receive(port_out: Any, results: Any, stop: Any, slow: int, failing: int) -> None:
    """The receiver process: /ok/N, /slow/N (2 s), /fail/N (500 half the time). At the
    end, sends [(path, webhook-id, arrival time, created_at, status)] to `results`."""
    seen: list[tuple[str, str, float, str, int]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                if path == "/count":  # how many deliveries arrived so far
                    count = str(len(seen)).encode()
                    writer.write(
                        b"HTTP/1.1 200 X\r\ncontent-length: %d\r\n\r\n%s" % (len(count), count)
                    )
                    await writer.drain()
                    continue
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                arrived = time.time()
                status = 200
                if path.startswith("/slow/"):
                    await asyncio.sleep(2)
                elif path.startswith("/fail/") and random.random() < 0.5:
                    status = 500
                created = json.loads(body)["created_at"]
                seen.append((path, headers["webhook-id"], arrived, created, status))
                writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n".encode())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
        except asyncio.CancelledError:  # a connection kept open (`kept_client`) at the end
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_out.send(server.sockets[0].getsockname()[1])
        while not stop.is_set():
            await asyncio.sleep(0.2)
        server.close()
        results.send(seen)

    asyncio.run(main())


def push_for(
    url: str,
    headers: dict[str, str],
    client_id: str,
    seconds: float,
    threads: int,
    rate: float | None = None,
    limit: int | None = None,
    latencies: list[float] | None = None,
) -> int:
    """Single-record pushes for `seconds`: as fast as they go, or `rate` a second; at
    most `limit` in all. Each push's seconds are added to `latencies`, if given."""
    done = [0] * threads
    started = time.monotonic()
    deadline = started + seconds

    def run(k: int) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            n = 0
            while time.monotonic() < deadline:
                if limit is not None and n * threads + k >= limit:
                    break
                if rate is not None:
                    due = started + (n * threads + k) / rate
                    if due > time.monotonic():
                        time.sleep(due - time.monotonic())
                body = {
                    "client_id": client_id,
                    "dataset_id": "orders",
                    "data": {"order_id": f"{k}-{n}", "amount": 1.5},
                }
                sent = time.perf_counter()
                response = http.post("/platform/v1/data/json", json=body)
                if latencies is not None:
                    latencies.append(time.perf_counter() - sent)
                assert response.status_code == 200, response.text
                n += 1
            done[k] = n

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(done)


class Hooked:
    """A company with an ingestion client (`client_id`, dataset `orders`), a pushing
    credential, and ENDPOINTS endpoints on the receiver: SLOW slow, FAILING failing."""

    def __init__(
        self, url: str, admin: dict[str, str], client_id: str, port: int, args: Any
    ) -> None:
        self.url = url

        def post(path: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
            response = httpx.post(url + path, json=body, headers=headers, timeout=30)
            assert response.status_code == 201, response.text
            return response.json()

        def bearer(scopes: list[str]) -> dict[str, str]:
            credential = post(
                f"/admin/v1/companies/{company}/credentials",
                {"name": "bench", "scopes": scopes},
                admin,
            )
            secret = token(url, credential["client_id"], credential["client_secret"])
            return {"Authorization": f"Bearer {secret}"}

        company = post("/admin/v1/companies", {"name": client_id}, admin)["id"]
        post(f"/admin/v1/companies/{company}/clients", {"client_id": client_id, "name": "B"}, admin)
        post(
            f"/admin/v1/clients/{client_id}/datasets",
            {"dataset_id": "orders", "schema": SCHEMA},
            admin,
        )
        self.headers = bearer(["data:write"])
        self.manage = bearer(["webhooks:manage", "events:read"])
        kinds = (
            ["slow"] * args.slow
            + ["fail"] * args.failing
            + ["ok"] * (args.endpoints - args.slow - args.failing)
        )
        self.ids: dict[str, list[str]] = {"slow": [], "fail": [], "ok": []}
        for n, kind in enumerate(kinds):
            created = post(
                "/platform/v1/webhook_endpoints",
                {
                    "url": f"http://127.0.0.1:{port}/{kind}/{client_id}-{n}",
                    "event_types": ["transaction.completed"],
                },
                self.manage,
            )
            self.ids[kind].append(created["id"])

    def delete(self) -> None:
        for endpoint_id in [e for ids in self.ids.values() for e in ids]:
            httpx.delete(
                f"{self.url}/platform/v1/webhook_endpoints/{endpoint_id}",
                headers=self.manage,
                timeout=600,
            ).raise_for_status()

    def set_status(self, status: str, *which: str) -> None:
        for kind in which:
            for endpoint_id in self.ids[kind]:
                httpx.patch(
                    f"{self.url}/platform/v1/webhook_endpoints/{endpoint_id}",
                    json={"status": status},
                    headers=self.manage,
                    timeout=30,
                ).raise_for_status()


def throughput(url: str, admin: dict[str, str], port: int, args: Any) -> dict[str, list[float]]:
    """(0): deliveries/s to `endpoints` healthy endpoints, A B A B: A the bare aiohttp
    client (64 in flight, 4 per endpoint) posting bodies of an event's size, B the service
    delivering `drain_events` events pushed at once (timed from the first push to the
    last arrival)."""
    healthy = argparse.Namespace(**{**vars(args), "slow": 0, "failing": 0})
    hooked = Hooked(url, admin, "bench-t", port, healthy)
    rates: dict[str, list[float]] = {"bare": [], "durable": [], "service": []}
    total = args.drain_events * args.endpoints
    # one event's body, to give the anchor bodies of the same size
    push_for(url, hooked.headers, "bench-t", 0.5, 1)
    time.sleep(3)
    event = httpx.get(
        f"{url}/platform/v1/events", params={"limit": 1}, headers=hooked.manage, timeout=30
    )
    assert event.status_code == 200, event.text
    size = len(json.dumps(event.json()["data"][0]).encode())
    paths = [f"/ok/bare-{n}" for n in range(args.endpoints)]
    for _ in range(args.rounds):
        base = arrived(port)
        bodies = [
            json.dumps({"created_at": "2026-01-01T00:00:00.000Z", "pad": "x" * size}).encode()
            for _ in range(args.drain_events)
        ]
        began = time.time()
        bare_client(port, paths, bodies, limit=64, per=4)
        rates["bare"].append(total / (wait_arrived(port, base + total) - began))
        base = arrived(port)
        with durable_database() as database:
            began = time.time()
            durable_client(database, port, paths, bodies, limit=64, per=4)
            rates["durable"].append(total / (wait_arrived(port, base + total) - began))
        base = arrived(port)
        began = time.time()
        push_for(url, hooked.headers, "bench-t", 60, args.threads, limit=args.drain_events)
        rates["service"].append(total / (wait_arrived(port, base + total) - began))
        print(
            f"(0) {total:,} deliveries: bare {rates['bare'][-1]:,.0f}/s, "
            f"durable {rates['durable'][-1]:,.0f}/s, service {rates['service'][-1]:,.0f}/s",
            flush=True,
        )
    if not args.drain_only:
        keeping(url, hooked, port, args)
    hooked.delete()
    return rates


def keeping(url: str, hooked: Hooked, port: int, args: Any) -> None:
    """(1r): pushes at `keep_rate` a second with every endpoint disabled (A) and enabled
    (B), in turns; prints what each reached, their latencies, and the drain after B."""
    reached: dict[str, list[float]] = {"A": [], "B": []}
    p50: dict[str, list[float]] = {"A": [], "B": []}
    for _ in range(args.rounds):
        for phase in ("A", "B"):
            hooked.set_status("disabled" if phase == "A" else "enabled", "ok")
            base = arrived(port)
            latencies: list[float] = []
            count = push_for(
                url,
                hooked.headers,
                "bench-t",
                args.seconds,
                args.threads,
                rate=args.keep_rate,
                latencies=latencies,
            )
            ended = time.time()
            reached[phase].append(count / args.seconds)
            p50[phase].append(percentile(latencies, 50))
            line = (
                f"(1r) {phase}: {count / args.seconds:.1f} pushes/s, latency p50 "
                f"{percentile(latencies, 50) * 1000:.1f} ms, p99 "
                f"{percentile(latencies, 99) * 1000:.1f} ms"
            )
            if phase == "A":
                # A's events sequenced while no endpoint wants them (a feed read does it),
                # so that B delivers only its own
                httpx.get(
                    f"{url}/platform/v1/events",
                    params={"limit": 1},
                    headers=hooked.manage,
                    timeout=60,
                ).raise_for_status()
            else:
                last = wait_arrived(port, base + count * args.endpoints)
                line += f"; the last delivery arrived {last - ended:.2f} s after the last push"
            print(line, flush=True)
    a, b = statistics.median(reached["A"]), statistics.median(reached["B"])
    la, lb = statistics.median(p50["A"]), statistics.median(p50["B"])
    print(
        f"\n(1r) at {args.keep_rate:g} pushes/s: reached A {a:.1f}/s, B {b:.1f}/s: B/A "
        f"{b / a:.3f} (target >= 0.9); push p50 A {la * 1000:.1f} ms, B {lb * 1000:.1f} ms",
        flush=True,
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else 0.0


def removed(database: str, timeout: float = 900) -> float:
    """Wait until the worker has removed the deleted endpoints, with their deliveries
    (`webhooks.service.remove_deleted`); the seconds it took."""
    began = time.time()
    with psycopg.connect(database, autocommit=True) as conn:
        while conn.execute(
            "SELECT count(*) FROM webhook_endpoints WHERE status = 'deleted'"
        ).fetchone() != (0,):
            if time.time() - began > timeout:
                raise SystemExit(f"the deleted endpoints were not removed in {timeout:.0f} s")
            time.sleep(0.5)
    return time.time() - began


def beside_pushes(
    url: str, admin: dict[str, str], port: int, args: Any, database: str
) -> tuple[
    dict[str, list[float]], dict[str, list[tuple[float, float]]], dict[str, tuple[float, float]]
]:
    """Parts (1) and (2): pushes/s with the endpoints disabled and enabled, in turns (each
    phase's time spans), then pushes at `rate` with only the healthy endpoints and with
    every kind (each phase's window)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    windows: dict[str, tuple[float, float]] = {}
    first = Hooked(url, admin, "bench-a", port, args)
    rates: dict[str, list[float]] = {"A": [], "B": []}
    for _ in range(args.rounds):
        for phase in ("A", "B"):
            first.set_status("disabled" if phase == "A" else "enabled", "slow", "fail", "ok")
            began = time.time()
            count = push_for(url, first.headers, "bench-a", args.seconds, args.threads)
            spans.setdefault(phase, []).append((began, time.time()))
            rates[phase].append(count / args.seconds)
            print(f"(1) {phase}: {count / args.seconds:,.0f} pushes/s", flush=True)
    # (1)'s deliveries are not drained: at 100 endpoints a second of pushes makes
    # more than the machine delivers in a minute. Its endpoints are deleted (with
    # their deliveries, and its company's events are no longer sequenced); (2) has
    # a company of its own, and begins once the worker has removed them (while it
    # removed them, the healthy endpoints' p99 in C0 was 0.5-3.4 s against 0.1-0.5 in
    # C1 after it: C0 measured the removal)
    first.delete()
    print(f"(1) its backlog removed in {removed(database):.0f} s", flush=True)
    second = Hooked(url, admin, "bench-b", port, args)
    second.set_status("disabled", "slow", "fail", "ok")
    for phase, kinds_on in (("C0", ("ok",)), ("C1", ("ok", "slow", "fail"))):
        second.set_status("enabled", *kinds_on)
        began = time.time()
        count = push_for(url, second.headers, "bench-b", args.seconds, args.threads, rate=args.rate)
        windows[phase] = (began, time.time())
        print(f"(2) {phase}: {count} pushes at {count / args.seconds:.1f}/s", flush=True)
        time.sleep(5)  # the last events' deliveries
    return rates, spans, windows


def report_drain(drain: dict[str, list[float]], args: Any) -> None:
    """Part (0)'s figures: medians of each side's trials, and their ratios."""
    bare, ours = statistics.median(drain["bare"]), statistics.median(drain["service"])
    durable = statistics.median(drain["durable"])
    print(
        f"\n(0) deliveries/s to {args.endpoints} healthy endpoints: bare aiohttp {bare:,.0f}, "
        f"the service {ours:,.0f}: ratio {ours / bare:.3f} (target >= 0.5)\n"
        f"    the durable anchor {durable:,.0f}: {durable / bare:.3f} of the bare client; "
        f"the service {ours / durable:.3f} of it"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoints", type=int, default=100)
    parser.add_argument("--slow", type=int, default=10)
    parser.add_argument("--failing", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rate", type=float, default=4, help="pushes/s in (2)")
    parser.add_argument("--keep-rate", type=float, default=8, help="pushes/s in (1r)")
    parser.add_argument("--drain-events", type=int, default=100, help="events a trial of (0)")
    parser.add_argument(
        "--drain-only", action="store_true", help="part (0) alone: delivery throughput"
    )
    args = parser.parse_args()

    port_in, port_out = multiprocessing.Pipe(duplex=False)
    results_in, results_out = multiprocessing.Pipe(duplex=False)
    stop = multiprocessing.Event()
    receiver = multiprocessing.Process(
        target=receive, args=(port_out, results_out, stop, args.slow, args.failing)
    )
    receiver.start()
    port = port_in.recv()
    env = server_env(
        "",
        HEADWATER_WEBHOOK_ALLOW_HTTP="true",
        HEADWATER_WEBHOOK_ALLOW_PRIVATE="true",
        HEADWATER_WEBHOOK_RETRY_SCHEDULE="1,2,4",
        HEADWATER_LOG_LEVEL="WARNING",
    )
    with bench_database("hw_bench_webhooks") as database:
        env["HEADWATER_DATABASE_URL"] = database
        with production_server(env, workers=2) as url:
            admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}
            drain = throughput(url, admin, port, args)
            if not args.drain_only:
                rates, spans, windows = beside_pushes(url, admin, port, args, database)
    stop.set()
    seen = results_in.recv()
    receiver.join()
    print(f"the receiver saw {len(seen):,} requests")

    report_drain(drain, args)
    if args.drain_only:
        return
    a, b = statistics.median(rates["A"]), statistics.median(rates["B"])
    print(
        f"\n(1) pushes/s: A (endpoints disabled) {a:,.0f}, B (every endpoint enabled) "
        f"{b:,.0f}: B/A {b / a:.3f}"
    )
    during_b = [s for s in seen for start, end in spans["B"] if start <= s[2] <= end]
    b_seconds = sum(end - start for start, end in spans["B"])
    print(f"    deliveries during B: {len(during_b) / b_seconds:,.0f}/s")

    def lag(phase: str, prefix: str) -> list[float]:
        start, end = windows[phase]
        first: dict[tuple[str, str], float] = {}
        for path, event_id, arrived, created, status in seen:
            committed = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
            if path.startswith(prefix) and status == 200 and start <= committed <= end:
                key = (path, event_id)
                first[key] = min(first.get(key, arrived), arrived) - committed
        return list(first.values())

    for phase, label in (("C0", "healthy only"), ("C1", "with slow and failing")):
        healthy = lag(phase, "/ok/")
        print(
            f"(2) {phase} ({label}): healthy {len(healthy):,} deliveries, commit to arrival "
            f"p50 {percentile(healthy, 50) * 1000:.0f} ms, p99 "
            f"{percentile(healthy, 99) * 1000:.0f} ms (target <= 1000 ms)"
        )
    slow, failing = lag("C1", "/slow/"), lag("C1", "/fail/")
    print(
        f"    C1 slow (2 s answers): {len(slow):,} delivered in the window, p50 "
        f"{percentile(slow, 50):.1f} s; failing (500 half the time): {len(failing):,} "
        f"delivered, p50 {percentile(failing, 50):.1f} s, p99 {percentile(failing, 99):.1f} s"
    )


if __name__ == "__main__":
    main()
