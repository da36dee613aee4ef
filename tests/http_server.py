"""A real `headwater serve` process on a free loopback port, for behaviour about HTTP.

Every server process a test starts goes through `start_server`, which refuses to start
one for a test not marked `http`: those tests run in a pytest step of their own
(`scripts/test`), so a test that starts servers can never hide in the quick step."""

from __future__ import annotations

import atexit
import contextlib
import functools
import http.client
import os
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import preloaded
from tests.factories import OPERATOR_ID, OPERATOR_SECRET, SEALING_KEY

# the test being run (`tests/conftest.py` sets it before each test's set-up)
CURRENT: list[pytest.Item] = []


def start_server(argv: Sequence[str], **popen: Any) -> preloaded.Process:
    """`subprocess.Popen(argv)` of a long-running Headwater process, for a test marked
    `http` only; forked from one that has imported Headwater where it may be
    (`tests/preloaded.py`)."""
    if CURRENT and CURRENT[-1].get_closest_marker("http") is None:
        pytest.fail(
            f"{CURRENT[-1].nodeid} starts a server process ({' '.join(argv[2:4])}): "
            "mark it @pytest.mark.http",
            pytrace=False,
        )
    _migrated_if_new(argv, popen)
    return preloaded.launch(argv, **popen)


def _migrated_if_new(argv: Sequence[str], popen: dict[str, Any]) -> None:
    """A server process's new SQLite database, a copy of one migrated once in this pytest
    process: each server started on a new data directory migrated it from nothing (27
    revisions, 1-2 s of CPU; 41 of the server step's processes, 6% of its CPU). What a
    start does on a new database is tested on PostgreSQL (`tests/reliability/
    test_instances.py`) and by `headwater db upgrade` (`tests/scaling/test_tenant_keys.py`),
    which this leaves alone, as it does a data directory that holds a database already."""
    env = popen.get("env") or os.environ
    if not preloaded.is_server(argv):
        return
    if env.get("HEADWATER_DATABASE_URL") or not env.get("HEADWATER_DATA_DIR"):
        return
    database = Path(popen.get("cwd") or ".") / env["HEADWATER_DATA_DIR"] / "headwater.db"
    if not database.exists():
        database.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_migrated_sqlite(), database)


