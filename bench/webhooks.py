"""Events and webhooks end to end (issue 22's benchmark).

PostgreSQL; `headwater serve --workers 2` (API and worker, which delivers); ENDPOINTS
endpoints on a receiver on loopback (an asyncio HTTP server in a process of its own):
SLOW of them answer after 2 s, FAILING of them answer 500 half the time, the rest at
once. Pushes of one record each from THREADS threads.

  (1) the cost of delivering, on the same 2 cores: pushes as fast as they go for SECONDS,
      alternating (A B A B) A: every endpoint disabled (events are written, nothing is
      delivered) and B: every endpoint enabled (each event fanned out and delivered)
      -> pushes/s in each, B/A, deliveries/s
  (2) latency at a rate the machine can deliver: RATE pushes/s for SECONDS, first with
      only the healthy endpoints enabled (C0), then with the slow and failing ones too
      (C1) -> p50/p99 from commit (the event's `created_at`) to arrival, for the healthy
      endpoints, and what the slow and failing ones saw

The cost of the outbox itself (the event row each push writes) is measured by
`bench.ingest` A/B against the code before it (docs/benchmarks.md). Targets: healthy p99
<= 1 s with slow and failing endpoints present; pushes with events >= 0.9 of without.

    uv run python -m bench.webhooks [--endpoints 100 --slow 10 --failing 10 --seconds 20
                                     --rate 4]
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
from datetime import datetime
from typing import Any

import httpx

from bench.common import (
    OPERATOR,
    SECRET,
    bench_database,
    production_server,
    server_env,
    token,
)

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
) -> int:
    """Single-record pushes for `seconds`: as fast as they go, or `rate` a second."""
    done = [0] * threads
    started = time.monotonic()
    deadline = started + seconds

    def run(k: int) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            n = 0
            while time.monotonic() < deadline:
                if rate is not None:
                    due = started + (n * threads + k) / rate
                    if due > time.monotonic():
                        time.sleep(due - time.monotonic())
                body = {
                    "client_id": client_id,
                    "dataset_id": "orders",
                    "data": {"order_id": f"{k}-{n}", "amount": 1.5},
                }
                response = http.post("/platform/v1/data/json", json=body)
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
        self.manage = bearer(["webhooks:manage"])
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


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoints", type=int, default=100)
    parser.add_argument("--slow", type=int, default=10)
    parser.add_argument("--failing", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rate", type=float, default=4, help="pushes/s in (2)")
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
    windows: dict[str, tuple[float, float]] = {}
    spans: dict[str, list[tuple[float, float]]] = {}
    with bench_database("hw_bench_webhooks") as database:
        env["HEADWATER_DATABASE_URL"] = database
        with production_server(env, workers=2) as url:
            admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}
            first = Hooked(url, admin, "bench-a", port, args)
            rates: dict[str, list[float]] = {"A": [], "B": []}
            for _ in range(args.rounds):
                for phase in ("A", "B"):
                    first.set_status(
                        "disabled" if phase == "A" else "enabled", "slow", "fail", "ok"
                    )
                    began = time.time()
                    count = push_for(url, first.headers, "bench-a", args.seconds, args.threads)
                    spans.setdefault(phase, []).append((began, time.time()))
                    rates[phase].append(count / args.seconds)
                    print(f"(1) {phase}: {count / args.seconds:,.0f} pushes/s", flush=True)
            # (1)'s deliveries are not drained: at 100 endpoints a second of pushes makes
            # more than the machine delivers in a minute. Its endpoints are deleted (with
            # their deliveries, and its company's events are no longer sequenced); (2) has
            # a company of its own.
            first.delete()
            second = Hooked(url, admin, "bench-b", port, args)
            second.set_status("disabled", "slow", "fail", "ok")
            for phase, kinds_on in (("C0", ("ok",)), ("C1", ("ok", "slow", "fail"))):
                second.set_status("enabled", *kinds_on)
                began = time.time()
                count = push_for(
                    url, second.headers, "bench-b", args.seconds, args.threads, rate=args.rate
                )
                windows[phase] = (began, time.time())
                print(f"(2) {phase}: {count} pushes at {count / args.seconds:.1f}/s", flush=True)
                time.sleep(5)  # the last events' deliveries
    stop.set()
    seen = results_in.recv()
    receiver.join()
    print(f"the receiver saw {len(seen):,} requests")

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
