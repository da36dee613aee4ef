"""A dataset's transform steps through the client, with an operator's credential: set,
read, a version, a preview; and the counts they add to a push's transaction."""

from __future__ import annotations

import asyncio

import pytest

from conftest import FAST, OPERATOR_ID, OPERATOR_SECRET, Tenant
from headwater_client import AsyncClient, Client, InvalidRequest, NotFound

pytestmark = pytest.mark.http

STEPS = [
    {"op": "filter", "path": "/channel", "equals": "test"},
    {"op": "dedupe", "keys": ["/order_id"]},
]


def test_steps_are_set_read_and_previewed(tenant: Tenant) -> None:
    with Client(tenant.url, OPERATOR_ID, OPERATOR_SECRET, retry=FAST) as operator:
        assert operator.get_transforms("orders", client_id=tenant.client_id).version == 0
        made = operator.set_transforms("orders", STEPS, client_id=tenant.client_id)
        assert (made.version, made.steps) == (1, STEPS) and made.created_at is not None
        again = operator.get_transform_version("orders", 1, client_id=tenant.client_id)
        assert again.steps == STEPS
        with pytest.raises(NotFound):
            operator.get_transform_version("orders", 2, client_id=tenant.client_id)
        with pytest.raises(InvalidRequest) as refused:
            operator.set_transforms("orders", [{"op": "nope"}], client_id=tenant.client_id)
        assert "unknown op" in str(refused.value)
        preview = operator.preview_transforms(
            "orders",
            [
                {"order_id": "A", "amount": 1},
                {"order_id": "A", "amount": 2},
                {"order_id": "B", "amount": 1, "channel": "test"},
            ],
            client_id=tenant.client_id,
        )
        assert [r.outcome for r in preview.results] == ["stored", "duplicate", "filtered"]
    with tenant.client() as client:
        result = client.push(
            tenant.client_id,
            "orders",
            [{"order_id": "A", "amount": 1}, {"order_id": "A", "amount": 2}],
        )
        transaction = client.get_transaction(result.transaction_ids[0])
        assert (transaction.records_accepted, transaction.records_duplicates) == (1, 1)
        assert transaction.records_filtered == 0 and transaction.transform_version == 1
        [record] = list(client.list_records(client_id=tenant.client_id, dataset_id="orders"))
        assert record.transform_version == 1


def test_the_async_client_reads_steps(tenant: Tenant) -> None:
    async def run() -> int:
        async with AsyncClient(tenant.url, OPERATOR_ID, OPERATOR_SECRET, retry=FAST) as operator:
            await operator.set_transforms("orders", [], client_id=tenant.client_id)
            return (await operator.get_transforms("orders", client_id=tenant.client_id)).version

    assert asyncio.run(run()) == 1
