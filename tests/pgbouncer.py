"""Debian's PgBouncer in transaction pooling mode on a free loopback port, in front of
the local PostgreSQL (contract 19: nothing may rely on session state)."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.http_server import free_port

PGBOUNCER = "/usr/sbin/pgbouncer"
# PgBouncer refuses to run as root; it runs as the PostgreSQL server's own user then
RUN_AS = "postgres"

CONFIG = """\
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/users.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = {server_connections}
max_db_connections = {server_connections}
server_reset_query =
pkt_buf = {packet_buffer}
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


def available() -> bool:
    return Path(PGBOUNCER).exists()


# 256 kB, not PgBouncer's 4 kB: a 500-record push (500 kB) crosses in 2 reads and
# writes, not 125; PgBouncer's CPU a push 0.33 ms against 1.87 (docs/scaling.md)
PACKET_BUFFER = 262144


@contextmanager
def pgbouncer(*, server_connections: int = 8, packet_buffer: int = PACKET_BUFFER) -> Iterator[int]:
    """A PgBouncer (transaction mode) that opens at most `server_connections` to the
    server, whatever its clients hold: its port."""
    directory = Path(tempfile.mkdtemp(prefix="headwater-pgbouncer-"))
    port = free_port()
    # the server's own trust authentication: PgBouncer logs in as the client's user
    (directory / "users.txt").write_text(f'"{getpass.getuser()}" ""\n"{RUN_AS}" ""\n')
    config = directory / "pgbouncer.ini"
    config.write_text(
        CONFIG.format(
            port=port,
            directory=directory,
            server_connections=server_connections,
            packet_buffer=packet_buffer,
        )
    )
    argv = [PGBOUNCER, str(config)]
    if os.getuid() == 0:
        shutil.chown(directory, user=RUN_AS)
        argv = ["runuser", "-u", RUN_AS, "--", *argv]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _wait_listening(port, process, directory / "pgbouncer.log")
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise RuntimeError("pgbouncer exited: " + (log.read_text() if log.exists() else ""))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("pgbouncer did not listen") from None
            time.sleep(0.05)


def through(database_url: str, port: int) -> str:
    """`database_url` (the local server's) reached through PgBouncer on `port`."""
    return database_url.replace("127.0.0.1:5432", f"127.0.0.1:{port}", 1)
