"""Transactions and records reads (contract section 4): filters, paging, NDJSON, isolation."""

from __future__ import annotations

import json
import time
import tracemalloc
import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.db import Database
from headwater.identity.tokens import Principal
from headwater.ingestion import records
from headwater.ingestion.schemas import RecordQuery
from tests.factories import assert_problem, auth, create_credential, database, get_token
from tests.ingestion.conftest import DataTenant, order


def test_transaction_details(data_tenant: DataTenant) -> None:
    pushed = data_tenant.push([order(1), order(2)]).json()
    response = data_tenant.client.get(
        f"/platform/v1/transactions/{pushed['transaction_id']}", headers=data_tenant.headers
    )
    assert response.status_code == 200
    body = response.json()
    assert body == {
        "transaction_id": pushed["transaction_id"],
        "kind": "json",
        "channel": "api",
        "client_id": data_tenant.client_id,
        "dataset_id": "orders",
        "schema_version": 1,
        "status": "completed",
        "records_received": 2,
        "records_processed": 2,
        "records_accepted": 2,
        "records_rejected": 0,
        "records_filtered": 0,
        "records_duplicates": 0,
        "records_suppressed": 0,
        "file_erased": False,
        "transform_version": None,
        "error_count": 0,
        "errors": [],
        "file_name": None,
        "file_size": None,
        "content_type": None,
        "created_at": pushed["received_at"],
        "uploaded_at": None,
        "started_at": None,
        "completed_at": body["completed_at"],
        "resubmit_of": None,
    }
    assert body["completed_at"] >= body["created_at"]


def test_transactions_of_other_companies_are_404(
    data_tenant: DataTenant, other_data_tenant: DataTenant
) -> None:
    theirs = other_data_tenant.push(order(1)).json()["transaction_id"]
    for transaction_id in (theirs, str(uuid.uuid4())):
        response = data_tenant.client.get(
            f"/platform/v1/transactions/{transaction_id}", headers=data_tenant.headers
        )
        problem = assert_problem(response, 404, "transaction_not_found")
        assert transaction_id in problem["detail"]
    assert_problem(
        data_tenant.client.get("/platform/v1/transactions/not-a-uuid", headers=data_tenant.headers),
        400,
    )
    assert data_tenant.transactions()["total_entries"] == 0


def test_transaction_filters(data_tenant: DataTenant) -> None:
    first = data_tenant.push(order(1)).json()
    time.sleep(0.01)
    rejected = data_tenant.push({"amount": "x"}).json()
    time.sleep(0.01)
    third = data_tenant.push(order(3)).json()
    ids = lambda page: [t["transaction_id"] for t in page["data"]]  # noqa: E731
    assert ids(data_tenant.transactions()) == [
        third["transaction_id"],
        rejected["transaction_id"],
        first["transaction_id"],
    ]
    assert ids(data_tenant.transactions(status="rejected")) == [rejected["transaction_id"]]
    assert ids(data_tenant.transactions(created_after=third["received_at"])) == [
        third["transaction_id"]
    ]
    assert ids(data_tenant.transactions(created_before=third["received_at"])) == [
        rejected["transaction_id"],
        first["transaction_id"],
    ]
    assert ids(
        data_tenant.transactions(
            client_id=data_tenant.client_id, dataset_id="orders", page_size=1, page=2
        )
    ) == [first["transaction_id"]]
    assert data_tenant.transactions(dataset_id="other")["total_entries"] == 0


@pytest.mark.parametrize(
    "params",
    [
        {"status": "done"},
        {"created_after": "yesterday"},
        {"created_after": "2026-01-01T00:00:00"},
        {"page_size": 101},
        {"page": -1},
        {"sort": "x"},
        {"client_id": "bad id"},
    ],
)
def test_bad_transaction_filters_400(data_tenant: DataTenant, params: dict[str, Any]) -> None:
    response = data_tenant.client.get(
        "/platform/v1/transactions", params=params, headers=data_tenant.headers
    )
    assert_problem(response, 400)


def test_transactions_naming_a_client_not_held_403(
    data_tenant: DataTenant, other_data_tenant: DataTenant
) -> None:
    response = data_tenant.client.get(
        "/platform/v1/transactions",
        params={"client_id": other_data_tenant.client_id},
        headers=data_tenant.headers,
    )
    assert_problem(response, 403, "client_not_allowed")