@functools.cache
def _migrated_sqlite() -> Path:
    """A new SQLite database migrated to the head, as one file: the migration's engine
    keeps its connections (and the write-ahead log beside the file) open, so what it
    made is taken whole through SQLite's backup API into a file of its own."""
    from headwater import migrations
    from headwater.config import Settings

    directory = Path(tempfile.mkdtemp(prefix="hw-migrated-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    migrations.upgrade(Settings(data_dir=directory / "migrated", database_url=None))
    template = directory / "headwater.db"
    with (
        contextlib.closing(sqlite3.connect(directory / "migrated" / "headwater.db")) as source,
        contextlib.closing(sqlite3.connect(template)) as copy,
    ):
        source.backup(copy)
    assert not list(directory.glob("headwater.db-*")), "a journal was left beside it"
    return template


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def status_of(url: str, *, headers: dict[str, str] | None = None, timeout: float = 5) -> int | None:
    """The status of a GET of a plain-HTTP `url`, None if nothing answers: for loops that
    poll a server. `httpx.get` would build an SSL context and load the CA bundle on every
    call (some 40 ms of CPU: polling servers as they started, it took 13% of the server
    step's CPU in py-spy, beside the very servers being waited for)."""
    parts = urllib.parse.urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection = http.client.HTTPConnection(parts.netloc, timeout=timeout)
    try:
        connection.request("GET", target, headers=headers or {})
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):  # refused, reset, timed out, cut short
        return None
    finally:
        connection.close()


def wait_healthy(base: str, process: preloaded.Process, log: Path) -> None:
    """Wait (up to 60 s) until the server at `base` answers /healthz; raise with its log
    if it exits or never answers."""
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError("server exited:\n" + log.read_text())
        if status_of(base + "/healthz", timeout=1) == 200:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("server did not start:\n" + log.read_text())
        time.sleep(0.1)


def operated_env(data_dir: Path, database_url: str | None = None, **extra: str) -> dict[str, str]:
    """The settings of a server the tests operate: its data directory, its database
    (SQLite in the data directory when None), the tests' bootstrap operator, warnings
    and worse in its log; then `extra`."""
    env = {
        "HEADWATER_DATA_DIR": str(data_dir),
        "HEADWATER_BOOTSTRAP_CLIENT_ID": OPERATOR_ID,
        "HEADWATER_BOOTSTRAP_CLIENT_SECRET": OPERATOR_SECRET,
        "HEADWATER_LOG_LEVEL": "WARNING",
    }
    if database_url:
        env["HEADWATER_DATABASE_URL"] = database_url
    return env | extra


def process_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of a server process: this one's without HEADWATER_*, then `env`.
    SFTP and SMTP are off unless `env` turns them on (servers in parallel would share
    their ports); each process holds at most 6 PostgreSQL connections unless `env` says."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    full["HEADWATER_SFTP_PORT"] = "0"
    full["HEADWATER_SMTP_PORT"] = "0"
    full["HEADWATER_DB_CONNECTIONS"] = "6"  # the suite's budget (tests/conftest.py)
    # the nodes of one installation share their sealing key (contract 19), whatever
    # data directory each has; the tests' apps seal with the same one
    full["HEADWATER_WEBHOOK_SECRET_KEY"] = SEALING_KEY
    full.update(env)
    return full


def same_database(data_dir: Path, database_url: str | None) -> dict[str, str]:
    """The settings that point another process at a test's data directory and database."""
    env = {"HEADWATER_DATA_DIR": str(data_dir)}
    if database_url:
        env["HEADWATER_DATABASE_URL"] = database_url
    return env


def claimed_together(code: str, argvs: Sequence[Sequence[str]], env: dict[str, str]) -> list[str]:
    """Run the script `code` in one process per argument list, all on `env` (`process_env`)
    and starting together: each is given a start time (1.5 s ahead) as its last argument,
    waits for it, claims what it can and prints what it took, comma-separated. Everything
    they took, once every process has exited 0."""
    start = str(time.time() + 1.5)
    running = [preloaded.start_script(code, *argv, start, env=env) for argv in argvs]
    taken: list[str] = []
    for process in running:
        done = process.finish()
        out = done.stdout
        assert done.returncode == 0, done.stderr
        taken += [item for item in out.strip().split(",") if item]
    return taken


class ServerProcess:
    """A `headwater serve` (or `headwater worker`) process that can be killed and started
    again on the same port, as the crash tests need. Output goes to `log`."""

    def __init__(self, env: dict[str, str], *args: str, log: Path, command: str = "serve") -> None:
        self.env = process_env(env)
        self.args = args
        self.log = log
        self.command = command
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: preloaded.Process | None = None

    def start(self) -> ServerProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "headwater.cli", self.command]
        if self.command == "serve":
            argv += ["--port", str(self.port)]
        with self.log.open("ab") as out:
            self.process = start_server(
                [*argv, *self.args], env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        if self.command == "serve":
            wait_healthy(self.url, self.process, self.log)
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, as in a crash."""
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def running_server(env: dict[str, str], *args: str) -> Iterator[str]:
    """Start `headwater serve`, wait for /healthz, yield its base URL, stop it.

    Its output goes to `server.log` in HEADWATER_DATA_DIR.
    """
    server = ServerProcess(env, *args, log=Path(env["HEADWATER_DATA_DIR"]) / "server.log")
    try:
        yield server.start().url
    finally:
        server.stop()


@dataclass
class Listener:
    """A `headwater sftp` or `headwater smtp` process on a loopback port."""

    port: int
    process: preloaded.Process
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_listener(command: str, env: dict[str, str], tmp: Path) -> Listener:
    """`headwater COMMAND --port 0`, waiting until it listens (it writes its port to a
    ready file). `env` is as for ServerProcess."""
    ready = tmp / f"{command}-ready-{secrets.token_hex(4)}"
    log = tmp / f"{ready.name}.log"
    with log.open("ab") as out:
        argv = [sys.executable, "-m", "headwater.cli", command, "--port", "0"]
        process = start_server(
            [*argv, "--ready-file", str(ready)],
            env=process_env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"{command} did not start:\n" + log.read_text())
        time.sleep(0.05)
    return Listener(int(ready.read_text()), process, log)
