"""One SFTP process's state (`Hub`): the database, the store, the open sessions by
account, the connections waiting to log in, the failed logins per address; and the
reaper that ends the sessions of deleted accounts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio.to_thread
import asyncssh
import structlog

from headwater.config import Settings
from headwater.db import Database
from headwater.files.stores import Store
from headwater.kit.connections import Connections
from headwater.kit.ratelimit import FailureLimit
from headwater.sftp import service as accounts

log = structlog.get_logger("headwater.sftp")
T = TypeVar("T")

REAP_SECONDS = 2.0  # how often sessions of deleted accounts are looked for
MAX_UNAUTHENTICATED_PER_ADDRESS = 8


@dataclass
class Hub:
    """One per process: the database, the store, the logins' open connections, the
    connections waiting to log in, the failed logins per address."""

    db: Database
    store: Store
    settings: Settings
    failures: FailureLimit
    connections: dict[str, set[asyncssh.SSHServerConnection]] = field(default_factory=dict)
    # connections that have not logged in yet
    waiting: Connections = field(init=False)

    def __post_init__(self) -> None:
        self.waiting = Connections(
            most=self.settings.sftp_max_unauthenticated,
            per_address=MAX_UNAUTHENTICATED_PER_ADDRESS,
        )

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(call, *args)

    def open_sessions(self, username: str) -> int:
        return len(self.connections.get(username, ()))

    async def reap_forever(self) -> None:
        """End the sessions of accounts that were deleted (within REAP_SECONDS)."""
        while True:
            await asyncio.sleep(REAP_SECONDS)
            names = [name for name, conns in self.connections.items() if conns]
            if not names:
                continue
            try:
                alive = await self.run(self._existing, names)
            except Exception as exc:  # the database: try again at the next turn
                log.warning("sftp account check failed", error=str(exc).splitlines()[0])
                continue
            for name in names:
                if name not in alive:
                    for conn in list(self.connections.get(name, ())):
                        log.info("sftp session ended: account deleted", username=name)
                        conn.close()

    def _existing(self, names: list[str]) -> set[str]:
        with self.db.read_session() as session:
            return accounts.existing(session, names)


def make_hub(settings: Settings) -> Hub:
    from headwater.files.stores import make_store

    return Hub(
        db=Database(settings),
        store=make_store(settings),
        settings=settings,
        failures=FailureLimit.per_minute(
            settings.sftp_auth_failures_per_minute, redis_url=settings.redis_url, prefix="hw:sf:"
        ),
    )
