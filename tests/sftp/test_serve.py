"""`headwater serve` runs the SFTP server beside the API: an upload through it is
processed by serve's own worker, and /metrics counts the SFTP session, bytes and file."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import httpx
import pytest

from tests.factories import fresh_pg_database
from tests.files.conftest import CSV_HEADER, csv_rows
from tests.http_server import free_port, process_env, running_server
from tests.ingestion.conftest import SCHEMA
from tests.reliability.conftest import operator_headers, server_env
from tests.sftp.conftest import paramiko_session

pytestmark = pytest.mark.http


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_pg_database("hw_sftp") as (_name, url):
        yield url


def test_serve_runs_sftp_and_its_metrics(pg_url: str, tmp_path: Path) -> None:
    sftp_port = free_port()
    env = server_env(tmp_path, pg_url, HEADWATER_SFTP_PORT=str(sftp_port))
    with running_server(env) as url:
        admin = operator_headers(url)

        def post(path: str, body: object) -> dict[str, object]:
            answer = httpx.post(url + path, json=body, headers=admin, timeout=30)
            assert answer.status_code == 201, answer.text
            return answer.json()  # type: ignore[no-any-return]

        company = post("/admin/v1/companies", {"name": "Serve"})["id"]
        post(f"/admin/v1/companies/{company}/clients", {"client_id": "srv-crm", "name": "CRM"})
        post("/admin/v1/clients/srv-crm/datasets", {"dataset_id": "orders", "schema": SCHEMA})
        key = asyncssh.generate_private_key("ssh-ed25519")
        key_file = tmp_path / "key"
        key_file.write_bytes(key.export_private_key("openssh"))
        key_file.chmod(0o600)
        post(
            f"/admin/v1/companies/{company}/sftp_accounts",
            {"username": "srv", "public_keys": [key.export_public_key().decode()]},
        )
        deadline = time.monotonic() + 30
        while True:  # the SFTP process starts beside the API
            try:
                ssh, sftp = paramiko_session(sftp_port, "srv", key_file=key_file)
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.2)
        body = (CSV_HEADER + csv_rows(12)).encode()
        with sftp.open("/srv-crm/orders/day.csv", "wb") as remote:
            remote.write(body)
        ssh.close()
        deadline = time.monotonic() + 60
        credential = post(
            f"/admin/v1/companies/{company}/credentials",
            {"name": "reader", "scopes": ["data:read"]},
        )
        token = httpx.post(
            url + "/oauth/token",
            json={
                "client_id": credential["client_id"],
                "client_secret": credential["client_secret"],
                "audience": "headwater-api",
            },
        ).json()["access_token"]
        while True:
            listed = httpx.get(
                url + "/platform/v1/transactions",
                params={"channel": "sftp"},
                headers={"Authorization": f"Bearer {token}"},
            ).json()["data"]
            if listed and listed[0]["status"] != "processing":
                break
            assert time.monotonic() < deadline, listed
            time.sleep(0.3)
        assert listed[0]["status"] == "completed" and listed[0]["records_accepted"] == 12
        metrics = httpx.get(url + "/metrics").text
        assert "headwater_sftp_files_total 1.0" in metrics
        assert "headwater_sftp_sessions_total 1.0" in metrics
        assert f"headwater_sftp_received_bytes_total {float(len(body))}" in metrics


@pytest.mark.parametrize("channel", ["SFTP", "SMTP"])
def test_serve_stops_at_start_when_a_channels_port_is_taken(tmp_path: Path, channel: str) -> None:
    """One line naming the port and its setting, no traceback, no API left serving."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        setting = f"HEADWATER_{channel}_PORT"
        api_port = free_port()
        env = process_env({"HEADWATER_DATA_DIR": str(tmp_path), setting: str(port)})
        done = subprocess.run(
            [sys.executable, "-m", "headwater.cli", "serve", "--port", str(api_port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if setting in line]
    assert f"127.0.0.1:{port}" in line and channel in line
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{api_port}/readyz", timeout=2)
