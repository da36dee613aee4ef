"""SFTP logins (asyncssh's server side of a connection): the account's keys or its
password, failures that look alike and are limited per address, the account's session
limit, and at most `MAX_CHANNELS` SFTP sessions a connection, each a `Tree`."""

from __future__ import annotations

import asyncio
from typing import cast

import asyncssh
import structlog
from asyncssh.stream import SSHServerStreamSession

from headwater.sftp import metrics
from headwater.sftp import service as accounts
from headwater.sftp.hub import Hub
from headwater.sftp.service import Login
from headwater.sftp.tree import Tree

log = structlog.get_logger("headwater.sftp")

SFTP_VERSION = 3
MAX_CHANNELS = 4  # per connection (contract 11)


class Gate(asyncssh.SSHServer):
    """Authentication: the account's keys, or its password; a failure looks the same
    whatever failed, and an address with too many failures is refused for a minute."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.conn: asyncssh.SSHServerConnection | None = None
        self.address = ""
        self.login: Login | None = None
        self.waiting = False  # counted among the connections not logged in

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        peer = conn.get_extra_info("peername")
        self.address = str(peer[0]) if peer else ""
        if not self.hub.waiting.admit(self.address):
            metrics.REFUSED_LOGINS.inc()
            log.warning("sftp connection refused: too many waiting to log in")
            asyncio.get_running_loop().call_soon(conn.close)
            return
        self.waiting = True

    def _stop_waiting(self) -> None:
        if self.waiting:
            self.waiting = False
            self.hub.waiting.leave(self.address)

    def session_requested(self) -> SSHServerStreamSession[bytes] | bool:
        """A session channel: an SFTP subsystem, unless the connection already has
        MAX_CHANNELS open (asyncssh keeps no count; its channel table is the truth)."""
        assert self.conn is not None
        if len(getattr(self.conn, "_channels", ())) >= MAX_CHANNELS:
            log.warning("sftp channel refused: too many on one connection")
            return False
        hub = self.hub
        return SSHServerStreamSession(
            None, lambda chan: Tree(cast(asyncssh.SSHServerChannel[bytes], chan), hub),
            SFTP_VERSION, False,
        )  # fmt: skip

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        if self.login is not None and self.conn is not None:
            sessions = self.hub.connections.get(self.login.username, set())
            if self.conn in sessions:
                sessions.discard(self.conn)
                metrics.OPEN_SESSIONS.dec()

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return True

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        if self.hub.failures.refused(self.address):
            return False
        text = key.export_public_key("openssh").decode().split()
        found = await self.hub.run(self._check_key, username, f"{text[0]} {text[1]}")
        return await self._outcome(found)

    async def validate_password(self, username: str, password: str) -> bool:
        if self.hub.failures.refused(self.address):
            return False
        found = await self.hub.run(self._check_password, username, password)
        return await self._outcome(found)

    def _check_key(self, username: str, key: str) -> Login | None:
        with self.hub.db.read_session() as session:
            return accounts.check_key(session, username, key)

    def _check_password(self, username: str, password: str) -> Login | None:
        with self.hub.db.read_session() as session:
            return accounts.check_password(session, username, password)

    async def _outcome(self, found: Login | None) -> bool:
        if found is None:
            metrics.REFUSED_LOGINS.inc()
            await self.hub.failures.failed(self.address)
            return False
        if self.hub.open_sessions(found.username) >= self.hub.settings.sftp_max_sessions:
            log.warning("sftp login refused: session limit", username=found.username)
            metrics.REFUSED_LOGINS.inc()
            return False
        self.login = found
        return True

    def auth_completed(self) -> None:
        self._stop_waiting()
        assert self.conn is not None and self.login is not None
        self.conn.set_extra_info(login=self.login)
        self.hub.connections.setdefault(self.login.username, set()).add(self.conn)
        metrics.SESSIONS.inc()
        metrics.OPEN_SESSIONS.inc()
        log.info("sftp session", username=self.login.username, address=self.address)
