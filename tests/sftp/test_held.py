"""Files held under temporary names live in the database (contract 11): they survive a
restart, are seen from another instance, are capped per account, can be removed by
their account, expire with their bytes, and never leave bytes without an entry."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from headwater import worker
from headwater.kit.clock import utcnow
from headwater.runtime import Runtime
from headwater.sftp import held
from headwater.sftp.models import SftpHeldFile
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.sftp.conftest import Account, asyncssh_session, paramiko_session

pytestmark = pytest.mark.http

BODY = (CSV_HEADER + csv_rows(3)).encode()


def _objects(tenant: FileTenant) -> set[Path]:
    runtime = tenant.client.app.state.runtime  # type: ignore[attr-defined]
    root = Path(runtime.settings.data_dir) / "store" / "objects"
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def _put(port: int, account: Account, name: str, body: bytes = BODY) -> Any:
    _, sftp = paramiko_session(port, account.username, key_file=account.key_file)
    with sftp.open(f"/{account.tenant.client_id}/orders/{name}", "wb") as remote:
        remote.write(body)
    return sftp


def test_a_held_file_survives_a_restart_and_is_seen_from_another_instance(
    make_sftp: Any, account: Account
) -> None:
    tenant = account.tenant
    first = make_sftp()
    _put(first.port, account, "night.csv.part")
    first.stop()
    second, third = make_sftp(), make_sftp()
    folder = f"/{tenant.client_id}/orders"
    _, on_third = paramiko_session(third.port, account.username, key_file=account.key_file)
    assert "night.csv.part" in on_third.listdir(folder)
    _, on_second = paramiko_session(second.port, account.username, key_file=account.key_file)
    on_second.rename(f"{folder}/night.csv.part", f"{folder}/night.csv")
    assert on_third.listdir(folder) == ["receipts"]
    with pytest.raises(FileNotFoundError):  # renamed once: the other instance finds nothing
        on_third.rename(f"{folder}/night.csv.part", f"{folder}/again.csv")
    run_worker(tenant.client)
    [transaction] = tenant.transactions(channel="sftp", page_size=10)["data"]
    assert transaction["file_name"] == "night.csv" and transaction["records_accepted"] == 3


def test_one_name_written_again_keeps_one_object(make_sftp: Any, account: Account) -> None:
    tenant = account.tenant
    server = make_sftp()
    before = _objects(tenant)
    for n in range(3):
        sftp = _put(server.port, account, "same.part", BODY + csv_rows(1, 100 + n).encode())
    assert len(_objects(tenant) - before) == 1
    folder = f"/{tenant.client_id}/orders"
    sftp.rename(f"{folder}/same.part", f"{folder}/same.tmp")  # held to held
    assert sorted(sftp.listdir(folder)) == ["receipts", "same.tmp"]
    sftp.remove(f"{folder}/same.tmp")  # as WinSCP does when a transfer is cancelled
    assert _objects(tenant) == before and sftp.listdir(folder) == ["receipts"]


def test_an_account_holds_at_most_its_limit(make_sftp: Any, account: Account) -> None:
    tenant = account.tenant
    server = make_sftp(sftp_max_held=2)
    before = _objects(tenant)
    _put(server.port, account, "a.part")
    sftp = _put(server.port, account, "b.part")

    async def third() -> str:
        async with (
            asyncssh_session(server.port, account) as conn,
            conn.start_sftp_client() as client,
        ):
            remote = await client.open(f"/{tenant.client_id}/orders/c.part", "wb")
            await remote.write(BODY)
            with pytest.raises(asyncssh.SFTPFailure) as refused:
                await remote.close()
            return str(refused.value.reason)

    assert "too many held files" in asyncio.run(third())
    _put(server.port, account, "b.part")  # the same name again replaces: still two
    folder = f"/{tenant.client_id}/orders"
    assert sorted(sftp.listdir(folder)) == ["a.part", "b.part", "receipts"]
    assert len(_objects(tenant) - before) == 2


def test_a_held_file_expires_with_its_bytes(make_sftp: Any, account: Account) -> None:
    tenant = account.tenant
    server = make_sftp()
    before = _objects(tenant)
    sftp = _put(server.port, account, "old.filepart")
    runtime: Runtime = tenant.client.app.state.runtime  # type: ignore[attr-defined]
    with runtime.db.unit_of_work() as session:  # an hour early: nothing goes
        later = utcnow() + timedelta(hours=runtime.settings.sftp_held_hours - 1)
        assert list(held.expire(session, hours=runtime.settings.sftp_held_hours, now=later)) == []
        session.rollback()
    key = (uuid.UUID(tenant.company_id), account.username, tenant.client_id, "orders")
    with runtime.db.unit_of_work() as session:
        mine = session.get(SftpHeldFile, (*key, "old.filepart"))
        assert mine is not None
        mine.held_at = utcnow() - timedelta(hours=runtime.settings.sftp_held_hours + 1)
    asyncio.run(worker.expire_sftp_held(runtime))
    assert _objects(tenant) == before
    assert sftp.listdir(f"/{tenant.client_id}/orders") == ["receipts"]


def test_two_workers_expire_each_held_file_once(make_sftp: Any, account: Account) -> None:
    tenant = account.tenant
    server = make_sftp()
    for name in ("one.part", "two.part", "three.part"):
        _put(server.port, account, name)
    runtime: Runtime = tenant.client.app.state.runtime  # type: ignore[attr-defined]
    hours = runtime.settings.sftp_held_hours
    later = utcnow() + timedelta(hours=hours + 1)
    start = threading.Barrier(2)
    taken: list[list[str]] = []

    def work() -> None:
        start.wait()
        with runtime.db.unit_of_work() as session:
            taken.append(list(held.expire(session, hours=hours, now=later)))

    workers = [threading.Thread(target=work) for _ in range(2)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    keys = taken[0] + taken[1]
    assert len(keys) == len(set(keys)) >= 3  # each expired once, by one of them
    for key in keys:
        runtime.store.delete(key)
