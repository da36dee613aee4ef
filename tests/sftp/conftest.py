"""A real `headwater sftp` process on a loopback port, on the tests' database and store,
and accounts to log in with (keys made by asyncssh, written for OpenSSH too)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import paramiko
import pytest
from starlette.testclient import TestClient

from tests.files.conftest import FileTenant
from tests.http_server import Listener, start_listener

SftpServer = Listener


def settings_env(base_settings: dict[str, Any], **extra: Any) -> dict[str, str]:
    """The tests' settings (and `extra` ones) as a server process's environment."""
    env = {
        "HEADWATER_DATA_DIR": str(base_settings["data_dir"]),
        "HEADWATER_LOG_LEVEL": "INFO",
        "HEADWATER_LOG_JSON": "true",
    }
    if base_settings.get("database_url"):
        env["HEADWATER_DATABASE_URL"] = str(base_settings["database_url"])
    env.update({f"HEADWATER_{k.upper()}": str(v) for k, v in extra.items()})
    return env


def start_sftp(base_settings: dict[str, Any], tmp: Path, **extra: Any) -> Listener:
    return start_listener("sftp", settings_env(base_settings, **extra), tmp)


@pytest.fixture(scope="module")
def sftp_server(
    base_settings: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SftpServer]:
    server = start_sftp(base_settings, tmp_path_factory.mktemp("sftp"))
    yield server
    server.stop()


@pytest.fixture
def make_sftp(base_settings: dict[str, Any], tmp_path: Path) -> Iterator[Callable[..., SftpServer]]:
    """A server of its own with some settings changed."""
    started: list[SftpServer] = []

    def make(**extra: Any) -> SftpServer:
        server = start_sftp(base_settings, tmp_path, **extra)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@dataclass
class Account:
    username: str
    key: asyncssh.SSHKey
    key_file: Path
    tenant: FileTenant
    created: dict[str, Any]

    @property
    def public_key(self) -> str:
        return self.key.export_public_key("openssh").decode().strip()


def new_key(directory: Path, algorithm: str = "ssh-ed25519") -> tuple[asyncssh.SSHKey, Path]:
    key = asyncssh.generate_private_key(algorithm)
    path = directory / f"key-{uuid.uuid4().hex[:8]}"
    path.write_bytes(key.export_private_key("openssh"))
    path.chmod(0o600)
    return key, path


def create_account(
    tenant: FileTenant, tmp_path: Path, *, status: int = 201, **body: Any
) -> Account:
    key, key_file = new_key(tmp_path)
    username = body.pop("username", f"u{uuid.uuid4().hex[:10]}")
    payload = {"username": username, "public_keys": [key.export_public_key().decode()]} | body
    answer = tenant.client.post(
        f"/admin/v1/companies/{tenant.company_id}/sftp_accounts", json=payload, headers=tenant.admin
    )
    assert answer.status_code == status, answer.text
    return Account(username, key, key_file, tenant, answer.json())


@pytest.fixture
def sftp_tenant(client: TestClient, admin: dict[str, str], company: str) -> FileTenant:
    return FileTenant(client, admin, company)


@pytest.fixture
def account(sftp_tenant: FileTenant, tmp_path: Path) -> Account:
    return create_account(sftp_tenant, tmp_path)


def paramiko_session(
    port: int, username: str, *, key_file: Path | None = None, password: str | None = None
) -> tuple[paramiko.SSHClient, paramiko.SFTPClient]:
    """A paramiko SFTP session (keys from files only: no agent, no ~/.ssh)."""
    ssh = paramiko.SSHClient()
    ssh.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # noqa: S507 (a test's own server)
    try:
        ssh.connect(
            "127.0.0.1",
            port=port,
            username=username,
            key_filename=str(key_file) if key_file else None,
            password=password,
            allow_agent=False,
            look_for_keys=False,
            timeout=30,
            banner_timeout=30,
            auth_timeout=30,
        )
    except BaseException:
        ssh.close()  # a refused login leaves no connection waiting on the server
        raise
    return ssh, ssh.open_sftp()


def openssh_batch(
    port: int, account: Account, commands: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """The stock OpenSSH `sftp` in batch mode; a command prefixed with `-` may fail."""
    batch = tmp_path / f"batch-{uuid.uuid4().hex[:6]}"
    batch.write_text(commands)
    return subprocess.run(
        [
            "sftp",
            "-b",
            str(batch),
            "-P",
            str(port),
            "-i",
            str(account.key_file),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            f"UserKnownHostsFile={os.devnull}",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-F",
            os.devnull,
            f"{account.username}@127.0.0.1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def asyncssh_session(port: int, account: Account, address: str = "127.0.0.1") -> Any:
    """An asyncssh connection as `account` (its key only), from a loopback `address`."""
    return asyncssh.connect(
        "127.0.0.1",
        port,
        username=account.username,
        client_keys=[account.key],
        known_hosts=None,
        agent_path=None,
        local_addr=(address, 0),
    )
