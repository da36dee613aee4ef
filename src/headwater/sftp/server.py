"""Running the SFTP server (contract section 11): its host key, the listener (logins
are `login.Gate`, sessions `tree.Tree`) and the process's loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncssh
import structlog

from headwater.config import Settings
from headwater.identity import shared
from headwater.kit import memory
from headwater.sftp.hub import Hub, make_hub
from headwater.sftp.login import Gate

log = structlog.get_logger("headwater.sftp")

# --- running ----------------------------------------------------------------------------------


def host_key(hub: Hub) -> asyncssh.SSHKey:
    """The host key: the file named by the settings, else the installation's shared one
    (`identity.shared`), so that every SFTP node shows clients the same key. It is made
    once: from the key an earlier version kept at `$data_dir/sftp/host_key`, if there
    is one, else a new ed25519 key."""
    settings = hub.settings
    if settings.sftp_host_key_file is not None:
        return asyncssh.read_private_key(str(settings.sftp_host_key_file))
    with hub.db.unit_of_work() as session:
        pem = shared.shared_key(session, HOST_KEY, lambda: _first_host_key(settings))
    return asyncssh.import_private_key(pem)


HOST_KEY = "sftp_host_key"


def _first_host_key(settings: Settings) -> str:
    path = settings.data_dir / "sftp" / "host_key"
    if path.exists():
        return path.read_text()
    return asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()


async def listen(hub: Hub, host: str, port: int) -> asyncssh.SSHAcceptor:
    return await asyncssh.listen(
        host,
        port,
        server_host_keys=[host_key(hub)],
        # sessions come from Gate.session_requested, which bounds them per connection
        server_factory=lambda: Gate(hub),
        allow_scp=False,
        agent_forwarding=False,
        x11_forwarding=False,
        allow_pty=False,
        line_editor=False,
        login_timeout=60,
        keepalive_interval=30,
    )


async def serve(settings: Settings, host: str, port: int, *, ready: Path | None = None) -> None:
    """Run the SFTP server until cancelled."""
    memory.return_large_blocks()
    hub = make_hub(settings)
    acceptor = await listen(hub, host, port)
    bound = acceptor.sockets[0].getsockname()[1] if acceptor.sockets else port
    log.info("sftp listening", host=host, port=bound)
    if ready is not None:
        ready.write_text(str(bound))
    reaper = asyncio.get_running_loop().create_task(hub.reap_forever())
    try:
        await acceptor.wait_closed()
    finally:
        reaper.cancel()
        acceptor.close()
        hub.db.dispose()
