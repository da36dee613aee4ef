"""Keys every node holds the same (contract 19): made once, kept in the database, never
one per node; a node that would seal differently refuses to start."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from headwater import migrations
from headwater.config import Settings
from headwater.sftp.hub import make_hub
from headwater.sftp.server import host_key
from tests.factories import fresh_pg_database
from tests.http_server import process_env, same_database


@pytest.fixture
def fresh(backend: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The settings of a new installation: an empty database of its own."""
    if backend == "sqlite":
        yield {"data_dir": tmp_path / "node-1", "database_url": None}
        return
    with fresh_pg_database("hw_keys") as (_name, url):
        yield {"data_dir": tmp_path / "node-1", "database_url": url}


def _host_key(settings: dict[str, Any]) -> str:
    node = Settings(**settings, log_level="WARNING")
    migrations.upgrade(node)
    hub = make_hub(node)
    try:
        return host_key(hub).export_public_key().decode()
    finally:
        hub.db.dispose()


def test_every_sftp_node_shows_the_same_host_key(backend: str, fresh: dict[str, Any]) -> None:
    if backend == "sqlite":
        pytest.skip("nodes on several machines share a PostgreSQL database")
    node = fresh | {"webhook_secret_key": "the installation's"}  # as every node must
    first = _host_key(node)
    # another node: a data directory of its own, the same database
    other = node | {"data_dir": fresh["data_dir"].with_name("node-2")}
    assert _host_key(other) == first
    assert not (other["data_dir"] / "sftp" / "host_key").exists()


def test_the_host_key_an_earlier_version_made_is_kept(fresh: dict[str, Any]) -> None:
    kept = asyncssh.generate_private_key("ssh-ed25519")
    path = fresh["data_dir"] / "sftp" / "host_key"
    path.parent.mkdir(parents=True)
    path.write_bytes(kept.export_private_key())
    assert _host_key(fresh) == kept.export_public_key().decode()
    path.unlink()  # kept in the database from now on
    assert _host_key(fresh) == kept.export_public_key().decode()


@pytest.mark.http  # starts the node's own process
@pytest.mark.parametrize(
    "role", ["worker", "sftp --port 0", "smtp --port 0", "serve --port 0", "companies create X"]
)
def test_a_node_that_would_seal_differently_refuses_to_start(
    role: str, settings: Settings, client: Any
) -> None:
    """The test app has started (and recorded how its node seals); a node, or an
    operator's command, with another secret key on the same database would seal secrets
    the others could not open."""
    env = process_env(
        same_database(settings.data_dir, settings.database_url)
        | {"HEADWATER_WEBHOOK_SECRET_KEY": "another key", "HEADWATER_LOG_LEVEL": "WARNING"}
    )
    argv = [sys.executable, "-m", "headwater.cli", *role.split()]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "headwater: this node's sealing key differs from the one the other nodes on this "
        "database sealed their secrets with: set HEADWATER_WEBHOOK_SECRET_KEY (or "
        "HEADWATER_SIGNING_KEY_PASSPHRASE) to the same value on every node"
    )
