"""What an SFTP account must not learn or do (contract 11): the host's file systems,
byte-range locks, control characters in names, clients it may not use; fsync works."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from tests.factories import create_company, create_ingestion_client
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.sftp.conftest import Account, SftpServer, create_account, paramiko_session

pytestmark = pytest.mark.http

HOST_PATHS = ["/etc/shadow", "/root/.ssh", "/", "headwater.db", "/../signing.key"]


def _connect(server: SftpServer, account: Account) -> Any:
    return asyncssh.connect(
        "127.0.0.1",
        server.port,
        username=account.username,
        client_keys=[account.key],
        known_hosts=None,
        agent_path=None,
    )


def test_statvfs_never_reports_the_hosts_file_systems(
    sftp_server: SftpServer, account: Account
) -> None:
    folder = f"/{account.tenant.client_id}/orders"

    async def probe() -> tuple[list[Any], list[str]]:
        answers, refusals = [], []
        async with _connect(sftp_server, account) as conn, conn.start_sftp_client() as sftp:
            for path in [folder, *HOST_PATHS]:
                try:
                    answers.append((path, await sftp.statvfs(path)))
                except asyncssh.SFTPError as exc:
                    refusals.append(f"{path}: {type(exc).__name__}")
        return answers, refusals

    answers, refusals = asyncio.run(probe())
    host = os.statvfs("/")
    paths = [path for path, _ in answers]
    # the account's own tree, and `/`, answer the same synthetic figures; nothing else exists
    assert paths == [folder, "/"], refusals
    for _, figures in answers:
        assert figures.bsize == 4096 and figures.blocks != host.f_blocks
        assert figures.bfree == figures.blocks and figures.files == 0
    assert all("SFTPNoSuchFile" in r or "SFTPPermissionDenied" in r for r in refusals), refusals


def test_fsync_of_an_upload_is_accepted_and_the_file_ingested(
    sftp_server: SftpServer, account: Account
) -> None:
    tenant = account.tenant

    async def upload() -> None:
        async with (
            _connect(sftp_server, account) as conn,
            conn.start_sftp_client() as sftp,
            sftp.open(f"/{tenant.client_id}/orders/synced.csv", "wb") as remote,
        ):
            await remote.write((CSV_HEADER + csv_rows(5)).encode())
            await remote.fsync()
            assert (await remote.statvfs()).bsize == 4096
            with pytest.raises(asyncssh.SFTPError):
                await remote.lock(0, 10, asyncssh.FXF_BLOCK_WRITE)

    asyncio.run(upload())
    run_worker(tenant.client)
    [transaction] = tenant.transactions(channel="sftp", page_size=10)["data"]
    assert transaction["status"] == "completed" and transaction["records_accepted"] == 5


@pytest.mark.parametrize("name", ["new\nline.csv", "tab\there.csv", "bell\x07.csv", "del\x7f.csv"])
def test_a_name_holding_a_control_character_fails(
    sftp_server: SftpServer, account: Account, name: str
) -> None:
    _, sftp = paramiko_session(sftp_server.port, account.username, key_file=account.key_file)
    folder = f"/{account.tenant.client_id}/orders"
    with pytest.raises(OSError) as refused:
        sftp.open(f"{folder}/{name}", "wb")
    assert "control character" in str(refused.value)
    assert sftp.listdir(folder) == ["receipts"]  # the session goes on
    run_worker(account.tenant.client)
    assert account.tenant.transactions(channel="sftp", page_size=10)["data"] == []


def test_clients_out_of_reach_are_denied_or_absent(
    sftp_server: SftpServer, sftp_tenant: FileTenant, tmp_path: Path
) -> None:
    """A client of the account's company that it may not use: PERMISSION_DENIED. Another
    company's client: NO_SUCH_FILE, as a name that does not exist. A client with no
    dataset: an empty directory."""
    tenant = sftp_tenant
    withheld = create_ingestion_client(tenant.client, tenant.admin, tenant.company_id)
    empty = create_ingestion_client(tenant.client, tenant.admin, tenant.company_id)
    stranger = FileTenant(
        tenant.client, tenant.admin, create_company(tenant.client, tenant.admin, "Elsewhere")
    )
    account = create_account(tenant, tmp_path, client_ids=[tenant.client_id, empty])
    _, sftp = paramiko_session(sftp_server.port, account.username, key_file=account.key_file)
    assert sorted(sftp.listdir("/")) == sorted([tenant.client_id, empty])
    assert sftp.listdir(f"/{empty}") == []
    for path in (f"/{withheld}", f"/{withheld}/orders"):
        with pytest.raises(PermissionError):
            sftp.listdir(path)
    with pytest.raises(PermissionError):
        sftp.open(f"/{withheld}/orders/x.csv", "wb")
    for path in (f"/{stranger.client_id}", f"/{stranger.client_id}/orders", "/no-such-client"):
        with pytest.raises(FileNotFoundError):
            sftp.listdir(path)
    # writing there is refused exactly as writing under a client that does not exist
    with pytest.raises(PermissionError) as elsewhere:
        sftp.open(f"/{stranger.client_id}/orders/x.csv", "wb")
    with pytest.raises(PermissionError) as nowhere:
        sftp.open("/no-such-client/orders/x.csv", "wb")
    assert str(elsewhere.value).replace(stranger.client_id, "?") == str(nowhere.value).replace(
        "no-such-client", "?"
    )
