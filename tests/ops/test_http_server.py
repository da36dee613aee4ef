"""Behaviour about HTTP itself, through a real server process over real sockets."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.factories import run_cli
from tests.http_server import ServerProcess, running_server

pytestmark = pytest.mark.http

SECRET = "http-test-operator-secret"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("http")


@pytest.fixture(scope="module")
def server(data_dir: Path) -> Iterator[str]:
    data = data_dir
    env = {
        "HEADWATER_DATA_DIR": str(data),
        "HEADWATER_BOOTSTRAP_CLIENT_ID": "op",
        "HEADWATER_BOOTSTRAP_CLIENT_SECRET": SECRET,
    }
    with running_server(env) as base:
        yield base


def _raw(base: str, request: bytes, body_chunks: Iterator[bytes]) -> tuple[bytes, int]:
    """Send a request by hand; return the response and how many body bytes were sent."""
    host, port = base.removeprefix("http://").split(":")
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection after refusing the body
        sock.settimeout(10)
        response = b""
        while b"\r\n\r\n" not in response:
            data = sock.recv(65536)
            if not data:
                break
            response += data
        return response, sent


def test_one_gib_declared_body_is_refused_without_reading_it(server: str) -> None:
    gib = 1024**3
    request = (
        b"POST /admin/v1/companies HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\n" + f"Content-Length: {gib}\r\n\r\n".encode()
    )

    def body() -> Iterator[bytes]:
        chunk = b"x" * 65536
        for _ in range(gib // len(chunk)):
            yield chunk

    response, sent = _raw(server, request, body())
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert b"application/problem+json" in response
    assert sent < gib  # the server answered and closed before the client could send it all


def test_chunked_body_over_the_limit_is_refused_while_reading(server: str) -> None:
    request = (
        b"POST /admin/v1/companies HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )

    def body() -> Iterator[bytes]:
        chunk = b"x" * 65536
        for _ in range(200):  # 12.5 MiB, over the 5 MiB default
            yield f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        yield b"0\r\n\r\n"

    response, _ = _raw(server, request, body())
    assert response.startswith(b"HTTP/1.1 413"), response[:200]


def test_token_and_call_over_real_http(server: str) -> None:
    token = httpx.post(
        server + "/oauth/token",
        data={
            "grant_type": "client_credentials",
            "client_id": "op",
            "client_secret": SECRET,
            "audience": "headwater-api",
        },
    ).json()["access_token"]
    response = httpx.get(
        server + "/admin/v1/companies",
        headers={"Authorization": f"Bearer {token}", "X-Request-ID": "r-1"},
    )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "r-1"
    assert "ratelimit-remaining" in response.headers


def test_logs_are_json_with_request_id_and_no_secrets(server: str, data_dir: Path) -> None:
    token = httpx.post(
        server + "/oauth/token",
        json={"client_id": "op", "client_secret": SECRET, "audience": "headwater-api"},
    ).json()
    httpx.get(
        server + "/platform/v1/whoami",
        headers={"Authorization": f"Bearer {token['access_token']}", "X-Request-ID": "log-check-1"},
    )
    time.sleep(0.2)  # let the server flush its log line
    text = (data_dir / "server.log").read_text()
    assert SECRET not in text
    assert token["access_token"] not in text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    mine = [e for e in lines if e.get("request_id") == "log-check-1"]
    assert mine and mine[0]["route"] == "/platform/v1/whoami" and mine[0]["status"] == 200
    assert mine[0]["subject"] == "op"
    assert mine[0]["event"] == "request" and mine[0]["logger"] == "headwater.access"
    assert mine[0]["level"] == "info" and mine[0]["method"] == "GET"
    assert mine[0]["timestamp"].endswith("Z") and mine[0]["duration_ms"] > 0


def test_cli_operator_commands(tmp_path: Path) -> None:
    def run(*args: str) -> str:
        done = run_cli(*args, data_dir=tmp_path)
        assert done.returncode == 0, done.stderr + done.stdout
        return done.stdout

    company = json.loads(run("companies", "create", "Acme"))
    # times as the API writes them: UTC, milliseconds, Z
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", company["created_at"])
    client = json.loads(run("clients", "create", company["id"], "acme-crm", "CRM"))
    assert client["company_id"] == company["id"]
    cred = json.loads(
        run(
            "credentials",
            "create",
            "sync",
            "--company-id",
            company["id"],
            "--scope",
            "data:write",
            "--client-id",
            "acme-crm",
        )
    )
    assert cred["client_secret"] and cred["client_ids"] == ["acme-crm"]
    run("keys", "rotate")
    run("keys", "rotate")
    keys = json.loads(run("keys", "list"))
    assert len(keys) == 2
    refused = run_cli("keys", "remove", "--", keys[0]["kid"], data_dir=tmp_path)
    assert refused.returncode == 1
    assert "current signing key" in refused.stderr and "Traceback" not in refused.stderr
    run("keys", "remove", "--", keys[1]["kid"])
    assert [k["kid"] for k in json.loads(run("keys", "list"))] == [keys[0]["kid"]]
    assert "revoked" in run("credentials", "revoke", cred["client_id"])


def test_workers_share_metrics_in_a_directory_that_goes_when_the_server_stops(
    tmp_path: Path,
) -> None:
    metrics = tmp_path / "prometheus"
    dead = metrics / "999999999"  # an instance killed before it could remove its own
    dead.mkdir(parents=True)
    (dead / "counter_1.db").write_bytes(b"")
    env = {"HEADWATER_DATA_DIR": str(tmp_path)}
    server = ServerProcess(env, "--workers", "2", log=tmp_path / "server.log")
    try:
        base = server.start().url
        assert server.process is not None
        assert not dead.exists()
        assert [p.name for p in metrics.iterdir()] == [str(server.process.pid)]
        for _ in range(20):  # both workers answer; the counts add up across them
            assert httpx.get(f"{base}/healthz").status_code == 200
        text = httpx.get(f"{base}/metrics").text
        line = next(
            x
            for x in text.splitlines()
            if x.startswith("headwater_http_requests_total") and 'route="/healthz"' in x
        )
        assert float(line.rsplit(" ", 1)[1]) >= 20
    finally:
        server.stop()
    assert list(metrics.iterdir()) == []


def test_serve_with_workers_starts_on_a_machine_whose_cores_are_all_busy(tmp_path: Path) -> None:
    """Issue 24: each worker imports the app before it reports ready; with every core
    taken by CPU-bound processes that took longer than uvicorn's default health-check
    timeout, and workers were killed and restarted without end."""
    import os
    import subprocess
    import sys

    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    log = tmp_path / "server.log"
    server = ServerProcess({"HEADWATER_DATA_DIR": str(tmp_path)}, "--workers", "2", log=log)
    try:
        base = server.start().url
        deadline = time.monotonic() + 60
        while log.read_text().count("Application startup complete") < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        for _ in range(20):
            assert httpx.get(f"{base}/healthz").status_code == 200
    finally:
        for process in busy:
            process.kill()
            process.wait()
        server.stop()
    text = log.read_text()
    assert "died" not in text and "not ready" not in text and "failed to start" not in text
    assert text.count("Started server process") == 2  # no worker was replaced
