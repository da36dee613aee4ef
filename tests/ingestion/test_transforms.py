"""Transform steps (contract section 16), through the HTTP API on both databases: the
versions, each op, every refusal, the counts, the version a transaction keeps, the
preview, and dedupe under concurrent pushes."""

from __future__ import annotations

import hashlib
import hmac
import threading
import uuid
from typing import Any

import orjson
import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from headwater.config import Settings
from headwater.ingestion.models import CompanyHashKey
from tests.factories import create_company, database
from tests.files.conftest import CSV_HEADER, FileTenant, run_worker
from tests.ingestion.conftest import DataTenant, order, register_dataset

NESTED: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "email": {"type": "string"},
        "customer": {"type": "object"},
        "card": {"type": ["string", "integer"]},
        "note": {"type": "string"},
        "kind": {"type": "string"},
        "score": {},
    },
    "required": ["id"],
}


def put_steps(tenant: DataTenant, steps: Any, dataset_id: str = "orders", status: int = 200) -> Any:
    response = tenant.client.put(
        f"/admin/v1/clients/{tenant.client_id}/datasets/{dataset_id}/transforms",
        json={"steps": steps},
        headers=tenant.admin,
    )
    assert response.status_code == status, response.text
    return response.json()


def get_steps(tenant: DataTenant, suffix: str = "", status: int = 200) -> Any:
    response = tenant.client.get(
        f"/admin/v1/clients/{tenant.client_id}/datasets/orders/transforms{suffix}",
        headers=tenant.admin,
    )
    assert response.status_code == status, response.text
    return response.json()


def preview(tenant: DataTenant, body: dict[str, Any], status: int = 200) -> Any:
    response = tenant.client.post(
        f"/admin/v1/clients/{tenant.client_id}/datasets/orders/transforms/preview",
        json=body,
        headers=tenant.admin,
    )
    assert response.status_code == status, response.text
    return response.json()


@pytest.fixture
def nested_tenant(client: TestClient, admin: dict[str, str]) -> DataTenant:
    company = create_company(client, admin, f"T {uuid.uuid4().hex[:6]}")
    tenant = DataTenant(client, admin, company)
    register_dataset(client, admin, tenant.client_id, "people", schema=NESTED)
    return tenant


def transaction_of(tenant: DataTenant, answer: dict[str, Any]) -> Any:
    """The pushed transaction as the API reads it (the push's own answer keeps the
    contract's shape: no filtered or duplicate counts)."""
    response = tenant.client.get(
        f"/platform/v1/transactions/{answer['transaction_id']}", headers=tenant.headers
    )
    assert response.status_code == 200, response.text
    return response.json()


def push_people(tenant: DataTenant, data: Any) -> Any:
    """Push to `people`: its transaction."""
    response = tenant.push(data, dataset_id="people")
    assert response.status_code == 200, response.text
    return transaction_of(tenant, response.json())


def people(tenant: DataTenant) -> list[dict[str, Any]]:
    return tenant.records(dataset_id="people")


# --- versions ---------------------------------------------------------------------------------


def test_steps_are_versioned_and_each_change_is_in_the_activity_log(
    data_tenant: DataTenant,
) -> None:
    assert get_steps(data_tenant) == {"version": 0, "steps": [], "created_at": None}
    first = put_steps(data_tenant, [{"op": "drop", "path": "/channel"}])
    assert first["version"] == 1 and first["steps"] == [{"op": "drop", "path": "/channel"}]
    assert first["created_at"].endswith("Z")
    second = put_steps(data_tenant, [])
    assert second["version"] == 2 and second["steps"] == []
    assert get_steps(data_tenant) == second
    assert get_steps(data_tenant, "/versions/1") == first
    missing = get_steps(data_tenant, "/versions/3", status=404)
    assert missing["code"] == "transform_version_not_found"
    response = data_tenant.client.post(
        "/app/v1/activities/search",
        json={"filter": {"resource_type": "dataset_transforms"}},
        headers=data_tenant.headers,
    )
    assert response.status_code == 200, response.text
    entries = response.json()["data"]
    assert [e["action"] for e in entries] == ["update", "create"]
    assert entries[0]["before"]["version"] == 1 and entries[0]["after"]["version"] == 2


