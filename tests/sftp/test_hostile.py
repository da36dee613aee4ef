"""What an SFTP account must not learn or do (contract 11): the host's file systems,
byte-range locks, control characters in names, clients it may not use; fsync works."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from tests.factories import create_company, create_ingestion_client
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.sftp.conftest import (
    Account,
    SftpServer,
    asyncssh_session,
    create_account,
    paramiko_session,
)

pytestmark = pytest.mark.http

HOST_PATHS = ["/etc/shadow", "/root/.ssh", "/", "headwater.db", "/../signing.key"]


def _connect(server: SftpServer, account: Account) -> Any:
    return asyncssh_session(server.port, account)


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


# --- bounds: one company's sessions never stop another's login ------------------------------


def _connect_from(server: SftpServer, account: Account, address: str = "127.0.0.1") -> Any:
    return asyncssh_session(server.port, account, address)


def test_handles_per_session_are_bounded_and_the_session_goes_on(
    make_sftp: Any, account: Account
) -> None:
    server = make_sftp(sftp_max_handles=8)
    folder = f"/{account.tenant.client_id}/orders"

    async def flood() -> tuple[int, str, bool]:
        async with _connect_from(server, account) as conn, conn.start_sftp_client() as sftp:
            opened = []
            with pytest.raises(asyncssh.SFTPFailure) as refused:
                for n in range(20):
                    opened.append(await sftp.open(f"{folder}/f{n}.csv.part", "wb"))
            count = len(opened)
            await opened.pop().close()
            again = await sftp.open(f"{folder}/again.csv.part", "wb")  # room again
            await again.close()
            for handle in opened:
                await handle.close()
            return count, str(refused.value.reason), await sftp.exists(folder)

    count, reason, works = asyncio.run(flood())
    assert count == 8 and reason == "too many open files" and works


def test_open_handles_hold_no_file_descriptors(make_sftp: Any, account: Account) -> None:
    """An idle upload handle costs the server no descriptor: handles opened by the
    thousand never take the process to its descriptor limit, where every other
    company's login would fail."""
    server = make_sftp()
    folder = f"/{account.tenant.client_id}/orders"
    descriptors = Path(f"/proc/{server.process.pid}/fd")

    async def hold() -> tuple[int, int]:
        async with _connect_from(server, account) as conn, conn.start_sftp_client() as sftp:
            before = len(list(descriptors.iterdir()))
            handles = [await sftp.open(f"{folder}/h{n}.csv.part", "wb") for n in range(60)]
            for handle in handles:
                await handle.write(b"order_id,amount\n")
            during = len(list(descriptors.iterdir()))
            for handle in handles:
                await handle.close()
            return before, during

    before, during = asyncio.run(hold())
    assert during - before < 10, (before, during)


def test_channels_per_connection_are_bounded(make_sftp: Any, account: Account) -> None:
    server = make_sftp()
    folder = f"/{account.tenant.client_id}/orders"

    async def channels() -> tuple[int, bool]:
        async with _connect_from(server, account) as conn:
            clients = []
            with pytest.raises(asyncssh.ChannelOpenError):
                for _ in range(10):
                    clients.append(await conn.start_sftp_client())
            works = await clients[0].exists(folder)
            for client in clients:
                client.exit()
            return len(clients), works

    assert asyncio.run(channels()) == (4, True)


def _closed_soon(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds` (its banner read past)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_connections_that_do_not_log_in_are_bounded_per_address_and_in_all(
    make_sftp: Any, account: Account
) -> None:
    """Idle connections from one address: 8 wait, more are closed at once, and another
    address's login is not held up; past the bound in all, every address waits."""
    server = make_sftp(sftp_max_unauthenticated=12)
    idle = [
        socket.create_connection(("127.0.0.1", server.port), source_address=("127.0.0.2", 0))
        for _ in range(20)
    ]
    try:
        time.sleep(0.5)
        closed = [_closed_soon(sock, 0.2) for sock in idle]
        assert closed.count(False) == 8, closed

        async def login(address: str) -> bool:
            async with (
                _connect_from(server, account, address) as conn,
                conn.start_sftp_client() as sftp,
            ):
                return await sftp.exists(f"/{account.tenant.client_id}")

        assert asyncio.run(login("127.0.0.1"))
        more = [
            socket.create_connection(("127.0.0.1", server.port), source_address=("127.0.0.3", 0))
            for _ in range(8)
        ]
        idle += more
        time.sleep(0.5)
        # 8 from .2 and 4 from .3 fill the 12; the rest of .3 is closed
        assert [_closed_soon(sock, 0.2) for sock in more].count(False) == 4
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.5)
    assert asyncio.run(login("127.0.0.1"))  # the slots come back when they leave
