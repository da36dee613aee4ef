"""push(): any iterable in batches within the service's limits, per-batch transactions,
422 errors mapped to the caller's indexes, reruns made safe by an idempotency key."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from tests.http_server import running_server

from conftest import Recorder, Tenant, orders, server_env, stored_ids
from headwater_client import InvalidRecord, PushRejected, RateLimited, RetryPolicy

pytestmark = pytest.mark.http


def test_a_generator_is_pushed_in_batches_of_at_most_1000(
    tenant: Tenant, recorder: Recorder
) -> None:
    seen: list[int] = []
    with tenant.client(recorder) as hw:
        result = hw.push(tenant.client_id, tenant.dataset_id, orders(2500), progress=seen.append)
    assert [b.records_accepted for b in result.batches] == [1000, 1000, 500]
    assert [b.first_record for b in result.batches] == [0, 1000, 2000]
    assert result.records_accepted == 2500
    assert len(set(result.transaction_ids)) == 3
    assert seen == [1000, 2000, 2500]
    assert recorder.count("/platform/v1/data/json") == 3
    assert stored_ids(tenant) == [f"O-{n}" for n in range(2500)]
    with tenant.client() as hw:
        transaction = hw.get_transaction(result.transaction_ids[1])
    assert (transaction.status, transaction.records_accepted) == ("completed", 1000)


def test_batches_stay_under_the_body_limit(tenant: Tenant, recorder: Recorder) -> None:
    # about 20 KB a record: 5 MiB holds about 260 of them
    big = orders(600, note="x" * 20_000)
    with tenant.client(recorder) as hw:
        result = hw.push(tenant.client_id, tenant.dataset_id, big)
    sizes = [b.records_accepted for b in result.batches]
    assert sum(sizes) == 600
    assert len(sizes) == math.ceil(600 / max(sizes)) and max(sizes) < 265
    assert all(status == 200 for _, status in recorder.statuses if _ == "/platform/v1/data/json")
    assert len(stored_ids(tenant)) == 600


def test_a_rejected_batch_names_the_callers_record_indexes(tenant: Tenant) -> None:
    def records() -> Iterator[dict[str, Any]]:
        for number, record in enumerate(orders(2500)):
            if number in (1203, 1999):
                record["amount"] = "lots"
            if number == 1500:
                del record["order_id"]
            yield record

    with tenant.client() as hw, pytest.raises(PushRejected) as rejected:
        hw.push(tenant.client_id, tenant.dataset_id, records())
    error = rejected.value
    assert error.status == 422
    assert error.first_record == 1000
    assert error.error_count == 3
    assert [(e.record, e.path, e.keyword) for e in error.record_errors] == [
        (1203, "/amount", "type"),
        (1500, "/order_id", "required"),
        (1999, "/amount", "type"),
    ]
    assert [b.records_accepted for b in error.committed] == [1000]
    # the first batch is stored, the rejected one is not, the third was never sent
    assert stored_ids(tenant) == [f"O-{n}" for n in range(1000)]
    with tenant.client() as hw:
        assert error.transaction_id is not None
        assert hw.get_transaction(error.transaction_id).status == "rejected"


def test_a_validation_error_is_not_retried(tenant: Tenant, recorder: Recorder) -> None:
    with tenant.client(recorder) as hw, pytest.raises(PushRejected):
        hw.push(tenant.client_id, tenant.dataset_id, [{"order_id": "A"}])
    assert recorder.count("/platform/v1/data/json") == 1


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (["not", "an", "object"], "is a list, not a JSON object"),
        ({"order_id": "A", "amount": float("nan")}, "cannot be sent as JSON"),
        ({"order_id": "A", "amount": object()}, "cannot be sent as JSON"),
        ({"order_id": "A", "amount": 1, "note": "x" * (6 << 20)}, "a push body may hold"),
    ],
)
def test_a_record_that_cannot_be_sent_is_refused_before_sending(
    tenant: Tenant, recorder: Recorder, record: Any, reason: str
) -> None:
    with tenant.client(recorder) as hw, pytest.raises(InvalidRecord) as refused:
        hw.push(tenant.client_id, tenant.dataset_id, [{"order_id": "A", "amount": 1}, record])
    assert refused.value.index == 1
    assert reason in str(refused.value)
    assert recorder.count("/platform/v1/data/json") == 0
    assert stored_ids(tenant) == []


def test_a_rerun_with_the_same_key_stores_nothing_twice(tenant: Tenant) -> None:
    with tenant.client(max_batch_records=400) as hw:
        first = hw.push(tenant.client_id, tenant.dataset_id, orders(1000), idempotency_key="run-7")
        again = hw.push(tenant.client_id, tenant.dataset_id, orders(1000), idempotency_key="run-7")
        fresh = hw.push(tenant.client_id, tenant.dataset_id, orders(10, start=1000))
    assert [b.replayed for b in first.batches] == [False, False, False]
    assert [b.replayed for b in again.batches] == [True, True, True]
    assert again.transaction_ids == first.transaction_ids
    assert fresh.batches[0].replayed is False
    assert len(stored_ids(tenant)) == 1010


def test_an_unusable_idempotency_key_is_refused(tenant: Tenant) -> None:
    with tenant.client() as hw, pytest.raises(ValueError, match="idempotency_key"):
        hw.push(tenant.client_id, tenant.dataset_id, orders(1), idempotency_key="has space")


def test_the_async_client_pushes_an_async_iterable(tenant: Tenant) -> None:
    async def records() -> AsyncIterator[dict[str, Any]]:
        for record in orders(1500):
            yield record

    async def run() -> list[int]:
        async with tenant.async_client(max_batch_records=600) as hw:
            result = await hw.push(tenant.client_id, tenant.dataset_id, records())
            return [b.records_accepted for b in result.batches]

    assert asyncio.run(run()) == [600, 600, 300]
    assert stored_ids(tenant) == [f"O-{n}" for n in range(1500)]


def test_the_async_client_maps_a_rejection_too(tenant: Tenant) -> None:
    async def run() -> None:
        async with tenant.async_client(max_batch_records=10) as hw:
            records = list(orders(25))
            records[17]["amount"] = "lots"
            await hw.push(tenant.client_id, tenant.dataset_id, records)

    with pytest.raises(PushRejected) as rejected:
        asyncio.run(run())
    assert [e.record for e in rejected.value.record_errors] == [17]
    assert len(stored_ids(tenant)) == 10


@pytest.fixture(scope="module")
def strict_server(
    database_url: str | None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A server with tight limits: 100 records or 64 KiB a push, 5 requests/s."""
    env = server_env(
        tmp_path_factory.mktemp("strict"),
        database_url,
        HEADWATER_MAX_BATCH_RECORDS="100",
        HEADWATER_MAX_BODY_BYTES=str(64 * 1024),
        HEADWATER_RATE_LIMIT_PER_SECOND="5",
        HEADWATER_RATE_LIMIT_BURST="5",
    )
    with running_server(env) as url:
        yield url