def test_steps_of_an_unknown_dataset_or_client_are_404(data_tenant: DataTenant) -> None:
    assert put_steps(data_tenant, [], dataset_id="nope", status=404)["code"] == "dataset_not_found"
    response = data_tenant.client.get(
        "/admin/v1/clients/nobody/datasets/orders/transforms", headers=data_tenant.admin
    )
    assert response.status_code == 404


def test_only_the_operator_manages_steps(data_tenant: DataTenant) -> None:
    response = data_tenant.client.put(
        f"/admin/v1/clients/{data_tenant.client_id}/datasets/orders/transforms",
        json={"steps": []},
        headers=data_tenant.headers,
    )
    assert response.status_code == 403
    assert get_steps(data_tenant)["version"] == 0


# --- refusals ---------------------------------------------------------------------------------

BAD_STEPS: list[tuple[Any, str, str]] = [
    ({"op": "explode", "path": "/a"}, "/steps/0/op", "unknown op"),
    ({"path": "/a"}, "/steps/0/op", "unknown op"),
    ("drop /a", "/steps/0", "object"),
    ({"op": "drop"}, "/steps/0/path", "required"),
    ({"op": "drop", "path": "/a", "extra": 1}, "/steps/0/extra", "unknown member"),
    ({"op": "drop", "path": "a"}, "/steps/0/path", "must start with /"),
    ({"op": "drop", "path": ""}, "/steps/0/path", "must start with /"),
    ({"op": "drop", "path": "/a~2"}, "/steps/0/path", "~ must be followed"),
    ({"op": "drop", "path": 7}, "/steps/0/path", "JSON Pointer string"),
    ({"op": "rename", "from": "/a"}, "/steps/0/to", "required"),
    ({"op": "set", "path": "/a"}, "/steps/0/value", "required"),
    ({"op": "hash", "path": "/a", "lowercase": "yes"}, "/steps/0/lowercase", "true or false"),
    ({"op": "mask", "path": "/a", "keep_last": 9}, "/steps/0/keep_last", "0 to 8"),
    ({"op": "mask", "path": "/a", "keep_last": True}, "/steps/0/keep_last", "0 to 8"),
    ({"op": "mask", "path": "/a", "char": "ab"}, "/steps/0/char", "one character"),
    ({"op": "truncate", "path": "/a", "max_length": 0}, "/steps/0/max_length", "at least 1"),
    ({"op": "truncate", "path": "/a"}, "/steps/0/max_length", "required"),
    ({"op": "filter", "path": "/a"}, "/steps/0", "one of equals or in"),
    ({"op": "filter", "path": "/a", "equals": 1, "in": [1]}, "/steps/0", "one of equals or in"),
    ({"op": "filter", "path": "/a", "in": 1}, "/steps/0/in", "array"),
    ({"op": "dedupe", "keys": []}, "/steps/0/keys", "1 to 5"),
    ({"op": "dedupe", "keys": ["/a"] * 6}, "/steps/0/keys", "1 to 5"),
    ({"op": "dedupe", "keys": ["a"]}, "/steps/0/keys/0", "must start with /"),
    ({"op": "dedupe", "keys": ["/a"], "window_hours": 721}, "/steps/0/window_hours", "1 to 720"),
    ({"op": "dedupe", "keys": ["/a"], "window_hours": 0}, "/steps/0/window_hours", "1 to 720"),
]


@pytest.mark.parametrize(("step", "field", "message"), BAD_STEPS)
def test_a_bad_step_is_refused_naming_its_index_and_member(
    data_tenant: DataTenant, step: Any, field: str, message: str
) -> None:
    problem = put_steps(data_tenant, [step], status=400)
    assert problem["code"] == "invalid_transforms"
    assert any(
        e["field"] == field and e["step"] == 0 and message in e["message"]
        for e in problem["errors"]
    ), problem["errors"]
    assert get_steps(data_tenant)["version"] == 0


