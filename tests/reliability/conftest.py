"""Reliability tests: real server processes on a PostgreSQL database of their own."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.factories import AUDIENCE, OPERATOR_ID, OPERATOR_SECRET, fresh_pg_database
from tests.http_server import free_port, operated_env


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped after it."""
    with fresh_pg_database("hw_rel") as (_name, url):
        yield url


def server_env(data_dir: Path, database_url: str, **extra: str) -> dict[str, str]:
    return operated_env(data_dir, database_url, HEADWATER_DB_CONNECT_TIMEOUT_SECONDS="1", **extra)


def operator_headers(url: str) -> dict[str, str]:
    body = {"client_id": OPERATOR_ID, "client_secret": OPERATOR_SECRET, "audience": AUDIENCE}
    response = httpx.post(url + "/oauth/token", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['access_token']}"}


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own, on a free port, that it may stop and start
    (the machine's shared server must keep serving the other tests)."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.data = root / "data"
        self.port = port
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def _pg(self, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(_bin("pg_ctl")), "-D", str(self.data), *args],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._pg("-o", options, "-l", str(self.root / "postgres.log"), "-w", "start")

    def stop(self) -> None:
        """Immediate shutdown: backends are gone at once, as in a crash."""
        self._pg("-m", "immediate", "-w", "stop")


def _bin(name: str) -> Path:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not versions or os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root, runuser and the PostgreSQL server binaries")
    return versions[-1] / name


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    initdb = _bin("initdb")
    root = Path(tempfile.mkdtemp(prefix="hw-pg-"))
    shutil.chown(root, "postgres", "postgres")
    cluster = PrivatePostgres(root, free_port())
    subprocess.run(
        ["runuser", "-u", "postgres", "--", str(initdb), "-D", str(cluster.data), "-A", "trust"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    cluster.start()
    try:
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