def test_records_filters_and_paging(data_tenant: DataTenant) -> None:
    first = data_tenant.push([order(i) for i in range(5)]).json()
    time.sleep(0.01)
    second = data_tenant.push([order(i) for i in range(5, 8)]).json()
    page = data_tenant.client.get(
        "/platform/v1/data",
        params={
            "client_id": data_tenant.client_id,
            "dataset_id": "orders",
            "page_size": 3,
            "page": 2,
        },
        headers=data_tenant.headers,
    ).json()
    assert (page["total_entries"], page["total_pages"], page["page_number"]) == (8, 3, 2)
    assert [r["data"]["order_id"] for r in page["data"]] == ["A-6", "A-7"]
    by_txn = data_tenant.records(transaction_id=second["transaction_id"])
    assert [r["data"]["order_id"] for r in by_txn] == ["A-5", "A-6", "A-7"]
    assert all(r["schema_version"] == 1 for r in by_txn)
    assert len(data_tenant.records(ingested_after=second["received_at"])) == 3
    assert len(data_tenant.records(ingested_before=second["received_at"])) == 5
    assert data_tenant.records(ingested_before=first["received_at"]) == []
    record = by_txn[0]
    assert set(record) == {
        "record_id", "transaction_id", "schema_version", "transform_version", "ingested_at", "data"
    }  # fmt: skip
    uuid.UUID(record["record_id"])


@pytest.mark.parametrize(
    "params",
    [
        {"dataset_id": "orders"},
        {"client_id": "C"},
        {"client_id": "C", "dataset_id": "orders", "transaction_id": "nope"},
        {"client_id": "C", "dataset_id": "orders", "ingested_after": "soon"},
        {"client_id": "C", "dataset_id": "orders", "page_size": 0},
        {"client_id": "C", "dataset_id": "orders", "color": "red"},
    ],
)
def test_bad_record_queries_400(data_tenant: DataTenant, params: dict[str, Any]) -> None:
    if params.get("client_id") == "C":
        params["client_id"] = data_tenant.client_id
    response = data_tenant.client.get(
        "/platform/v1/data", params=params, headers=data_tenant.headers
    )
    assert_problem(response, 400)


def test_records_of_clients_not_held_403_unknown_dataset_404(
    data_tenant: DataTenant, other_data_tenant: DataTenant
) -> None:
    other_data_tenant.push(order(1))
    for accept in ("application/json", "application/x-ndjson"):
        headers = data_tenant.headers | {"Accept": accept}
        response = data_tenant.client.get(
            "/platform/v1/data",
            params={"client_id": other_data_tenant.client_id, "dataset_id": "orders"},
            headers=headers,
        )
        assert_problem(response, 403, "client_not_allowed")
        response = data_tenant.client.get(
            "/platform/v1/data",
            params={"client_id": data_tenant.client_id, "dataset_id": "nope"},
            headers=headers,
        )
        assert_problem(response, 404, "dataset_not_found")


def test_data_read_scope_needed(
    client: TestClient, admin: dict[str, str], company: str, data_tenant: DataTenant
) -> None:
    writer = create_credential(client, admin, company, scopes=["data:write"])
    headers = auth(get_token(client, writer["client_id"], writer["client_secret"]))
    for path in ("/platform/v1/transactions", "/platform/v1/datasets"):
        assert_problem(client.get(path, headers=headers), 403, "insufficient_scope")