def test_every_problem_is_listed_with_its_step(data_tenant: DataTenant) -> None:
    steps = [
        {"op": "drop", "path": "/ok"},
        {"op": "mask", "path": "x", "keep_last": 10},
        {"op": "dedupe", "keys": ["/a"]},
        {"op": "dedupe", "keys": ["/b"]},
    ]
    problem = put_steps(data_tenant, steps, status=400)
    found = {(e["step"], e["field"]) for e in problem["errors"]}
    assert found == {(1, "/steps/1/path"), (1, "/steps/1/keep_last"), (3, "/steps/3")}


def test_more_than_50_steps_are_refused(data_tenant: DataTenant) -> None:
    put_steps(data_tenant, [{"op": "drop", "path": "/x"}] * 50)
    problem = put_steps(data_tenant, [{"op": "drop", "path": "/x"}] * 51, status=400)
    assert "at most 50" in problem["errors"][0]["message"]
    response = data_tenant.client.put(
        f"/admin/v1/clients/{data_tenant.client_id}/datasets/orders/transforms",
        json={"steps": {"op": "drop"}},
        headers=data_tenant.admin,
    )
    assert response.status_code == 400


# --- the ops ----------------------------------------------------------------------------------


def test_rename_drop_and_set_work_on_nested_members(nested_tenant: DataTenant) -> None:
    put_steps(
        nested_tenant,
        [
            {"op": "rename", "from": "/customer/mail", "to": "/contact/email"},
            {"op": "rename", "from": "/absent", "to": "/nowhere"},
            {"op": "drop", "path": "/customer/internal"},
            {"op": "set", "path": "/customer/tier", "value": {"level": [1, 2]}},
            {"op": "set", "path": "/source", "value": "crm"},
            {"op": "rename", "from": "/note", "to": "/kind"},
        ],
        dataset_id="people",
    )
    push_people(
        nested_tenant,
        [
            {"id": "1", "customer": {"mail": "a@x.io", "internal": 1}, "note": "n", "kind": "k"},
            {"id": "2"},
        ],
    )
    first, second = (r["data"] for r in people(nested_tenant))
    assert first == {
        "id": "1",
        "customer": {"tier": {"level": [1, 2]}},
        "kind": "n",
        "contact": {"email": "a@x.io"},
        "source": "crm",
    }
    assert second == {"id": "2", "customer": {"tier": {"level": [1, 2]}}, "source": "crm"}


def test_hash_is_an_hmac_under_the_companys_key(
    nested_tenant: DataTenant, client: TestClient, admin: dict[str, str], settings: Settings
) -> None:
    put_steps(
        nested_tenant,
        [
            {"op": "hash", "path": "/email", "lowercase": True},
            {"op": "hash", "path": "/customer/id"},
            {"op": "hash", "path": "/card"},
        ],
        dataset_id="people",
    )
    push_people(
        nested_tenant, {"id": "1", "email": "Ann@X.io", "customer": {"id": "C-1"}, "card": 42}
    )
    [record] = people(nested_tenant)
    email = record["data"]["email"]
    assert len(email) == 64 and int(email, 16) >= 0
    assert record["data"]["card"] == 42  # not a string: left as it is
    # equal values hash equal in another dataset of the company ...
    register_dataset(client, admin, nested_tenant.client_id, "more", schema=NESTED)
    put_steps(nested_tenant, [{"op": "hash", "path": "/email"}], dataset_id="more")
    nested_tenant.push({"id": "2", "email": "ann@x.io"}, dataset_id="more")
    [more] = nested_tenant.records(dataset_id="more")
    assert more["data"]["email"] == email
    # ... and differently in another company
    other = DataTenant(client, admin, create_company(client, admin, f"H {uuid.uuid4().hex[:6]}"))
    register_dataset(client, admin, other.client_id, "people", schema=NESTED)
    put_steps(other, [{"op": "hash", "path": "/email"}], dataset_id="people")
    push_people(other, {"id": "3", "email": "ann@x.io"})
    assert people(other)[0]["data"]["email"] != email
    # the key is kept sealed: the stored text is not the key that hashes
    with database(settings) as db, db.read_connection() as connection:
        sealed = connection.scalar(
            select(CompanyHashKey.sealed).where(
                CompanyHashKey.company_id == uuid.UUID(nested_tenant.company_id)
            )
        )
    assert sealed is not None and sealed.startswith("v1.")
    assert hmac.new(sealed.encode(), b"ann@x.io", hashlib.sha256).hexdigest() != email


