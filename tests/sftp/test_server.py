"""The SFTP server over real sockets: the stock OpenSSH `sftp`, paramiko and asyncssh
clients; uploads become transactions on close; receipts; refusals (contract 11)."""

from __future__ import annotations

import asyncio
import json
import stat
import time
from pathlib import Path
from typing import Any

import paramiko
import pytest

from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.sftp.conftest import (
    Account,
    SftpServer,
    asyncssh_session,
    create_account,
    openssh_batch,
    paramiko_session,
)

pytestmark = pytest.mark.http


def _sftp_transactions(tenant: FileTenant) -> list[dict[str, Any]]:
    return tenant.transactions(channel="sftp", page_size=100)["data"]  # type: ignore[no-any-return]


def _processed(tenant: FileTenant) -> list[dict[str, Any]]:
    run_worker(tenant.client)
    return _sftp_transactions(tenant)


def _store_objects(tenant: FileTenant) -> set[Path]:
    runtime = tenant.client.app.state.runtime  # type: ignore[attr-defined]
    root = Path(runtime.settings.data_dir) / "store" / "objects"
    return set(root.rglob("*")) if root.exists() else set()


def test_openssh_sftp_uploads_a_file_that_becomes_a_transaction(
    sftp_server: SftpServer, account: Account, tmp_path: Path
) -> None:
    tenant = account.tenant
    local = tmp_path / "orders.csv"
    local.write_text(CSV_HEADER + csv_rows(25))
    done = openssh_batch(
        sftp_server.port,
        account,
        f"ls /\ncd {tenant.client_id}\nls\ncd orders\nput {local}\nls\nls receipts\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert tenant.client_id in done.stdout and "orders" in done.stdout
    [transaction] = _processed(tenant)
    assert transaction["status"] == "completed", transaction
    assert transaction["channel"] == "sftp" and transaction["kind"] == "file"
    assert transaction["file_name"] == "orders.csv" and transaction["content_type"] == "text/csv"
    assert (
        transaction["records_accepted"] == 25 and transaction["file_size"] == local.stat().st_size
    )
    # the receipt: the transaction as the API answers it; it can be read and removed
    receipt = f"orders.csv.{transaction['transaction_id']}.json"
    target = tmp_path / "receipt.json"
    fetched = openssh_batch(
        sftp_server.port,
        account,
        f"cd {tenant.client_id}/orders/receipts\nls\nget {receipt} {target}\nrm {receipt}\nls\n",
        tmp_path,
    )
    assert fetched.returncode == 0, fetched.stderr
    assert json.loads(target.read_text()) == tenant.transaction(transaction["transaction_id"])
    _, sftp = paramiko_session(sftp_server.port, account.username, key_file=account.key_file)
    assert sftp.listdir(f"/{tenant.client_id}/orders/receipts") == []


def test_the_same_bytes_make_the_same_records_as_an_upload_url(
    sftp_server: SftpServer, account: Account
) -> None:
    tenant = account.tenant
    body = CSV_HEADER + csv_rows(7) + "X-1,not-an-email,oops,1,true,\n"
    by_url = tenant.upload(body)
    _, sftp = paramiko_session(sftp_server.port, account.username, key_file=account.key_file)
    with sftp.open(f"/{tenant.client_id}/orders/same.csv", "wb") as remote:
        remote.write(body.encode())
    [by_sftp] = _processed(tenant)
    ignore = {
        "transaction_id",
        "channel",
        "file_name",
        "created_at",
        "uploaded_at",
        "started_at",
        "completed_at",
    }
    assert {k: v for k, v in by_sftp.items() if k not in ignore} == {
        k: v for k, v in by_url.items() if k not in ignore
    }
    assert by_sftp["status"] == "rejected" and by_sftp["errors"] == by_url["errors"]


def test_temporary_names_are_held_until_renamed(sftp_server: SftpServer, account: Account) -> None:
    tenant = account.tenant
    _, sftp = paramiko_session(sftp_server.port, account.username, key_file=account.key_file)
    folder = f"/{tenant.client_id}/orders"
    with sftp.open(f"{folder}/night.csv.part", "wb") as remote:
        remote.write((CSV_HEADER + csv_rows(3)).encode())
    assert "night.csv.part" in sftp.listdir(folder)
    assert sftp.stat(f"{folder}/night.csv.part").st_size > 0
    assert _processed(tenant) == []  # held: nothing ingested yet
    sftp.rename(f"{folder}/night.csv.part", f"{folder}/night.csv")
    assert sorted(sftp.listdir(folder)) == ["receipts"]  # ingested: no longer listed
    [transaction] = _processed(tenant)
    assert transaction["file_name"] == "night.csv" and transaction["records_accepted"] == 3


def test_the_same_name_twice_is_two_transactions(sftp_server: SftpServer, account: Account) -> None:
    tenant = account.tenant
    _, sftp = paramiko_session(sftp_server.port, account.username, key_file=account.key_file)
    for n in (2, 4):
        with sftp.open(f"/{tenant.client_id}/orders/daily.ndjson", "wb") as remote:
            remote.write(
                b"".join(
                    json.dumps({"order_id": f"D-{i}", "amount": i}).encode() + b"\n"
                    for i in range(n)
                )
            )
    done = _processed(tenant)
    assert sorted(t["records_accepted"] for t in done) == [2, 4]
    assert {t["content_type"] for t in done} == {"application/x-ndjson"}


def _denied(call: Any, *args: Any) -> str:
    with pytest.raises((PermissionError, OSError)) as caught:
        call(*args)
    return str(caught.value)


def test_refusals_and_the_session_goes_on(sftp_server: SftpServer, account: Account) -> None:
    tenant = account.tenant
    _, sftp = paramiko_session(sftp_server.port, account.username, key_file=account.key_file)
    folder = f"/{tenant.client_id}/orders"
    assert ".csv, .json, .ndjson or .jsonl" in _denied(sftp.open, f"{folder}/notes.txt", "wb")
    _denied(sftp.mkdir, f"{folder}/sub")
    _denied(sftp.rmdir, folder)
    _denied(sftp.remove, folder)
    _denied(sftp.symlink, f"{folder}/a.csv", f"{folder}/b.csv")
    _denied(sftp.listdir, "/../..")
    _denied(sftp.listdir, "/etc")
    _denied(sftp.open, "/../../etc/passwd", "rb")
    _denied(sftp.open, f"/{tenant.client_id}/missing/x.csv", "wb")
    _denied(sftp.open, "/someone-else/orders/x.csv", "wb")
    with sftp.open(f"{folder}/move.csv.part", "wb") as remote:
        remote.write(b"order_id,amount\n")
    _denied(sftp.rename, f"{folder}/move.csv.part", "/elsewhere/move.csv")
    sftp.utime(folder, (0, 0))  # times: accepted, nothing changes
    sftp.chmod(folder, 0o700)
    assert stat.S_ISDIR(sftp.stat(folder).st_mode)
    # after every refusal the session still works
    assert sorted(sftp.listdir(folder)) == ["move.csv.part", "receipts"]
    sftp.remove(f"{folder}/move.csv.part")
    assert _processed(tenant) == []


def test_an_account_sees_only_its_clients(
    sftp_server: SftpServer, sftp_tenant: FileTenant, tmp_path: Path
) -> None:
    from tests.factories import create_ingestion_client
    from tests.ingestion.conftest import register_dataset

    other = create_ingestion_client(sftp_tenant.client, sftp_tenant.admin, sftp_tenant.company_id)
    register_dataset(sftp_tenant.client, sftp_tenant.admin, other)
    narrow = create_account(sftp_tenant, tmp_path, client_ids=[sftp_tenant.client_id])
    wide = create_account(sftp_tenant, tmp_path)
    _, sftp = paramiko_session(sftp_server.port, narrow.username, key_file=narrow.key_file)
    assert sftp.listdir("/") == [sftp_tenant.client_id]
    _denied(sftp.open, f"/{other}/orders/x.csv", "wb")
    _, everything = paramiko_session(sftp_server.port, wide.username, key_file=wide.key_file)
    assert sorted(everything.listdir("/")) == sorted([sftp_tenant.client_id, other])


def test_a_file_past_the_limit_fails_and_nothing_is_ingested(
    make_sftp: Any, account: Account
) -> None:
    server = make_sftp(max_file_bytes=1000)
    tenant = account.tenant
    before = _store_objects(tenant)
    _, sftp = paramiko_session(server.port, account.username, key_file=account.key_file)
    remote = sftp.open(f"/{tenant.client_id}/orders/big.csv", "wb")
    with pytest.raises(OSError, match="too large"):
        remote.write((CSV_HEADER + csv_rows(100)).encode())
        remote.flush()
        remote.close()
    assert _processed(tenant) == []
    assert sftp.listdir(f"/{tenant.client_id}/orders") == ["receipts"]
    assert _store_objects(tenant) == before


def test_a_connection_dropped_before_the_close_leaves_nothing(
    sftp_server: SftpServer, account: Account
) -> None:
    tenant = account.tenant
    before = _store_objects(tenant)
    ssh, sftp = paramiko_session(sftp_server.port, account.username, key_file=account.key_file)
    remote = sftp.open(f"/{tenant.client_id}/orders/cut.csv", "wb")
    remote.write((CSV_HEADER + csv_rows(2000)).encode())
    remote.flush()
    ssh.get_transport().sock.close()  # type: ignore[union-attr]  # no close, no goodbye
    time.sleep(1.0)
    assert _processed(tenant) == []
    assert _store_objects(tenant) == before


def test_password_login(sftp_server: SftpServer, sftp_tenant: FileTenant, tmp_path: Path) -> None:
    made = create_account(sftp_tenant, tmp_path, public_keys=[], password=True)
    _, sftp = paramiko_session(sftp_server.port, made.username, password=made.created["password"])
    assert sftp.listdir("/") == [sftp_tenant.client_id]
    with pytest.raises(paramiko.AuthenticationException):
        paramiko_session(sftp_server.port, made.username, password="wrong")


def test_failures_look_alike_and_an_address_is_refused_after_ten(
    make_sftp: Any, account: Account, tmp_path: Path
) -> None:
    server = make_sftp(sftp_auth_failures_per_minute=10)
    from tests.sftp.conftest import new_key

    _, stranger_key = new_key(tmp_path)
    errors = []
    for username in (account.username, "nobody-here"):
        with pytest.raises(paramiko.AuthenticationException) as caught:
            paramiko_session(server.port, username, key_file=stranger_key)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    for _ in range(12):
        with pytest.raises(paramiko.AuthenticationException):
            paramiko_session(server.port, "nobody-here", key_file=stranger_key)
    with pytest.raises(paramiko.AuthenticationException):  # the right key, refused now
        paramiko_session(server.port, account.username, key_file=account.key_file)


def test_sessions_per_account_are_limited(make_sftp: Any, account: Account) -> None:
    server = make_sftp(sftp_max_sessions=2)
    open_ = [
        paramiko_session(server.port, account.username, key_file=account.key_file) for _ in range(2)
    ]
    with pytest.raises(paramiko.AuthenticationException):
        paramiko_session(server.port, account.username, key_file=account.key_file)
    open_[0][0].close()
    # the server notices the closed session when its connection ends; on a loaded
    # machine that takes a moment, so the next login is tried until it is let in
    deadline = time.monotonic() + 30
    while True:
        try:
            _, sftp = paramiko_session(server.port, account.username, key_file=account.key_file)
            break
        except paramiko.AuthenticationException:
            assert time.monotonic() < deadline, "a closed session still counted"
            time.sleep(0.2)
    assert sftp.listdir("/")


def test_a_deleted_account_is_logged_out(sftp_server: SftpServer, account: Account) -> None:
    """The contract's 5 s comes from the reaper's period (checked below, not timed: a
    loaded machine may take longer to run it)."""
    from headwater.sftp.hub import REAP_SECONDS

    assert REAP_SECONDS <= 5 / 2
    tenant = account.tenant
    ssh, sftp = paramiko_session(sftp_server.port, account.username, key_file=account.key_file)
    assert sftp.listdir("/")
    deleted = tenant.client.delete(
        f"/admin/v1/sftp_accounts/{account.username}", headers=tenant.admin
    )
    assert deleted.status_code == 204
    deadline = time.monotonic() + 60
    while ssh.get_transport().is_active() and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.1)
    assert not ssh.get_transport().is_active()  # type: ignore[union-attr]
    with pytest.raises(paramiko.AuthenticationException):
        paramiko_session(sftp_server.port, account.username, key_file=account.key_file)