def test_ndjson_streams_every_match(data_tenant: DataTenant) -> None:
    for start in range(0, 2500, 1000):
        data_tenant.push([order(i) for i in range(start, min(start + 1000, 2500))])
    with data_tenant.client.stream(
        "GET",
        "/platform/v1/data",
        params={"client_id": data_tenant.client_id, "dataset_id": "orders", "page_size": 5},
        headers=data_tenant.headers | {"Accept": "application/x-ndjson"},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert [r["data"]["order_id"] for r in lines] == [f"A-{i}" for i in range(2500)]
    assert len({r["record_id"] for r in lines}) == 2500


def _stream_peak(db: Database, caller: Principal, query: RecordQuery) -> tuple[int, int, int]:
    streamed = lines = 0
    tracemalloc.start()
    try:
        for chunk in records.stream_records(db, caller, query):
            streamed += len(chunk)
            lines += chunk.count(b"\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return lines, streamed, peak


def test_ndjson_memory_does_not_grow_with_the_result(
    data_tenant: DataTenant, settings: Settings
) -> None:
    """The service's stream, measured in-process (the test client buffers whole answers):
    streaming 12,000 records peaks no higher than streaming 3,000."""
    padding = "p" * 2000
    received = []
    for start in range(0, 12_000, 1000):
        response = data_tenant.push(
            [order(i, order_id=f"{i}-{padding}") for i in range(start, start + 1000)]
        )
        assert response.status_code == 200
        received.append(response.json()["received_at"])
        time.sleep(0.002)
    caller = Principal(
        subject=data_tenant.credential["client_id"],
        author_id=uuid.UUID(data_tenant.credential["author_id"]),
        company_id=uuid.UUID(data_tenant.company_id),
        client_ids=(),
        scopes=frozenset({"data:read"}),
    )
    everything = RecordQuery(client_id=data_tenant.client_id, dataset_id="orders")
    quarter = RecordQuery(
        client_id=data_tenant.client_id, dataset_id="orders", ingested_before=received[3]
    )
    with database(settings) as db:
        _stream_peak(db, caller, quarter)  # warm caches and the pool
        small = _stream_peak(db, caller, quarter)
        large = _stream_peak(db, caller, everything)
    assert (small[0], large[0]) == (3000, 12_000)
    assert large[1] > 24_000_000
    assert large[2] < small[2] * 1.25, (small, large)


def test_records_filter_by_field_values(
    client: TestClient, admin: dict[str, str], company: str
) -> None:
    tenant = DataTenant(client, admin, company)
    tenant.push(
        [
            order(1, **{"customer-email": "ann@example.com"}, paid=True, quantity=2),
            order(2, **{"customer-email": "bob@example.com"}, paid=False, quantity=2),
            order(3, **{"customer-email": "ann@example.com"}, paid=False, amount=4.5),
            order(4, order_id="2", quantity=3),
        ]
    )

    def ids(**fields: Any) -> list[str]:
        found = tenant.records(filter=json.dumps(fields))
        return [r["data"]["order_id"] for r in found]

    assert ids(**{"customer-email": "ann@example.com"}) == ["A-1", "A-3"]
    assert ids(**{"customer-email": "ann@example.com", "paid": False}) == ["A-3"]
    assert ids(paid=True) == ["A-1"]
    assert ids(quantity=2) == ["A-1", "A-2"]
    assert ids(amount=4.5) == ["A-3"]
    assert ids(order_id="2") == ["2"]
    assert ids(quantity="2") == []  # a string never equals a number
    assert ids(order_id=2) == []
    assert ids(channel="web") == ["A-1", "A-2", "A-3", "2"]  # the default was stored
    assert ids(**{"no-such_field": "x"}) == []


@pytest.mark.parametrize(
    "value", ["not json", "[1]", "{}", '{"a": {"b": 1}}', '{"a": null}', '{"a": 1, "a": 2}']
)
def test_bad_record_filters_400(data_tenant: DataTenant, value: str) -> None:
    response = data_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": data_tenant.client_id, "dataset_id": "orders", "filter": value},
        headers=data_tenant.headers,
    )
    problem = assert_problem(response, 400)
    assert "filter" in problem["detail"]


def test_transactions_name_their_channel_and_filter_by_it(data_tenant: DataTenant) -> None:
    pushed = data_tenant.push([order(1)])
    assert pushed.status_code == 200, pushed.text
    ticket = data_tenant.client.get(
        "/platform/v1/data/file_upload_url",
        params={
            "client_id": data_tenant.client_id,
            "dataset_id": "orders",
            "file_name": "o.csv",
            "content_type": "text/csv",
        },
        headers=data_tenant.headers,
    ).json()

    def listed(**params: str) -> list[tuple[str, str]]:
        page = data_tenant.client.get(
            "/platform/v1/transactions", params=params, headers=data_tenant.headers
        ).json()
        return [(t["transaction_id"], t["channel"]) for t in page["data"]]

    everything = listed()
    assert (pushed.json()["transaction_id"], "api") in everything
    assert (ticket["transaction_id"], "upload") in everything
    assert listed(channel="upload") == [(ticket["transaction_id"], "upload")]
    assert listed(channel="api") == [(pushed.json()["transaction_id"], "api")]
    assert listed(channel="sftp") == []
    bad = data_tenant.client.get(
        "/platform/v1/transactions", params={"channel": "fax"}, headers=data_tenant.headers
    )
    assert bad.status_code == 400