def test_mask_and_truncate_change_strings_only(nested_tenant: DataTenant) -> None:
    put_steps(
        nested_tenant,
        [
            {"op": "mask", "path": "/card"},
            {"op": "mask", "path": "/email", "keep_last": 0, "char": "#"},
            {"op": "mask", "path": "/kind", "keep_last": 8},
            {"op": "truncate", "path": "/note", "max_length": 3},
        ],
        dataset_id="people",
    )
    push_people(
        nested_tenant,
        [
            {
                "id": "1",
                "card": "4111111111111111",
                "email": "ab",
                "kind": "short",
                "note": "héllo",
            },
            {"id": "2", "card": 4111111111111111, "note": "hi"},
        ],
    )
    first, second = (r["data"] for r in people(nested_tenant))
    assert first == {
        "id": "1",
        "card": "************1111",
        "email": "##",
        "kind": "short",
        "note": "hél",
    }
    assert second == {"id": "2", "card": 4111111111111111, "note": "hi"}


def test_filter_keeps_matching_records_out_and_counts_them(nested_tenant: DataTenant) -> None:
    put_steps(
        nested_tenant,
        [
            {"op": "filter", "path": "/kind", "equals": "test"},
            {"op": "filter", "path": "/score", "in": [1, {"a": [True]}]},
        ],
        dataset_id="people",
    )
    pushed = push_people(
        nested_tenant,
        [
            {"id": "1", "kind": "test"},
            {"id": "2", "kind": "live"},
            {"id": "3", "score": 1.0},
            {"id": "4", "score": True},  # true is not 1
            {"id": "5", "score": {"a": [True]}},
            {"id": "6"},
        ],
    )
    assert (pushed["records_received"], pushed["records_accepted"]) == (6, 3)
    assert (pushed["records_filtered"], pushed["records_duplicates"]) == (3, 0)
    assert [r["data"]["id"] for r in people(nested_tenant)] == ["2", "4", "6"]
    transaction = nested_tenant.transactions(dataset_id="people")["data"][0]
    assert transaction["records_filtered"] == 3 and transaction["transform_version"] == 1
    everything = push_people(nested_tenant, [{"id": "7", "kind": "test"}])
    assert everything["status"] == "completed" and everything["records_accepted"] == 0


def test_dedupe_drops_repeats_within_a_push_and_of_stored_records(
    nested_tenant: DataTenant,
) -> None:
    put_steps(
        nested_tenant,
        [{"op": "dedupe", "keys": ["/customer/id", "/kind"]}, {"op": "drop", "path": "/kind"}],
        dataset_id="people",
    )
    first = push_people(
        nested_tenant,
        [
            {"id": "1", "customer": {"id": 1}, "kind": "a"},
            {"id": "2", "customer": {"id": 1}, "kind": "a"},  # the same keys
            {"id": "3", "customer": {"id": 1}, "kind": "b"},
            {"id": "4", "customer": {"id": 1}},  # lacks a key: not deduplicated
            {"id": "5", "customer": {"id": 1}},
        ],
    )
    assert (first["records_accepted"], first["records_duplicates"]) == (4, 1)
    second = push_people(
        nested_tenant,
        [
            {"id": "6", "customer": {"id": 1}, "kind": "b"},
            {"id": "7", "customer": {"id": 2}, "kind": "a"},
        ],
    )
    assert (second["records_accepted"], second["records_duplicates"]) == (1, 1)
    assert [r["data"]["id"] for r in people(nested_tenant)] == ["1", "3", "4", "5", "7"]
    # the key is the values at the step: a later step's change does not matter
    assert "kind" not in people(nested_tenant)[0]["data"]


