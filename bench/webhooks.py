"""Events and webhooks end to end (issue 22's benchmark).

PostgreSQL; `headwater serve` (API and worker, which delivers); ENDPOINTS endpoints on
a receiver on loopback (an asyncio HTTP server in a process of its own): SLOW of them
answer after 2 s, FAILING of them answer 500 half the time, the rest at once. Pushes of
one record from THREADS threads, in phases of SECONDS, alternating (A B A B):

  A  every endpoint disabled: events are written (the outbox) but go nowhere
  B  every endpoint enabled: each event is fanned out to every endpoint and delivered

Printed: push throughput in each phase and B/A (the cost of webhooks on ingestion),
deliveries/s, and p50/p99 from commit (the event's `created_at`) to arrival at the
receiver, for the healthy endpoints and for the slow ones. Targets: B/A >= 0.9, healthy
p99 <= 1 s while slow and failing endpoints are present.

    uv run python -m bench.webhooks [--endpoints 100 --slow 10 --failing 10 --seconds 20]
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
    data_tenant,
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


def push_for(url: str, headers: dict[str, str], seconds: float, threads: int) -> int:
    done = [0] * threads
    deadline = time.monotonic() + seconds

    def run(k: int) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            n = 0
            while time.monotonic() < deadline:
                body = {
                    "client_id": "bench-crm",
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
    parser.add_argument("--drain", type=float, default=60, help="seconds to wait for deliveries")
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
            headers, company = data_tenant(url, dataset_id="orders", schema=SCHEMA)
            admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}
            credential = httpx.post(
                f"{url}/admin/v1/companies/{company}/credentials",
                json={"name": "hooks", "scopes": ["webhooks:manage"]},
                headers=admin,
            ).json()
            manage = {
                "Authorization": "Bearer "
                + token(url, credential["client_id"], credential["client_secret"])
            }
            kinds = (
                ["slow"] * args.slow
                + ["fail"] * args.failing
                + ["ok"] * (args.endpoints - args.slow - args.failing)
            )
            ids = []
            for n, kind in enumerate(kinds):
                created = httpx.post(
                    f"{url}/platform/v1/webhook_endpoints",
                    json={
                        "url": f"http://127.0.0.1:{port}/{kind}/{n}",
                        "event_types": ["transaction.completed"],
                    },
                    headers=manage,
                )
                assert created.status_code == 201, created.text
                ids.append(created.json()["id"])

            def set_all(status: str) -> None:
                for endpoint_id in ids:
                    httpx.patch(
                        f"{url}/platform/v1/webhook_endpoints/{endpoint_id}",
                        json={"status": status},
                        headers=manage,
                    ).raise_for_status()

            rates: dict[str, list[float]] = {"A": [], "B": []}
            pushed_b = 0
            for _ in range(args.rounds):
                for phase in ("A", "B"):
                    set_all("disabled" if phase == "A" else "enabled")
                    count = push_for(url, headers, args.seconds, args.threads)
                    rates[phase].append(count / args.seconds)
                    print(f"phase {phase}: {count / args.seconds:,.0f} pushes/s", flush=True)
                    if phase == "B":
                        pushed_b += count
            set_all("enabled")
            wanted = pushed_b * (args.endpoints - args.slow - args.failing)
            print(f"waiting up to {args.drain:g} s for deliveries to drain", flush=True)
            time.sleep(args.drain)
    stop.set()
    seen = results_in.recv()
    receiver.join()

    a, b = statistics.median(rates["A"]), statistics.median(rates["B"])
    print(
        f"\npush throughput: A (no deliveries) {a:,.0f}/s, B (webhooks on) {b:,.0f}/s, "
        f"B/A {b / a:.3f} (target >= 0.9)"
    )
    arrivals = [s[2] for s in seen]
    if arrivals:
        span = max(arrivals) - min(arrivals)
        print(
            f"deliveries: {len(seen):,} requests in {span:.1f} s, "
            f"{len(seen) / max(span, 1e-9):,.0f}/s"
        )

    def lag(prefix: str) -> list[float]:
        first: dict[tuple[str, str], float] = {}
        for path, event_id, arrived, created, status in seen:
            if path.startswith(prefix) and status == 200:
                committed = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
                key = (path, event_id)
                first[key] = min(first.get(key, arrived), arrived) - committed
        return list(first.values())

    healthy = lag("/ok/")
    print(
        f"healthy endpoints: {len(healthy):,} of {wanted:,} delivered; commit to delivery "
        f"p50 {percentile(healthy, 50) * 1000:.0f} ms, p99 {percentile(healthy, 99) * 1000:.0f} ms "
        f"(target <= 1000 ms)"
    )
    slow = lag("/slow/")
    print(
        f"slow endpoints (2 s answers): {len(slow):,} delivered; p50 "
        f"{percentile(slow, 50):.1f} s, p99 {percentile(slow, 99):.1f} s"
    )
    failing = lag("/fail/")
    print(
        f"failing endpoints (500 half the time): {len(failing):,} delivered; p50 "
        f"{percentile(failing, 50):.1f} s, p99 {percentile(failing, 99):.1f} s"
    )


if __name__ == "__main__":
    main()
