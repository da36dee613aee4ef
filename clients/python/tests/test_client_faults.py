"""Network faults between the client and a real server, injected by a TCP proxy: a push
whose answer is lost is retried with the same Idempotency-Key and stored once; a 503 is
retried after its Retry-After; an upload whose answer is lost is not reported failed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from faulty_proxy import FaultyProxy
from tests.http_server import running_server

from conftest import Recorder, Tenant, orders, server_env, stored_ids
from headwater_client import ConnectionFailed, RetryPolicy

pytestmark = pytest.mark.http

PUSH = b"POST /platform/v1/data/json"


@pytest.fixture(scope="module")
def proxy(
    database_url: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FaultyProxy]:
    """A server reached only through the proxy: its public URL (token issuer, upload
    URLs) is the proxy's."""
    faulty = FaultyProxy()
    env = server_env(
        tmp_path_factory.mktemp("proxied"), database_url, HEADWATER_PUBLIC_URL=faulty.url
    )
    with running_server(env) as url:
        faulty.upstream = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        yield faulty
    faulty.close()


@pytest.fixture
def proxied(proxy: FaultyProxy) -> Iterator[Tenant]:
    proxy.faults.clear()
    proxy.injected.clear()
    yield Tenant(proxy.url)


def test_a_push_whose_answer_is_lost_is_stored_exactly_once(
    proxied: Tenant, proxy: FaultyProxy, recorder: Recorder
) -> None:
    with proxied.client(recorder, max_batch_records=100) as hw:
        hw.token()
        # the answers to the first batch's first two tries are lost
        proxy.inject("drop_answer", PUSH, times=2)
        result = hw.push(proxied.client_id, proxied.dataset_id, orders(250))
    assert proxy.injected == ["drop_answer", "drop_answer"]
    assert recorder.count("/platform/v1/data/json") == 5  # 3 batches, the first 3 times
    assert [b.records_accepted for b in result.batches] == [100, 100, 50]
    assert [b.replayed for b in result.batches] == [True, False, False]
    assert len(set(result.transaction_ids)) == 3
    assert sorted(stored_ids(proxied)) == sorted(f"O-{n}" for n in range(250))


def test_a_503_is_retried_after_its_retry_after(
    proxied: Tenant, proxy: FaultyProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headwater_client")
    with proxied.client() as hw:
        hw.token()
        proxy.inject("answer_503", PUSH, times=2)
        result = hw.push(proxied.client_id, proxied.dataset_id, orders(3))
    assert proxy.injected == ["answer_503", "answer_503"]
    assert result.records_accepted == 3
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 2
    assert all(" 503, retry " in message for message in retries)
    # Retry-After: 1 is honoured: the waits logged are at least a second each
    assert all(float(m.rsplit(" in ", 1)[1].split()[0]) >= 1.0 for m in retries)
    assert sorted(stored_ids(proxied)) == ["O-0", "O-1", "O-2"]


def test_retries_give_up_after_the_policy_allows(proxied: Tenant, proxy: FaultyProxy) -> None:
    policy = RetryPolicy(max_retries=2, backoff_base=0.01)
    with proxied.client(retry=policy) as hw:
        hw.token()
        proxy.inject("drop_answer", PUSH, times=3)
        with pytest.raises(ConnectionFailed) as failed:
            hw.push(proxied.client_id, proxied.dataset_id, orders(2))
    assert "POST /platform/v1/data/json" in str(failed.value)
    assert proxy.injected == ["drop_answer"] * 3
    # every try reached the server; the first stored, the others were answered from it
    assert stored_ids(proxied) == ["O-0", "O-1"]


def test_an_upload_whose_answer_is_lost_still_succeeds(
    proxied: Tenant, proxy: FaultyProxy, tmp_path: Path
) -> None:
    path = tmp_path / "orders.csv"
    path.write_text("order_id,amount\nA-1,1.5\nA-2,2.5\n")
    with proxied.client() as hw:
        hw.token()
        proxy.inject("drop_answer", b"PUT /uploads/")
        transaction = hw.upload_file(path, proxied.client_id, proxied.dataset_id, wait=True)
    assert proxy.injected == ["drop_answer"]
    assert transaction.status == "completed"
    assert transaction.records_accepted == 2
    assert sorted(stored_ids(proxied)) == ["A-1", "A-2"]
