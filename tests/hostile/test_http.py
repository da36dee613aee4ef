"""The HTTP layer of a real `headwater serve` (contract section 15): oversized header
blocks answered 431, slow header blocks closed, SIGTERM within the shutdown timeout."""

from __future__ import annotations

import contextlib
import functools
import signal
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.factories import fresh_pg_database
from tests.files.conftest import FileTenant
from tests.http_server import ServerProcess, operated_env
from tests.reliability.conftest import operator_headers

pytestmark = pytest.mark.http


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> object:
    data = tmp_path_factory.mktemp("http-guard")
    process = ServerProcess(
        {
            "HEADWATER_DATA_DIR": str(data),
            "HEADWATER_HTTP_HEADER_TIMEOUT_SECONDS": "2",
            "HEADWATER_LOG_LEVEL": "WARNING",
        },
        log=data / "server.log",
    ).start()
    yield process
    process.stop()


def _connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_header_block_over_64_kib_is_431_and_the_server_stays_fast(
    server: ServerProcess,
) -> None:
    sock = _connect(server)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
    sent = 0
    try:
        while sent < 8 * 1024 * 1024:  # the server stops it long before 64 MiB
            sock.sendall(b"a" * 65536)
            sent += 65536
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = _read_all(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"application/problem+json" in answer
    assert sent < 8 * 1024 * 1024 or answer  # refused while sending, or answered at once
    assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200


def test_a_header_block_just_under_the_limit_is_served(server: ServerProcess) -> None:
    response = httpx.get(server.url + "/healthz", headers={"X-Big": "a" * 60_000}, timeout=5)
    assert response.status_code == 200


def test_slow_header_blocks_are_closed_after_the_timeout(server: ServerProcess) -> None:
    socks = [_connect(server) for _ in range(50)]
    for sock in socks:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
    start = time.monotonic()
    closed = 0
    while time.monotonic() - start < 8 and closed < len(socks):
        for sock in socks:
            sock.sendall(b"X-a: b\r\n") if sock.fileno() != -1 else None
        time.sleep(0.5)
        closed = 0
        for sock in socks:
            sock.settimeout(0.01)
            try:
                if sock.recv(1) == b"":
                    closed += 1
            except (TimeoutError, BlockingIOError):
                pass
            except ConnectionResetError:
                closed += 1
    for sock in socks:
        sock.close()
    assert closed == len(socks)
    assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200


def test_keep_alive_requests_are_not_cut_by_the_header_timeout(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(1.0)
        assert client.get("/healthz").status_code == 200


def test_sigterm_stops_the_server_within_the_shutdown_timeout(tmp_path: Path) -> None:
    process = ServerProcess(
        {
            "HEADWATER_DATA_DIR": str(tmp_path),
            "HEADWATER_SHUTDOWN_TIMEOUT_SECONDS": "10",
            "HEADWATER_LOG_LEVEL": "WARNING",
        },
        log=tmp_path / "server.log",
    ).start()
    assert process.process is not None
    process.process.send_signal(signal.SIGTERM)
    try:
        code = process.process.wait(timeout=30)
    except Exception as exc:
        process.kill()
        raise AssertionError("serve did not stop on SIGTERM:\n" + process.log.read_text()) from exc
    # uvicorn shuts down gracefully, then re-raises the signal it caught
    assert code in (0, -signal.SIGTERM), process.log.read_text()
    assert "Traceback" not in process.log.read_text()


@pytest.mark.long
def test_long_polls_last_their_whole_wait_past_the_header_timeout(tmp_path: Path) -> None:
    """The header timeout guards header blocks only: a response sent 30 s after its
    request (each `wait` at its maximum) reaches the client, on servers whose header
    timeout is 2 s, one on SQLite and one on PostgreSQL, polled at once (30 s each)."""
    with contextlib.ExitStack() as stack:
        processes = []
        for database in ("sqlite", "postgresql"):
            env = operated_env(tmp_path / database, HEADWATER_HTTP_HEADER_TIMEOUT_SECONDS="2")
            if database == "postgresql":
                _, env["HEADWATER_DATABASE_URL"] = stack.enter_context(fresh_pg_database("hw_poll"))
            process = ServerProcess(env, log=tmp_path / f"{database}.log").start()
            stack.callback(process.stop)
            processes.append(process)
        polls = [poll for process in processes for poll in _long_polls(process)]
        with ThreadPoolExecutor(len(polls)) as pool:
            answers = list(pool.map(lambda poll: poll(), polls))
    for name, status, took, body in answers:
        assert status == 200, (name, body)
        assert took >= 29.5, (name, took)
        if name == "changes":
            assert body["data"] == []
        else:
            assert body["status"] == "awaiting_upload"


def _long_polls(process: ServerProcess) -> list[Callable[[], tuple[str, int, float, Any]]]:
    """Both `wait` endpoints of a new company on `process`, each a call that polls it at
    its maximum: (name, status, seconds taken, body)."""
    with httpx.Client(base_url=process.url, timeout=60) as http:
        admin = operator_headers(process.url)
        company = http.post("/admin/v1/companies", json={"name": "Polls"}, headers=admin)
        tenant = FileTenant(http, admin, company.json()["id"])  # type: ignore[arg-type]
        ticket = tenant.upload_url()  # awaiting_upload for the whole wait
    polls = {
        "changes": (
            "/platform/v1/data/changes",
            {"client_id": tenant.client_id, "dataset_id": "orders", "wait": 30},
        ),
        "transaction": (f"/platform/v1/transactions/{ticket['transaction_id']}", {"wait": 30}),
    }

    def poll(name: str) -> tuple[str, int, float, Any]:
        path, params = polls[name]
        with httpx.Client(base_url=process.url, timeout=60) as http:
            start = time.monotonic()
            answer = http.get(path, params=params, headers=tenant.headers)
            took = time.monotonic() - start
            # the same keep-alive connection serves the next request
            assert http.get("/healthz").status_code == 200
        return name, answer.status_code, took, answer.json()

    return [functools.partial(poll, name) for name in polls]
