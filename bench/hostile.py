"""Hostile load (issue 17's benchmark), on PostgreSQL with `serve --workers 2`:

(a) 200 concurrent token requests with random client ids for --seconds, while /healthz
    is timed every 50 ms; run twice: with the default per-address failure limit, and
    with it lifted (HEADWATER_TOKEN_FAILURES_PER_MINUTE=1e9), so that every request
    reaches the bounded secret checks. Targets: /healthz p99 <= 100 ms, no 5xx, the
    server's RSS after the flood within 20% of before.
(b) a gzip bomb (1 MiB of gzip expanding to 1 GiB of newlines) and a 1 GiB file of
    blank lines from one company while another uploads a small CSV every 2 s. Targets:
    each small file completes within 30 s; both hostile files end `rejected`.

(c) and (d): hostile load on the SFTP and SMTP doors (`bench.hostile_channels` says
    what each measures and its targets).

  .venv/bin/python -m bench.hostile [--seconds 20] [--workers 2] [--only a|b|c|d]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from tests.http_server import free_port

from bench import hostile_channels as channels
from bench.common import (
    OPERATOR,
    SECRET,
    BenchCompany,
    bench_database,
    ensure_wrk,
    production_server,
    server_env,
    token,
)

GIB = 1024**3


def rss_mb(port: int) -> float:
    """The summed RSS of the server's processes: the one listening on `port`, its parent
    (uvicorn's supervisor) and that parent's children."""
    listening = {
        line.split()[9]
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
        if line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A"
    }
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    owners = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in listening:
                owners.add(pid)
    family = set(owners)
    for pid in pids:
        try:
            ppid = Path(f"/proc/{pid}/stat").read_text().split()[3]
        except OSError:
            continue
        if ppid in owners:
            family.add(pid)
    total = 0
    for pid in family:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


# wrk: 200 connections, each request a random client id; 5xx counted per thread.
_FLOOD = r"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local threads = {}
function setup(thread)
  table.insert(threads, thread)
end
function init(args)
  server_errors = 0
  refused = 0
  math.randomseed(os.time() + math.random(1, 100000))
end
function request()
  local id = string.format("hw_%08x%08x", math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
  return wrk.format(nil, nil, nil,
    '{"client_id":"' .. id .. '","client_secret":"guess","audience":"headwater-api"}')
end
function response(status, headers, body)
  if status >= 500 then server_errors = server_errors + 1 end
  if status == 429 then refused = refused + 1 end
end
function done(summary, latency, requests)
  local errors, refusals = 0, 0
  for _, t in ipairs(threads) do
    errors = errors + t:get("server_errors")
    refusals = refusals + t:get("refused")
  end
  io.write(string.format("SERVER_ERRORS %d\nREFUSED %d\n", errors, refusals))
  io.write(string.format("REQUESTS %d\nSOCKET_ERRORS %d\n", summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
"""


def flood(url: str, seconds: int) -> dict[str, Any]:
    """wrk floods the token endpoint while a thread of this process times /healthz every
    50 ms over a connection of its own (the load generator's loop does not delay it)."""
    health: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                start = time.perf_counter()
                answer = client.get("/healthz")
                health.append((time.perf_counter() - start) * 1000)
                assert answer.status_code == 200
                stop.wait(0.05)

    timer = threading.Thread(target=probe)
    timer.start()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(_FLOOD)
    try:
        done = subprocess.run(
            [
                ensure_wrk(),
                "-t2",
                "-c200",
                f"-d{seconds}s",
                "--timeout",
                "30s",
                "-s",
                lua.name,
                url + "/oauth/token",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        stop.set()
        timer.join()
        os.unlink(lua.name)

    def figure(name: str) -> int:
        found = re.search(rf"^{name} (\d+)", done.stdout, re.M)
        assert found is not None, done.stdout
        return int(found.group(1))

    requests = figure("REQUESTS")
    return {
        "requests": requests,
        "refused": figure("REFUSED"),
        "token_rps": requests / seconds,
        "healthz_p50": statistics.median(health),
        "healthz_p99": percentile(health, 99),
        "healthz_max": max(health),
        "server_errors": figure("SERVER_ERRORS") + figure("SOCKET_ERRORS"),
    }


def phase_a(seconds: int, workers: int, *, lifted: bool) -> None:
    extra = {"HEADWATER_TOKEN_FAILURES_PER_MINUTE": "1000000000"} if lifted else {}
    with bench_database("headwater_bench_hostile_a") as database_url:
        env = server_env(database_url, HEADWATER_LOG_LEVEL="WARNING", **extra)
        with production_server(env, workers) as url:
            port = int(url.rsplit(":", 1)[1])
            token(url, OPERATOR, SECRET)  # warm: one real check per process at least
            time.sleep(2)
            before = rss_mb(port)
            result = flood(url, seconds)
            time.sleep(5)
            after = rss_mb(port)
    label = "failure limit lifted" if lifted else "default failure limit"
    print(f"(a) token flood, {label}: {seconds} s, 200 connections")
    print(
        f"    token requests {result['requests']} ({result['token_rps']:.0f}/s), "
        f"of which 429 {result['refused']}"
    )
    print(
        f"    /healthz p50 {result['healthz_p50']:.1f} ms  p99 {result['healthz_p99']:.1f} ms  "
        f"max {result['healthz_max']:.1f} ms   5xx or socket errors: {result['server_errors']}"
    )
    print(
        f"    server RSS before {before:.0f} MB, 5 s after {after:.0f} MB "
        f"({(after / before - 1) * 100:+.0f}%)"
    )


def blank_lines(total: int) -> Iterator[bytes]:
    chunk = b"\n" * (4 * 1024 * 1024)
    sent = 0
    while sent < total:
        piece = chunk[: total - sent]
        sent += len(piece)
        yield piece


def gzip_bomb() -> bytes:
    """1 GiB of newlines as gzip (wbits 31), compressed a piece at a time."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [deflate.compress(piece) for piece in blank_lines(GIB)]
    parts.append(deflate.flush())
    return b"".join(parts)


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Company(BenchCompany):
    """A company that uploads files through presigned URLs."""

    async def upload(
        self, http: httpx.AsyncClient, body: bytes | AsyncIterator[bytes], name: str, kind: str
    ) -> str:
        ticket = await http.get(
            "/platform/v1/data/file_upload_url",
            params={
                "client_id": self.client_id,
                "dataset_id": "orders",
                "file_name": name,
                "content_type": kind,
            },
            headers=self.headers,
        )
        ticket.raise_for_status()
        answer = await http.put(
            ticket.json()["upload_url"], content=body, headers=ticket.json()["headers"]
        )
        assert answer.status_code == 200, answer.text
        return str(ticket.json()["transaction_id"])

    async def wait(self, http: httpx.AsyncClient, transaction_id: str, limit: float) -> Any:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            answer = await http.get(
                f"/platform/v1/transactions/{transaction_id}", headers=self.headers
            )
            body = answer.json()
            if body["status"] not in ("awaiting_upload", "processing"):
                return body
            await asyncio.sleep(0.2)
        return None


async def hostile_files(url: str, seconds: int) -> None:
    admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}
    hostile, small = Company(url, admin, "hostile"), Company(url, admin, "small")
    bomb = gzip_bomb()
    print(f"(b) gzip bomb: {len(bomb) / 1024:.0f} KiB expanding to 1 GiB; 1 GiB blank lines")

    async def stream() -> AsyncIterator[bytes]:
        for piece in blank_lines(GIB):
            yield piece

    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        started = time.monotonic()
        bomb_id = await hostile.upload(http, bomb, "bomb.ndjson.gz", "application/x-ndjson")
        blank_task = asyncio.create_task(hostile.upload(http, stream(), "blank.csv", "text/csv"))
        timings: list[float] = []
        late = 0
        while time.monotonic() - started < seconds or not blank_task.done():
            sent = time.monotonic()
            csv = "order_id,amount\n" + "".join(f"S-{i},{i}.5\n" for i in range(50))
            transaction_id = await small.upload(http, csv.encode(), "s.csv", "text/csv")
            done = await small.wait(http, transaction_id, 60)
            if done is None or done["status"] != "completed":
                late += 1
            timings.append(time.monotonic() - sent)
            await asyncio.sleep(max(0.0, 2 - (time.monotonic() - sent)))
        blank_id = await blank_task
        outcomes = {}
        for name, transaction_id in (("gzip bomb", bomb_id), ("blank lines", blank_id)):
            outcomes[name] = await hostile.wait(http, transaction_id, 600)
    print(
        f"    small files: {len(timings)} uploaded, each done in median "
        f"{statistics.median(timings):.2f} s, max {max(timings):.2f} s; over 30 s or not "
        f"completed: {sum(t > 30 for t in timings) + late}"
    )
    for name, outcome in outcomes.items():
        if outcome is None:
            print(f"    {name}: still processing after 600 s")
            continue
        why = outcome["errors"][0]["message"] if outcome["errors"] else ""
        took = _seconds(outcome["completed_at"]) - _seconds(outcome["created_at"])
        print(f"    {name}: {outcome['status']} ({why}); final {took:.1f} s after its upload URL")


def phase_b(seconds: int, workers: int) -> None:
    with bench_database("headwater_bench_hostile_b") as database_url:
        env = server_env(database_url, HEADWATER_LOG_LEVEL="WARNING")
        with production_server(env, workers) as url:
            asyncio.run(hostile_files(url, seconds))


def phases_cd(args: argparse.Namespace, only: str | None) -> None:
    sftp_port, smtp_port = free_port(), free_port()
    with bench_database("headwater_bench_hostile_cd") as database_url:
        env = server_env(
            database_url,
            HEADWATER_LOG_LEVEL="WARNING",
            HEADWATER_SFTP_PORT=str(sftp_port),
            HEADWATER_SMTP_PORT=str(smtp_port),
        )
        with production_server(env, args.workers) as url:
            if only in (None, "c"):
                channels.phase_c(url, sftp_port, args.seconds)
            if only in (None, "d"):
                channels.phase_d(
                    url,
                    sftp_port,
                    smtp_port,
                    senders=args.senders,
                    each=args.messages,
                    megabytes=args.message_mb,
                    rounds=args.rounds,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", choices=["a", "b", "c", "d"], default=None)
    parser.add_argument("--senders", type=int, default=100, help="(d) SMTP connections")
    parser.add_argument("--messages", type=int, default=1, help="(d) messages a connection")
    parser.add_argument("--message-mb", type=float, default=24.0, help="(d) message MiB")
    parser.add_argument("--rounds", type=int, default=2, help="(d) A B rounds")
    args = parser.parse_args()
    if args.only in (None, "a"):
        phase_a(args.seconds, args.workers, lifted=False)
        phase_a(args.seconds, args.workers, lifted=True)
    if args.only in (None, "b"):
        phase_b(args.seconds, args.workers)
    if args.only in (None, "c", "d"):
        phases_cd(args, args.only)


if __name__ == "__main__":
    main()