def test_a_new_dedupe_step_with_other_keys_starts_afresh(nested_tenant: DataTenant) -> None:
    put_steps(nested_tenant, [{"op": "dedupe", "keys": ["/id"]}], dataset_id="people")
    push_people(nested_tenant, {"id": "1", "kind": "a"})
    put_steps(nested_tenant, [{"op": "dedupe", "keys": ["/kind"]}], dataset_id="people")
    assert push_people(nested_tenant, {"id": "1", "kind": "a"})["records_accepted"] == 1
    assert push_people(nested_tenant, {"id": "2", "kind": "a"})["records_duplicates"] == 1


def test_dedupe_counts_a_keyed_push_once_when_it_is_replayed(nested_tenant: DataTenant) -> None:
    put_steps(nested_tenant, [{"op": "dedupe", "keys": ["/id"]}], dataset_id="people")
    body = [{"id": "1"}, {"id": "1"}]
    first = nested_tenant.push(body, dataset_id="people", key="k-1").json()
    again = nested_tenant.push(body, dataset_id="people", key="k-1")
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first and first["records_accepted"] == 1
    assert transaction_of(nested_tenant, first)["records_duplicates"] == 1
    assert len(people(nested_tenant)) == 1


def test_concurrent_pushes_of_one_key_store_it_once(nested_tenant: DataTenant) -> None:
    """Two pushes of the same keys race, many times over: each key is stored once, and
    the two answers count it once as stored and once as a duplicate."""
    put_steps(nested_tenant, [{"op": "dedupe", "keys": ["/id"]}], dataset_id="people")
    rounds = 15
    answers: list[Any] = []
    lock = threading.Lock()

    def push(n: int, barrier: threading.Barrier) -> None:
        batch = [{"id": f"r{n}-{i}"} for i in range(20)]
        # a keyed push is written in a database transaction of its own, an unkeyed one
        # may share a group commit with the other: both ways, alternately
        key = f"race-{n}-{uuid.uuid4().hex}" if n % 2 else None
        barrier.wait()
        response = nested_tenant.push(batch, dataset_id="people", key=key)
        with lock:
            answers.append((response.status_code, transaction_of(nested_tenant, response.json())))

    for n in range(rounds):
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=push, args=(n, barrier)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert all(status == 200 for status, _ in answers), answers
    streamed = nested_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": nested_tenant.client_id, "dataset_id": "people"},
        headers=nested_tenant.headers | {"Accept": "application/x-ndjson"},
    )
    ids = [orjson.loads(line)["data"]["id"] for line in streamed.text.splitlines()]
    assert len(ids) == len(set(ids)) == rounds * 20
    assert sum(a["records_accepted"] for _, a in answers) == rounds * 20
    assert sum(a["records_duplicates"] for _, a in answers) == rounds * 20


# --- versions in force ------------------------------------------------------------------------


def test_records_name_the_version_whose_steps_made_them(data_tenant: DataTenant) -> None:
    assert data_tenant.push(order(1)).status_code == 200
    put_steps(data_tenant, [{"op": "set", "path": "/channel", "value": "steps"}])
    assert data_tenant.push(order(2)).status_code == 200
    before, after = data_tenant.records()
    assert (before["transform_version"], before["data"]["channel"]) == (None, "web")
    assert (after["transform_version"], after["data"]["channel"]) == (1, "steps")
    lines = data_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": data_tenant.client_id, "dataset_id": "orders"},
        headers=data_tenant.headers | {"Accept": "application/x-ndjson"},
    ).text.splitlines()
    assert ['"transform_version":1' in line for line in lines] == [False, True]


def test_a_file_keeps_the_version_in_force_when_its_transaction_began(
    client: TestClient, admin: dict[str, str], company: str
) -> None:
    tenant = FileTenant(client, admin, company)
    put_steps(tenant, [{"op": "set", "path": "/channel", "value": "v1"}])
    ticket = tenant.upload_url()
    put_steps(tenant, [{"op": "set", "path": "/channel", "value": "v2"}])
    assert (
        tenant.put(
            ticket, (CSV_HEADER + "A-1,a@x.io,1,1,true,2026-11-22T10:00:00Z\n").encode()
        ).status_code
        == 200
    )
    run_worker(client)
    done = tenant.transaction(ticket["transaction_id"])
    assert (done["status"], done["transform_version"]) == ("completed", 1)
    [record] = tenant.records()
    assert (record["data"]["channel"], record["transform_version"]) == ("v1", 1)
    later = tenant.upload(CSV_HEADER + "A-2,b@x.io,2,2,true,2026-11-22T10:00:00Z\n")
    assert later["transform_version"] == 2


