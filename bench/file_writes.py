"""Other writes while a large file is processed (issue 33, contract section 10).

Starts `headwater serve` as a user runs it (API and file worker in one process), on
SQLite (the embedded default) and on PostgreSQL. Company A uploads a CSV of `--mb`
megabytes (bench.file_ingest's rows); while the worker processes it, company B pushes
one record at a time and an operator creates and revokes a credential every second.
Printed, for the pushes and the revocations: how many, how many answered 503 (or any
non-2xx), p50, p99 and the longest wait. The anchor is the same writes for the same
time with no file being processed (A B A B: quiet, file, quiet, file). On PostgreSQL it
also samples pg_stat_activity every 0.1 s and prints the longest database transaction
seen during the file (the contract allows 10 s).

    .venv/bin/python -m bench.file_writes [--mb 200] [--database sqlite postgresql]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
from tests.http_server import running_server

from bench.common import (
    OPERATOR,
    SECRET,
    BenchCompany,
    Sampling,
    bench_database,
    kept_client,
    server_env,
    token,
)
from bench.file_ingest import csv_chunks

ROW_BYTES = 190  # bench.file_ingest's rows, about


class Writes:
    """Company B's pushes (back to back) and an operator's credential create-and-revoke
    (every second), timed, until stopped."""

    def __init__(self, url: str, admin: dict[str, str], other: BenchCompany) -> None:
        self.url, self.admin, self.other = url, admin, other
        self.pushes: list[float] = []
        self.revokes: list[float] = []
        self.failures: dict[int, int] = {}
        self.stop = threading.Event()

    def _timed(self, call: Callable[[], httpx.Response], into: list[float]) -> None:
        began = time.perf_counter()
        try:
            status = call().status_code
        except httpx.TimeoutException:
            status = 0
        into.append(time.perf_counter() - began)
        if not 200 <= status < 300:
            self.failures[status] = self.failures.get(status, 0) + 1

    def push_loop(self) -> None:
        with httpx.Client(base_url=self.url, headers=self.other.headers, timeout=60) as http:
            n = 0
            while not self.stop.is_set():
                n += 1
                body = {
                    "client_id": self.other.client_id,
                    "dataset_id": "orders",
                    "data": [{"order_id": f"B-{n}", "amount": n}],
                }
                post = functools.partial(http.post, "/platform/v1/data/json", json=body)
                self._timed(post, self.pushes)

    def revoke_loop(self) -> None:
        with httpx.Client(base_url=self.url, headers=self.admin, timeout=60) as http:
            while not self.stop.wait(1.0):
                made = http.post(
                    f"/admin/v1/companies/{self.other.company_id}/credentials",
                    json={"name": "rotated", "scopes": ["data:read"]},
                )
                if made.status_code != 201:
                    self.failures[made.status_code] = self.failures.get(made.status_code, 0) + 1
                    continue
                client_id = made.json()["client_id"]
                revoke = functools.partial(http.delete, f"/admin/v1/credentials/{client_id}")
                self._timed(revoke, self.revokes)

    def run(self, until: Callable[[], bool]) -> None:
        threads = [
            threading.Thread(target=self.push_loop),
            threading.Thread(target=self.revoke_loop),
        ]
        for thread in threads:
            thread.start()
        try:
            while not until():
                time.sleep(0.1)
        finally:
            self.stop.set()
            for thread in threads:
                thread.join()


def _upload(url: str, company: BenchCompany, rows: int) -> str:
    ticket = httpx.get(
        url + "/platform/v1/data/file_upload_url",
        params={
            "client_id": company.client_id,
            "dataset_id": "orders",
            "file_name": "big.csv",
            "content_type": "text/csv",
        },
        headers=company.headers,
    ).json()
    response = httpx.put(
        ticket["upload_url"], content=csv_chunks(rows), headers=ticket["headers"], timeout=600
    )
    assert response.status_code == 200, response.text
    return str(ticket["transaction_id"])


def _status(url: str, headers: dict[str, str], transaction_id: str) -> dict[str, Any]:
    answer = kept_client().get(f"{url}/platform/v1/transactions/{transaction_id}", headers=headers)
    view: dict[str, Any] = answer.json()
    return view


def _passed(moment: float) -> bool:
    return time.perf_counter() >= moment


def _ended(url: str, headers: dict[str, str], transaction_id: str) -> bool:
    return _status(url, headers, transaction_id)["status"] not in ("awaiting_upload", "processing")


class LongestTransaction(Sampling):
    """PostgreSQL: the longest open database transaction on the benchmark's database,
    sampled every 0.1 s (the sampler's own connection left out)."""

    def __init__(self, database_url: str) -> None:
        super().__init__()
        self.database_url = database_url
        self.longest = 0.0

    def sample(self) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as connection:
            while not self.stopped.wait(0.1):
                age = connection.execute(
                    "SELECT coalesce(max(extract(epoch FROM now() - xact_start)), 0) "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL "
                    "AND state <> 'idle'"
                ).fetchone()
                self.longest = max(self.longest, float(age[0]) if age else 0.0)


def _summary(label: str, writes: Writes, seconds: float) -> str:
    def figures(times: list[float]) -> str:
        if not times:
            return "none"
        ordered = sorted(times)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return (
            f"{len(times):>5} p50 {statistics.median(times) * 1000:6.1f} ms  "
            f"p99 {p99 * 1000:7.1f} ms  max {max(times) * 1000:7.1f} ms"
        )

    return (
        f"{label:<22} {seconds:5.1f} s  pushes {figures(writes.pushes)}\n"
        f"{'':<30} revocations {figures(writes.revokes)}\n"
        f"{'':<30} not 2xx: {writes.failures or 'none'}"
    )


def run(database: str, mb: int, rounds: int) -> None:
    rows = mb * 1_000_000 // ROW_BYTES
    with tempfile.TemporaryDirectory() as data:
        env: dict[str, str]
        if database == "postgresql":
            context = bench_database("headwater_bench_file_writes")
            database_url = context.__enter__()
            env = server_env(database_url)
        else:
            context, database_url = None, ""
            env = {k: v for k, v in server_env("").items() if k != "HEADWATER_DATABASE_URL"}
        env |= {"HEADWATER_DATA_DIR": data, "HEADWATER_LOG_LEVEL": "WARNING"}
        try:
            with running_server(env, "--host", "127.0.0.1") as url:
                admin = {"Authorization": f"Bearer {token(url, OPERATOR, SECRET)}"}
                big = BenchCompany(url, admin, "bench")
                other = BenchCompany(url, admin, "other")
                print(f"--- {database}: a {mb} MB CSV ({rows:,} rows) ---")
                for round_ in range(rounds):
                    transaction_id = _upload(url, big, rows)
                    file_writes = Writes(url, admin, other)
                    longest = LongestTransaction(database_url) if database_url else None
                    start = time.perf_counter()
                    if longest:
                        longest.__enter__()
                    ended = functools.partial(_ended, url, big.headers, transaction_id)
                    try:
                        file_writes.run(ended)
                    finally:
                        if longest:
                            longest.__exit__()
                    seconds = time.perf_counter() - start
                    done = _status(url, big.headers, transaction_id)
                    assert done["status"] == "completed", done
                    assert done["records_accepted"] == rows, done
                    quiet = Writes(url, admin, other)  # the anchor: no file
                    quiet_start = time.perf_counter()
                    quiet.run(functools.partial(_passed, quiet_start + min(seconds, 20)))
                    print(_summary(f"round {round_ + 1}: during file", file_writes, seconds))
                    if longest:
                        print(
                            f"{'':<30} longest database transaction: "
                            f"{longest.longest:.2f} s (contract: at most 10 s)"
                        )
                    print(f"{'':<30} file: {rows / seconds:,.0f} rows/s end to end with the writes")
                    print(
                        _summary(
                            f"round {round_ + 1}: no file", quiet, time.perf_counter() - quiet_start
                        )
                    )
        finally:
            if context is not None:
                context.__exit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--database", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"]
    )
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    for database in args.database:
        run(database, args.mb, args.rounds)


if __name__ == "__main__":
    main()
