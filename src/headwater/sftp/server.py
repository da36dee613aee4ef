"""Running the SFTP server (contract section 11): its host key, the listener (logins
are `login.Gate`, sessions `tree.Tree`) and the process's loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import asyncssh
import structlog

from headwater.config import Settings
from headwater.kit import memory
from headwater.sftp.hub import Hub, make_hub
from headwater.sftp.login import Gate

log = structlog.get_logger("headwater.sftp")

# --- running ----------------------------------------------------------------------------------


def host_key(settings: Settings) -> asyncssh.SSHKey:
    """The host key: the file named by the settings, else an ed25519 key made once (0600)."""
    if settings.sftp_host_key_file is not None:
        return asyncssh.read_private_key(str(settings.sftp_host_key_file))
    path = settings.data_dir / "sftp" / "host_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = asyncssh.generate_private_key("ssh-ed25519")
        part = path.with_name(f"host_key.{os.getpid()}.part")
        part.write_bytes(key.export_private_key())
        part.chmod(0o600)
        with contextlib.suppress(FileExistsError):
            os.link(part, path)  # another process made it first: use theirs
        part.unlink()
    return asyncssh.read_private_key(str(path))


async def listen(hub: Hub, host: str, port: int) -> asyncssh.SSHAcceptor:
    return await asyncssh.listen(
        host,
        port,
        server_host_keys=[host_key(hub.settings)],
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