def test_files_filter_and_dedupe_across_their_batches(
    client: TestClient, admin: dict[str, str], make_client: Any
) -> None:
    """Duplicates in different staged batches of one file, and of records stored before."""
    small = make_client(file_batch_rows=3)
    company = create_company(small, admin, f"F {uuid.uuid4().hex[:6]}")
    tenant = FileTenant(small, admin, company)
    put_steps(
        tenant,
        [
            {"op": "filter", "path": "/quantity", "equals": 0},
            {"op": "dedupe", "keys": ["/order_id"]},
        ],
    )
    assert tenant.push(order(1)).json()["records_accepted"] == 1
    rows = [f"A-{i % 5},c@x.io,1,{i % 4},true,2026-11-22T10:00:00Z\n" for i in range(12)]
    done = tenant.upload(CSV_HEADER + "".join(rows))
    # quantity 0 at i = 0, 4, 8; the other nine hold A-0..A-4, A-1 stored already
    assert done["records_received"] == 12
    assert done["records_filtered"] == 3
    assert done["records_accepted"] == 4
    assert done["records_duplicates"] == 5
    stored = sorted(r["data"]["order_id"] for r in tenant.records())
    assert stored == ["A-0", "A-1", "A-2", "A-3", "A-4"]


def test_a_resubmit_runs_the_steps_in_force_now(client: TestClient, admin: dict[str, str]) -> None:
    company = create_company(client, admin, f"Q {uuid.uuid4().hex[:6]}")
    tenant = FileTenant(client, admin, company, invalid_rows="quarantine")
    first = tenant.upload(
        CSV_HEADER
        + "A-1,a@x.io,1,1,true,2026-11-22T10:00:00Z\nA-2,b@x.io,x,2,true,2026-11-22T10:00:00Z\n"
    )
    assert first["records_accepted"] == 1 and first["transform_version"] is None
    put_steps(tenant, [{"op": "mask", "path": "/order_id", "keep_last": 1}])
    response = tenant.client.post(
        f"/platform/v1/transactions/{first['transaction_id']}/resubmit",
        json={"rows": [{"line": 3, "data": {"order_id": "A-2", "amount": "2"}}]},
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    assert response.json()["transform_version"] == 1
    assert sorted(r["data"]["order_id"] for r in tenant.records()) == ["**2", "A-1"]


# --- preview ----------------------------------------------------------------------------------


def test_preview_tells_each_records_fate_and_stores_nothing(data_tenant: DataTenant) -> None:
    put_steps(
        data_tenant,
        [
            {"op": "filter", "path": "/paid", "equals": False},
            {"op": "dedupe", "keys": ["/order_id"]},
        ],
    )
    assert data_tenant.push(order(1)).status_code == 200
    before = data_tenant.transactions()["total_entries"]
    result = preview(
        data_tenant,
        {
            "records": [
                order(2, quantity=3),
                order(3, paid=False),
                order(1),
                order(2),
                {"order_id": "A-9", "amount": -1},
                "not an object",
            ]
        },
    )["results"]
    assert [r["outcome"] for r in result] == [
        "stored", "filtered", "duplicate", "duplicate", "invalid", "invalid",
    ]  # fmt: skip
    assert result[0]["output"] == {"order_id": "A-2", "amount": 12, "quantity": 3, "channel": "web"}
    assert result[4]["errors"][0]["path"] == "/amount" and result[4]["output"] is None
    assert data_tenant.transactions()["total_entries"] == before
    assert len(data_tenant.records()) == 1
    tried = preview(
        data_tenant,
        {"records": [order(1)], "steps": [{"op": "mask", "path": "/order_id", "keep_last": 0}]},
    )["results"]
    assert tried == [
        {
            "outcome": "stored",
            "output": {"order_id": "***", "amount": 11, "channel": "web"},
            "errors": [],
        }
    ]
    assert (
        preview(data_tenant, {"records": [order(1)], "steps": [{"op": "x"}]}, status=400)["errors"][
            0
        ]["step"]
        == 0
    )
    assert preview(data_tenant, {"records": []}, status=400)["status"] == 400
    assert preview(data_tenant, {"records": [order(1)] * 101}, status=400)["status"] == 400


# --- the operator's CLI -----------------------------------------------------------------------


def test_cli_sets_shows_and_previews_steps(
    data_tenant: DataTenant, settings: Settings, tmp_path: Any
) -> None:
    from tests.factories import run_cli

    where = {"data_dir": settings.data_dir, "database_url": settings.database_url}
    steps = tmp_path / "steps.json"
    steps.write_text(orjson.dumps({"steps": [{"op": "hash", "path": "/order_id"}]}).decode())
    done = run_cli(
        "datasets", "transforms", "set", data_tenant.client_id, "orders", str(steps), **where
    )
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["version"] == 1
    done = run_cli("datasets", "transforms", "show", data_tenant.client_id, "orders", **where)
    assert orjson.loads(done.stdout)["steps"] == [{"op": "hash", "path": "/order_id"}]
    records = tmp_path / "records.json"
    records.write_text(orjson.dumps([order(1), {"order_id": 5}]).decode())
    done = run_cli(
        "datasets", "transforms", "preview", data_tenant.client_id, "orders", str(records), **where
    )
    assert done.returncode == 0, done.stderr
    results = orjson.loads(done.stdout)["results"]
    assert [r["outcome"] for r in results] == ["stored", "invalid"]
    # the CLI hashes with the key the service uses
    assert data_tenant.push(order(1)).status_code == 200
    assert data_tenant.records()[0]["data"] == results[0]["output"]
    steps.write_text('[{"op": "nope"}]')
    done = run_cli(
        "datasets", "transforms", "set", data_tenant.client_id, "orders", str(steps), **where
    )
    assert done.returncode == 1 and "unknown op" in done.stderr


def test_a_company_reads_its_datasets_steps_and_previews_them(
    data_tenant: DataTenant, other_data_tenant: DataTenant
) -> None:
    base = "/platform/v1/datasets/orders/transforms"
    mine = {"client_id": data_tenant.client_id}
    client, headers = data_tenant.client, data_tenant.headers
    assert client.get(base, params=mine, headers=headers).json() == {
        "version": 0, "steps": [], "created_at": None,
    }  # fmt: skip
    steps = [{"op": "filter", "path": "/paid", "equals": False}]
    put_steps(data_tenant, steps)
    read = client.get(base, params=mine, headers=headers).json()
    assert (read["version"], read["steps"]) == (1, steps)
    before = data_tenant.transactions()["total_entries"]
    body = {"records": [order(1), order(2, paid=False), {"order_id": "A-9"}]}
    tried = client.post(f"{base}/preview", params=mine, json=body, headers=headers)
    assert tried.status_code == 200, tried.text
    assert [r["outcome"] for r in tried.json()["results"]] == ["stored", "filtered", "invalid"]
    assert data_tenant.transactions()["total_entries"] == before  # nothing stored
    # the steps are the operator's to try: a company previews the current ones only
    with_steps = client.post(
        f"{base}/preview", params=mine, json=body | {"steps": []}, headers=headers
    )
    assert with_steps.status_code == 400
    for bad in ({"records": []}, {"records": [{}] * 101}, {}):
        assert (
            client.post(f"{base}/preview", params=mine, json=bad, headers=headers).status_code
            == 400
        )
    theirs = other_data_tenant.headers
    assert client.get(base, params=mine, headers=theirs).status_code == 403
    assert client.post(f"{base}/preview", params=mine, json=body, headers=theirs).status_code == 403
    missing = {"client_id": data_tenant.client_id}
    gone = client.get("/platform/v1/datasets/nope/transforms", params=missing, headers=headers)
    assert gone.status_code == 404
