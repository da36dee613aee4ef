"""PostgreSQL stopped under load: 503 with Retry-After within a second, /readyz says so,
and the service recovers by itself when the database returns, without a restart."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.http_server import ServerProcess, status_of
from tests.ingestion.conftest import DataTenant, order
from tests.reliability.conftest import PrivatePostgres, operator_headers, server_env

# every test here starts server processes (run in scripts/test's second step)
pytestmark = pytest.mark.http


@dataclass(frozen=True)
class Answer:
    started: float
    ended: float
    status: int  # 0: no answer at all
    retry_after: str | None


def test_database_stopped_under_load(tmp_path: Path, private_postgres: PrivatePostgres) -> None:
    server = ServerProcess(
        server_env(tmp_path, private_postgres.url, HEADWATER_RATE_LIMIT_PER_SECOND="100000"),
        log=tmp_path / "server.log",
    ).start()
    answers: list[Answer] = []
    running = True
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            admin = operator_headers(server.url)
            company = http.post("/admin/v1/companies", json={"name": "Outage"}, headers=admin)
            tenant = DataTenant(http, admin, company.json()["id"])  # type: ignore[arg-type]
            assert tenant.push([order(0)]).status_code == 200

        def load() -> None:
            with httpx.Client(base_url=server.url, timeout=10) as http:
                n = 0
                while running:
                    n += 1
                    started = time.monotonic()
                    try:
                        if n % 2:
                            response = http.get("/platform/v1/transactions", headers=tenant.headers)
                        else:
                            response = http.post(
                                "/platform/v1/data/json",
                                json=tenant.envelope([order(n)]),
                                headers=tenant.headers,
                            )
                        status, retry = response.status_code, response.headers.get("retry-after")
                    except httpx.TransportError:
                        status, retry = 0, None
                    answers.append(Answer(started, time.monotonic(), status, retry))
                    time.sleep(0.01)

        threads = [threading.Thread(target=load) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(1)
        stopping = time.monotonic()
        private_postgres.stop()
        stopped = time.monotonic()
        time.sleep(3)
        ready = httpx.get(server.url + "/readyz", timeout=5)
        assert ready.status_code == 503
        assert ready.headers["retry-after"]
        restarting = time.monotonic()
        private_postgres.start()
        recovered = None
        deadline = time.monotonic() + 30
        while recovered is None and time.monotonic() < deadline:
            if status_of(server.url + "/readyz") == 200:
                recovered = time.monotonic()
            time.sleep(0.1)
        assert recovered is not None, "the service did not recover by itself"
        time.sleep(2)
    finally:
        running = False
        for thread in threads:
            thread.join(timeout=30)
        server.stop()

    before = [a for a in answers if a.ended < stopping]
    during = [a for a in answers if a.started > stopped + 0.2 and a.ended < restarting]
    after = [a for a in answers if a.started > recovered + 1]
    assert before and {a.status for a in before} == {200}, {a.status for a in before}
    assert len(during) > 20
    # every answer while the database was down: 503, Retry-After, within a second
    assert {a.status for a in during} == {503}, {a.status for a in during}
    assert all(a.retry_after for a in during)
    slowest = max(a.ended - a.started for a in during)
    assert slowest < 1.0, slowest
    assert after and {a.status for a in after} == {200}, {a.status for a in after}
    print(
        f"{len(before)} answered before, {len(during)} while down (all 503, slowest "
        f"{slowest * 1000:.0f} ms), {len(after)} after recovery (all 200); recovered "
        f"{recovered - restarting:.1f} s after the restart began"
    )
