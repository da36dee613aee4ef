"""The quarantine policy: valid rows stored, invalid rows kept, listed and re-submitted."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from headwater.files import service
from tests.factories import database
from tests.files.conftest import FileTenant, run_worker
from tests.ingestion.conftest import SCHEMA

BODY = (
    "order_id,amount,quantity\n"
    "A-1,1,1\n"
    "A-2,x,2\n"  # amount not a number
    "A-3,3,3.5\n"  # quantity not an integer
    "A-4,4\n"  # ragged
    "A-5,5,5\n"
)
# the schema with `quantity` any number: rows quarantined for a fraction now pass
LOOSE = {**SCHEMA, "properties": {**SCHEMA["properties"], "quantity": {"type": "number"}}}


def quarantine(tenant: FileTenant, transaction_id: str, **params: Any) -> Any:
    response = tenant.client.get(
        f"/platform/v1/transactions/{transaction_id}/quarantine",
        params=params,
        headers=tenant.headers,
    )
    assert response.status_code == 200, response.text
    return response.json()


def resubmit(tenant: FileTenant, transaction_id: str, status: int = 201) -> Any:
    response = tenant.client.post(
        f"/platform/v1/transactions/{transaction_id}/resubmit", headers=tenant.headers
    )
    assert response.status_code == status, response.text
    return response.json()


def test_valid_rows_are_stored_and_invalid_ones_kept(quarantine_tenant: FileTenant) -> None:
    transaction = quarantine_tenant.upload(BODY)
    assert transaction["status"] == "completed"
    assert transaction["records_received"] == 5
    assert transaction["records_accepted"] == 2
    assert transaction["records_rejected"] == 3
    assert [r["data"]["order_id"] for r in quarantine_tenant.records()] == ["A-1", "A-5"]
    held = quarantine(quarantine_tenant, transaction["transaction_id"])
    assert held["total_entries"] == 3
    rows = held["data"]
    assert [(r["line"], r["record"]) for r in rows] == [(3, 1), (4, 2), (5, 3)]
    assert rows[0]["data"] == {"order_id": "A-2", "amount": "x", "quantity": "2"}
    assert rows[0]["errors"][0]["path"] == "/amount"
    assert rows[2]["data"] is None and rows[2]["raw"] == '["A-4","4"]'
    assert rows[2]["errors"][0]["keyword"] == "columns"
    assert all(r["resolved_by"] is None for r in rows)


def test_resubmission_after_a_schema_change_stores_what_now_passes(
    quarantine_tenant: FileTenant,
) -> None:
    first = quarantine_tenant.upload(BODY)["transaction_id"]
    quarantine_tenant.add_schema_version(LOOSE)
    second = resubmit(quarantine_tenant, first)
    assert second["transaction_id"] != first
    assert second["kind"] == "file"
    assert second["status"] == "completed"
    assert second["schema_version"] == 2
    assert second["file_name"] == "orders.csv"
    assert (second["records_received"], second["records_accepted"]) == (3, 1)
    assert second["records_rejected"] == 2
    stored = quarantine_tenant.records(transaction_id=second["transaction_id"])
    assert [(r["data"]["order_id"], r["data"]["quantity"]) for r in stored] == [("A-3", 3.5)]
    # the rows that still fail now belong to the new transaction
    assert quarantine(quarantine_tenant, first)["total_entries"] == 0
    resolved = quarantine(quarantine_tenant, first, status="resolved")["data"]
    assert [r["record"] for r in resolved] == [2]
    assert resolved[0]["resolved_by"] == second["transaction_id"]
    still = quarantine(quarantine_tenant, second["transaction_id"])["data"]
    assert [r["record"] for r in still] == [1, 3]
    # nothing open is left on the first; a second re-submission has nothing to do
    problem = resubmit(quarantine_tenant, first, status=409)
    assert problem["code"] == "nothing_to_resubmit"


def test_quarantine_reads_are_tenant_scoped(
    quarantine_tenant: FileTenant, other_file_tenant: FileTenant
) -> None:
    transaction_id = quarantine_tenant.upload(BODY)["transaction_id"]
    other = other_file_tenant.client.get(
        f"/platform/v1/transactions/{transaction_id}/quarantine", headers=other_file_tenant.headers
    )
    missing = other_file_tenant.client.get(
        "/platform/v1/transactions/00000000-0000-0000-0000-000000000000/quarantine",
        headers=other_file_tenant.headers,
    )
    assert other.status_code == missing.status_code == 404
    assert other.json()["detail"].replace(transaction_id, "X") == missing.json()["detail"].replace(
        "00000000-0000-0000-0000-000000000000", "X"
    )
    resubmit(other_file_tenant, transaction_id, status=404)
    assert quarantine(quarantine_tenant, transaction_id)["total_entries"] == 3


def test_json_transactions_have_no_quarantine(quarantine_tenant: FileTenant) -> None:
    pushed = quarantine_tenant.push({"order_id": "P-1", "amount": 1}).json()
    response = quarantine_tenant.client.get(
        f"/platform/v1/transactions/{pushed['transaction_id']}/quarantine",
        headers=quarantine_tenant.headers,
    )
    assert response.status_code == 404
    resubmit(quarantine_tenant, pushed["transaction_id"], status=404)


def test_quarantine_query_is_checked(quarantine_tenant: FileTenant) -> None:
    transaction_id = quarantine_tenant.upload(BODY)["transaction_id"]
    for params in ({"status": "bogus"}, {"page": "-1"}, {"extra": "1"}):
        response = quarantine_tenant.client.get(
            f"/platform/v1/transactions/{transaction_id}/quarantine",
            params=params,
            headers=quarantine_tenant.headers,
        )
        assert response.status_code == 400, params
    bad_id = quarantine_tenant.client.get(
        "/platform/v1/transactions/not-a-uuid/quarantine", headers=quarantine_tenant.headers
    )
    assert bad_id.status_code == 400


def test_uploads_that_never_come_expire(file_tenant: FileTenant) -> None:
    run_worker(file_tenant.client)  # an empty queue to start from
    ticket = file_tenant.upload_url()
    runtime = file_tenant.client.app.state.runtime  # type: ignore[attr-defined]
    # other tests' uploads share the database: what counts is that this one is untouched
    service.expire_uploads(runtime.db, grace=timedelta(seconds=0))
    assert file_tenant.transaction(ticket["transaction_id"])["status"] == "awaiting_upload"
    assert service.expire_uploads(runtime.db, grace=timedelta(seconds=-3600)) >= 1
    transaction = file_tenant.transaction(ticket["transaction_id"])
    assert transaction["status"] == "expired"
    assert transaction["completed_at"] is not None
    # the URL is dead now, even though its signature has not run out
    response = file_tenant.put(ticket, b"order_id,amount\nA,1\n")
    assert response.status_code == 403
    assert run_worker(file_tenant.client) == 0


def test_record_totals_follow_every_way_records_are_stored(
    quarantine_tenant: FileTenant, settings: Any
) -> None:
    """An unfiltered records page answers its total from the dataset's kept count; it
    must equal the rows, however they came: batches, single records, a refused push
    (nothing), a file with quarantined rows, and a re-submission."""
    import threading

    from sqlalchemy import text

    tenant = quarantine_tenant

    def total() -> int:
        response = tenant.client.get(
            "/platform/v1/data",
            params={"client_id": tenant.client_id, "dataset_id": "orders", "page_size": 1},
            headers=tenant.headers,
        )
        assert response.status_code == 200, response.text
        return int(response.json()["total_entries"])

    assert total() == 0
    assert tenant.push([{"order_id": f"B-{i}", "amount": i} for i in range(30)]).status_code == 200
    assert tenant.push({"order_id": "S-1", "amount": 1}).status_code == 200
    assert tenant.push([{"order_id": "X", "amount": "no"}]).status_code == 422
    assert total() == 31
    uploaded = tenant.upload(BODY)["transaction_id"]  # 2 rows stored, 3 quarantined
    assert total() == 33

    def pushes(n: int) -> None:
        for b in range(5):
            data = [{"order_id": f"T{n}-{b}-{i}", "amount": i} for i in range(7)]
            assert tenant.push(data).status_code == 200

    threads = [threading.Thread(target=pushes, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert total() == 33 + 4 * 5 * 7
    resubmit(tenant, uploaded, status=201)  # the rows still fail: nothing more stored
    assert total() == 33 + 140

    with database(settings) as db, db.unit_of_work() as session:
        counted = session.execute(
            text(
                "SELECT count(*) FROM records r JOIN datasets d ON d.id = r.dataset_pk "
                "WHERE d.client_id = :c"
            ),
            {"c": tenant.client_id},
        ).scalar()
    assert counted == total()


def test_resubmissions_at_once_store_each_row_once(quarantine_tenant: FileTenant) -> None:
    """Four resubmissions of one transaction at once: one takes its open rows, the others
    find none left (409), and every row is stored once."""
    rows = 300
    body = "order_id,amount,quantity\n" + "".join(f"Q-{n},1,1.5\n" for n in range(rows))
    first = quarantine_tenant.upload(body)["transaction_id"]
    quarantine_tenant.add_schema_version(LOOSE)
    start = threading.Barrier(4)
    answers: list[int] = []

    def submit() -> None:
        start.wait()
        answers.append(
            quarantine_tenant.client.post(
                f"/platform/v1/transactions/{first}/resubmit", headers=quarantine_tenant.headers
            ).status_code
        )

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [201, 409, 409, 409]
    page = quarantine_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": quarantine_tenant.client_id, "dataset_id": "orders"},
        headers=quarantine_tenant.headers,
    ).json()
    assert page["total_entries"] == rows  # none twice


def correct(tenant: FileTenant, transaction_id: str, body: Any, status: int = 201) -> Any:
    response = tenant.client.post(
        f"/platform/v1/transactions/{transaction_id}/resubmit", json=body, headers=tenant.headers
    )
    assert response.status_code == status, response.text
    return response.json()


def test_corrected_rows_are_checked_and_stored_in_a_transaction_linked_to_the_old(
    quarantine_tenant: FileTenant,
) -> None:
    first = quarantine_tenant.upload(BODY)["transaction_id"]
    assert quarantine_tenant.transaction(first)["resubmit_of"] is None
    fixed = correct(
        quarantine_tenant,
        first,
        {
            "rows": [
                {"line": 3, "data": {"order_id": "A-2", "amount": " 2 ", "quantity": "2"}},
                {"line": 5, "data": {"order_id": "A-4", "amount": "4", "quantity": "x"}},
            ]
        },
    )
    assert fixed["resubmit_of"] == first and fixed["status"] == "completed"
    assert (fixed["records_received"], fixed["records_accepted"]) == (2, 1)
    assert fixed["records_rejected"] == 1
    assert quarantine_tenant.transaction(fixed["transaction_id"]) == fixed
    # normalised and validated as a push's record is
    stored = quarantine_tenant.records(transaction_id=fixed["transaction_id"])
    expected = {"order_id": "A-2", "amount": 2, "quantity": 2, "channel": "web"}  # a default
    assert [r["data"] for r in stored] == [expected]
    # the correction that still fails moved to the new transaction, as corrected
    (still,) = quarantine(quarantine_tenant, fixed["transaction_id"])["data"]
    assert still["line"] == 5 and still["raw"] is None
    assert still["data"] == {"order_id": "A-4", "amount": "4", "quantity": "x"}
    assert still["errors"][0]["path"] == "/quantity"
    # the row nobody corrected stays open on the first transaction
    assert [r["line"] for r in quarantine(quarantine_tenant, first)["data"]] == [4]


def test_a_correction_of_a_line_not_quarantined_refuses_them_all(
    quarantine_tenant: FileTenant,
) -> None:
    first = quarantine_tenant.upload(BODY)["transaction_id"]
    good = {"line": 3, "data": {"order_id": "A-2", "amount": 2, "quantity": 2}}
    for line in (2, 99):  # a stored row's line; no row's
        problem = correct(
            quarantine_tenant,
            first,
            {"rows": [good, {"line": line, "data": {"order_id": "Z"}}]},
            status=400,
        )
        assert problem["code"] == "not_quarantined"
        assert f"[{line}]" in problem["detail"]
    for body, member in (
        ({"rows": []}, "rows"),
        ({"rows": [good, good]}, "more than once"),
        ({"rows": [{"line": 0, "data": {}}]}, "line"),
        ({"rows": [{"line": "3", "data": {}}]}, "line"),
        ({"rows": [{"line": 3, "data": [1]}]}, "data"),
        ({"rows": [{"line": 3, "data": {"a\u0000": 1}}]}, "U+0000"),
        ({"rows": [good], "other": 1}, "other"),
    ):
        problem = correct(quarantine_tenant, first, body, status=400)
        assert member in str(problem), (body, problem)
    # nothing was resubmitted: every row is still open on the first transaction
    assert [r["line"] for r in quarantine(quarantine_tenant, first)["data"]] == [3, 4, 5]
    assert quarantine_tenant.records(transaction_id=first) != []
    assert len(quarantine_tenant.transactions()["data"]) == 1