def test_an_asyncssh_client_uploads(sftp_server: SftpServer, account: Account) -> None:
    tenant = account.tenant

    async def upload() -> list[str]:
        async with (
            asyncssh_session(sftp_server.port, account) as conn,
            conn.start_sftp_client() as sftp,
        ):
            async with sftp.open(f"/{tenant.client_id}/orders/async.csv.gz", "wb") as remote:
                import gzip

                await remote.write(gzip.compress((CSV_HEADER + csv_rows(40)).encode()))
            return sorted(await sftp.listdir(f"/{tenant.client_id}/orders"))

    listed = asyncio.run(upload())
    assert "async.csv.gz" not in listed
    [transaction] = _processed(tenant)
    assert transaction["records_accepted"] == 40 and transaction["content_type"] == "text/csv"


def _incoming(tenant: FileTenant) -> list[Path]:
    runtime = tenant.client.app.state.runtime  # type: ignore[attr-defined]
    return list((Path(runtime.settings.data_dir) / "store" / "incoming").glob("*.part"))


def test_a_server_killed_during_an_upload_leaves_nothing(make_sftp: Any, account: Account) -> None:
    """No transaction, no object; the bytes it was writing are swept by the worker."""
    tenant = account.tenant
    server = make_sftp()
    before = _store_objects(tenant)
    _, sftp = paramiko_session(server.port, account.username, key_file=account.key_file)
    remote = sftp.open(f"/{tenant.client_id}/orders/killed.csv", "wb")
    remote.write((CSV_HEADER + csv_rows(50_000)).encode())  # > 1 MiB: some reached the store
    remote.flush()
    server.process.kill()
    server.process.wait()
    assert _processed(tenant) == []
    assert _store_objects(tenant) == before
    runtime = tenant.client.app.state.runtime  # type: ignore[attr-defined]
    assert _incoming(tenant), "the killed upload's part file is there to be swept"
    assert runtime.store.sweep_incoming(older_than=0) >= 1
    assert _incoming(tenant) == []


def test_a_server_killed_after_the_ok_is_processed_once(make_sftp: Any, account: Account) -> None:
    tenant = account.tenant
    server = make_sftp()
    _, sftp = paramiko_session(server.port, account.username, key_file=account.key_file)
    with sftp.open(f"/{tenant.client_id}/orders/kept.csv", "wb") as remote:
        remote.write((CSV_HEADER + csv_rows(9)).encode())
    server.process.kill()  # right after the close's OK
    server.process.wait()
    [transaction] = _processed(tenant)
    assert transaction["status"] == "completed" and transaction["records_accepted"] == 9
    assert run_worker(tenant.client) == 0  # nothing left to do: processed once
    assert len(_sftp_transactions(tenant)) == 1