def test_batches_shrink_to_a_server_with_lower_limits(
    strict_server: str, recorder: Recorder
) -> None:
    tenant = Tenant(strict_server)
    with tenant.client(recorder, retry=RetryPolicy(backoff_base=0.05)) as hw:
        result = hw.push(tenant.client_id, tenant.dataset_id, orders(450))
        assert result.records_accepted == 450
        assert max(b.records_accepted for b in result.batches) <= 100
        statuses = [s for p, s in recorder.statuses if p == "/platform/v1/data/json"]
        assert 413 in statuses  # the first batch of 450 was refused, then halved
        # later batches are cut to the size that passed: no 413 after the first success
        assert 413 not in statuses[statuses.index(200) :]
        stored = list(hw.stream_records(tenant.client_id, tenant.dataset_id))
    assert sorted(r.data["order_id"] for r in stored) == sorted(f"O-{n}" for n in range(450))


def test_429_is_retried_after_its_retry_after(
    strict_server: str, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headwater_client")
    tenant = Tenant(strict_server)
    with tenant.client(recorder, retry=RetryPolicy(backoff_base=0.05)) as hw:
        answers = [hw.whoami().subject for _ in range(12)]
    assert answers == [tenant.credential_id] * 12
    limited = [s for p, s in recorder.statuses if p == "/platform/v1/whoami" and s == 429]
    assert limited  # 12 calls at 5/s with bursts of 5 must have met the limit
    waits = [r.getMessage() for r in caplog.records if " 429, retry " in r.getMessage()]
    assert len(waits) == len(limited)
    assert all(float(m.rsplit(" in ", 1)[1].split()[0]) >= 1.0 for m in waits)


def test_429_raises_once_retries_are_spent(strict_server: str) -> None:
    tenant = Tenant(strict_server)
    with tenant.client(retry=RetryPolicy(max_retries=0)) as hw, pytest.raises(RateLimited) as hit:
        for _ in range(20):
            hw.whoami()
    assert hit.value.status == 429
