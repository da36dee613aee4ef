"""Two API instances and two file workers on one PostgreSQL (and Redis for rate limits),
as `docs/operations.md` describes: one public URL (the load balancer's), one data
directory (the embedded store) or bucket, one database, one Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
import redis

from tests.factories import OPERATOR_ID
from tests.files.conftest import FileTenant, csv_rows
from tests.http_server import ServerProcess
from tests.ingestion.conftest import order
from tests.reliability.conftest import operator_headers, server_env

# every test here starts server processes (run in scripts/test's second step)
pytestmark = pytest.mark.http

REDIS_URL = "redis://127.0.0.1:6379/0"


@contextmanager
def fleet(
    tmp_path: Path, pg_url: str, *, apis: int, workers: int, **settings: str
) -> Iterator[list[ServerProcess]]:
    """`apis` API processes (file workers off) and `workers` `headwater worker` processes,
    sharing one database, data directory, Redis and public URL."""
    try:
        redis.Redis.from_url(REDIS_URL).ping()
    except redis.RedisError:
        pytest.fail("Redis must run on 127.0.0.1:6379 (scripts/test starts it)")
    env = server_env(
        tmp_path / "data",
        pg_url,
        HEADWATER_REDIS_URL=REDIS_URL,
        HEADWATER_FILE_WORKERS="0",
        HEADWATER_FILE_POLL_SECONDS="0.2",
        **settings,
    )
    first = ServerProcess(env, log=tmp_path / "api-0.log")
    # every instance signs and checks tokens for one issuer: the address clients use
    env["HEADWATER_PUBLIC_URL"] = first.url
    first.env["HEADWATER_PUBLIC_URL"] = first.url
    processes = [first] + [
        ServerProcess(env, log=tmp_path / f"api-{n}.log") for n in range(1, apis)
    ]
    processes += [
        ServerProcess(env, log=tmp_path / f"worker-{n}.log", command="worker")
        for n in range(workers)
    ]
    with ExitStack() as stack:
        for process in processes:
            stack.callback(process.stop)
            process.start()
        yield processes


def test_rate_limits_are_shared_between_instances(tmp_path: Path, pg_url: str) -> None:
    with fleet(
        tmp_path,
        pg_url,
        apis=2,
        workers=0,
        HEADWATER_RATE_LIMIT_PER_SECOND="0.5",
        HEADWATER_RATE_LIMIT_BURST="10",
    ) as (one, two):
        admin = operator_headers(one.url)
        company = httpx.post(one.url + "/admin/v1/companies", json={"name": "R"}, headers=admin)
        credential = httpx.post(
            f"{one.url}/admin/v1/companies/{company.json()['id']}/credentials",
            json={"name": "r", "scopes": ["data:read"]},
            headers=admin,
        ).json()
        token = httpx.post(
            two.url + "/oauth/token",
            json={
                "client_id": credential["client_id"],
                "client_secret": credential["client_secret"],
                "audience": "headwater-api",
            },
        ).json()["access_token"]
        statuses: Counter[int] = Counter()
        for n in range(30):
            url = (one if n % 2 else two).url + "/platform/v1/whoami"
            response = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
            statuses[response.status_code] += 1
            if response.status_code == 429:
                assert int(response.headers["retry-after"]) >= 1
    # one bucket of 10 for the credential across both instances (plus what refills while
    # the 30 requests run); two separate buckets would let 20 through
    assert 10 <= statuses[200] <= 13, statuses
    assert statuses[429] == 30 - statuses[200]


def test_two_apis_and_two_workers_under_mixed_load(tmp_path: Path, pg_url: str) -> None:
    files, rows, pushers, batches = 8, 3000, 4, 10
    with fleet(
        tmp_path,
        pg_url,
        apis=2,
        workers=2,
        HEADWATER_RATE_LIMIT_PER_SECOND="100000",
        HEADWATER_RATE_LIMIT_BURST="100000",
    ) as processes:
        apis = processes[:2]
        admin = operator_headers(apis[0].url)
        clients = [httpx.Client(base_url=api.url, timeout=30) for api in apis]
        company = clients[0].post("/admin/v1/companies", json={"name": "F"}, headers=admin)
        tenants = [
            FileTenant(clients[0], admin, company.json()["id"])  # type: ignore[arg-type]
        ]
        tenants.append(tenants[0].via(clients[1]))  # type: ignore[arg-type]
        errors: list[BaseException] = []
        acknowledged: dict[str, str] = {}

        def push(n: int) -> None:
            try:
                tenant = tenants[n % 2]
                for b in range(batches):
                    key = f"m{n}-{b}"
                    data = [order(i, channel=f"{key}-{i}") for i in range(20)]
                    answer = tenant.push(data, key=key)
                    assert answer.status_code == 200, answer.text
                    # the same key again, at the other instance: answered, not stored
                    again = tenants[(n + 1) % 2].push(data, key=key)
                    assert again.status_code == 200, again.text
                    assert again.headers["idempotent-replayed"] == "true"
                    assert again.json() == answer.json()
                    acknowledged[key] = answer.json()["transaction_id"]
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=push, args=(n,)) for n in range(pushers)]
        for thread in threads:
            thread.start()
        uploads = []
        for n in range(files):
            tenant = tenants[n % 2]
            ticket = tenant.upload_url()
            put = httpx.put(
                ticket["upload_url"],
                content=(
                    "order_id,customer-email,amount,quantity,paid,placed_at\n"
                    + csv_rows(rows, start=n * rows)
                ).encode(),
                headers=ticket["headers"],
            )
            assert put.status_code == 200, put.text
            uploads.append(ticket["transaction_id"])
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors
        deadline = time.monotonic() + 120
        pending = set(uploads)
        while pending and time.monotonic() < deadline:
            for transaction in list(pending):
                status = tenants[0].transaction(transaction)["status"]
                assert status not in ("failed", "rejected"), status
                if status == "completed":
                    pending.discard(transaction)
            time.sleep(0.2)
        assert not pending, f"not processed: {pending}"
        for client in clients:
            client.close()

    with psycopg.connect(pg_url) as conn:
        jobs = conn.execute("SELECT attempts, claimed_by, state FROM file_jobs").fetchall()
        per_transaction = dict(
            conn.execute(
                "SELECT transaction_id::text, count(*) FROM records GROUP BY transaction_id"
            ).fetchall()
        )
        channels = Counter(
            row[0]
            for row in conn.execute("SELECT data::json->>'channel' FROM records")
            if row[0] != "web"  # the schema default, which the CSV rows take
        )
    # no job processed twice, every file stored whole
    assert len(jobs) == files
    assert {(attempts, state) for attempts, _, state in jobs} == {(1, "done")}, jobs
    assert all(per_transaction[t] == rows for t in uploads)
    # every pushed record once, though each batch was sent to both instances
    assert len(acknowledged) == pushers * batches
    assert all(per_transaction[t] == 20 for t in acknowledged.values())
    assert set(channels.values()) == {1} and len(channels) == pushers * batches * 20
    by_worker = Counter(claimed_by for _, claimed_by, _ in jobs)
    print(
        f"{files} files x {rows} rows, jobs per worker {dict(by_worker)}; "
        f"{len(channels)} pushed records stored once"
    )


def test_instances_started_together_migrate_one_at_a_time(tmp_path: Path, pg_url: str) -> None:
    env = server_env(tmp_path, pg_url)
    full = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")} | env
    upgrades = [
        subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", "db", "upgrade"],
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for _ in range(4)
    ]
    outputs = [process.communicate(timeout=120)[0].decode() for process in upgrades]
    assert [process.returncode for process in upgrades] == [0] * 4, outputs
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)


@pytest.mark.long
def test_instances_started_together_on_a_fresh_database_all_serve(
    tmp_path: Path, pg_url: str
) -> None:
    """Start-up work (the bootstrap credential, the first signing key) is done once, not
    raced: every process of every instance stays up and one key signs for all. Two
    instances of two processes each and a worker: five processes racing, at most 25
    PostgreSQL connections (5 each, the least a process may have), within the suite's 40
    beside another test (at 6 each, 41 were seen beside `serve --workers 2` with SFTP)."""
    env = server_env(tmp_path, pg_url, HEADWATER_DB_CONNECTIONS="5")
    servers = [
        ServerProcess(env, "--workers", "2", log=tmp_path / f"api-{n}.log") for n in range(2)
    ]
    workers = [ServerProcess(env, log=tmp_path / "worker-0.log", command="worker")]
    for server in servers:
        server.env["HEADWATER_PUBLIC_URL"] = servers[0].url
    for worker in workers:
        worker.env["HEADWATER_PUBLIC_URL"] = servers[0].url
    failures: list[BaseException] = []

    def start(process: ServerProcess) -> None:
        try:
            process.start()
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    starters = [threading.Thread(target=start, args=(p,)) for p in [*workers, *servers]]
    try:
        for starter in starters:
            starter.start()
        for starter in starters:
            starter.join(timeout=90)
        assert not failures, failures
        time.sleep(3)  # a process that failed its start-up would be gone by now
        for process in [*servers, *workers]:
            assert process.process is not None and process.process.poll() is None, (
                process.log.read_text()
            )
        admin = operator_headers(servers[0].url)
        for server in servers:
            for _ in range(4):  # each of its worker processes, in all likelihood
                assert httpx.get(server.url + "/readyz").status_code == 200
                listed = httpx.get(server.url + "/admin/v1/companies", headers=admin)
                assert listed.status_code == 200, listed.text
    finally:
        for process in [*servers, *workers]:
            process.stop()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM signing_keys").fetchone() == (1,)
        assert conn.execute(
            "SELECT count(*) FROM credentials WHERE client_id = %s", (OPERATOR_ID,)
        ).fetchone() == (1,)


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_instances_on_one_database_accept_each_others_tokens_unconfigured(
    tmp_path: Path, pg_url: str, database: str
) -> None:
    """No HEADWATER_PUBLIC_URL anywhere: each instance's address differs, yet the first
    to start records the token issuer and the second signs and accepts the same one."""
    env = server_env(tmp_path / "data", pg_url)
    if database == "sqlite":
        del env["HEADWATER_DATABASE_URL"]
    first = ServerProcess(env, log=tmp_path / "a.log").start()
    try:
        second = ServerProcess(env, log=tmp_path / "b.log").start()
        try:
            issuers = [
                httpx.get(f"{s.url}/.well-known/openid-configuration", timeout=10).json()["issuer"]
                for s in (first, second)
            ]
            assert issuers == [first.url, first.url]
            for signer, checker in ((first, second), (second, first)):
                headers = operator_headers(signer.url)
                answer = httpx.get(f"{checker.url}/admin/v1/companies", headers=headers, timeout=10)
                assert answer.status_code == 200, answer.text
        finally:
            second.stop()
    finally:
        first.stop()
