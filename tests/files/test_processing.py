"""Processing an uploaded file: parsers, normalisation, validation, policies, bad input."""

from __future__ import annotations

import gzip
from typing import Any

import orjson
import pytest

from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows

NDJSON = "application/x-ndjson"
JSON = "application/json"


def assert_nothing_stored(tenant: FileTenant, transaction: dict[str, Any]) -> None:
    assert transaction["records_accepted"] == 0
    assert tenant.records(transaction_id=transaction["transaction_id"]) == []


def test_csv_rows_are_coerced_normalised_and_stored_in_order(file_tenant: FileTenant) -> None:
    body = (
        "\ufefforder_id,customer-email,amount,quantity,paid,placed_at,channel\r\n"
        '  A-1 ,a@example.com,"1,5",3,true,2026-11-22T10:00:00+01:00,\r\n'
        'A-2,b@example.com,2.25,,false,2026-11-22T09:00:00Z,"shop, north\r\nside"\r\n'
    ).replace('"1,5"', "1.5")
    transaction = file_tenant.upload(body)
    assert transaction["status"] == "completed", transaction["errors"]
    assert transaction["records_received"] == transaction["records_accepted"] == 2
    records = [r["data"] for r in file_tenant.records()]
    assert records[0] == {
        "order_id": "A-1",
        "customer-email": "a@example.com",
        "amount": 1.5,
        "quantity": 3,
        "paid": True,
        "placed_at": "2026-11-22T09:00:00.000Z",
        "channel": "",
    }
    assert records[1] == {
        "order_id": "A-2",
        "customer-email": "b@example.com",
        "amount": 2.25,
        "paid": False,
        "placed_at": "2026-11-22T09:00:00.000Z",
        "channel": "shop, north\r\nside",
    }


def test_json_array_object_and_ndjson(file_tenant: FileTenant) -> None:
    array = orjson.dumps([{"order_id": "J-1", "amount": 1}, {"order_id": "J-2", "amount": 2}])
    assert file_tenant.upload(array, JSON)["records_accepted"] == 2
    one = orjson.dumps({"order_id": "J-3", "amount": 3})
    assert file_tenant.upload(one, JSON)["records_accepted"] == 1
    lines = b'{"order_id": "N-1", "amount": 4}\n\n{"order_id": "N-2", "amount": "5"}\n'
    assert file_tenant.upload(lines, NDJSON)["records_accepted"] == 2
    ids = [(r["data"]["order_id"], r["data"]["amount"]) for r in file_tenant.records()]
    assert ids == [("J-1", 1), ("J-2", 2), ("J-3", 3), ("N-1", 4), ("N-2", 5)]


@pytest.mark.parametrize("content_type", ["text/csv", JSON, NDJSON])
def test_gzip_files_are_read(file_tenant: FileTenant, content_type: str) -> None:
    plain = {
        "text/csv": (CSV_HEADER + csv_rows(50)).encode(),
        JSON: orjson.dumps([{"order_id": f"G-{i}", "amount": i} for i in range(50)]),
        NDJSON: b"".join(
            orjson.dumps({"order_id": f"G-{i}", "amount": i}) + b"\n" for i in range(50)
        ),
    }[content_type]
    transaction = file_tenant.upload(gzip.compress(plain), content_type)
    assert transaction["status"] == "completed", transaction["errors"]
    assert transaction["records_accepted"] == 50
    assert transaction["file_size"] < len(plain)


def test_reject_policy_lists_every_error_with_line_and_stores_nothing(
    file_tenant: FileTenant,
) -> None:
    body = (
        "order_id,amount,quantity\n"
        "A-1,1,1\n"
        '"A-2\nsecond line",x,1\n'  # starts on line 3, spans two lines
        "A-3,3\n"  # ragged, line 5
        "A-4,4,2.5\n"  # line 6
        ",5,5\n"  # line 7: an empty cell of a minLength field is absent (contract 6)
    )
    transaction = file_tenant.upload(body)
    assert transaction["status"] == "rejected"
    assert_nothing_stored(file_tenant, transaction)
    assert transaction["records_received"] == 5
    assert transaction["records_rejected"] == 4
    errors = {(e["line"], e["record"], e["path"], e["keyword"]) for e in transaction["errors"]}
    assert errors == {
        (3, 1, "/amount", "type"),
        (5, 2, "", "columns"),
        (6, 3, "/quantity", "type"),
        (7, 4, "/order_id", "required"),
    }
    assert transaction["error_count"] == 4


def test_at_most_100_errors_are_listed_but_all_are_counted(file_tenant: FileTenant) -> None:
    body = "order_id,amount\n" + "".join(f"A-{i},not-a-number\n" for i in range(250))
    transaction = file_tenant.upload(body)
    assert transaction["status"] == "rejected"
    assert transaction["error_count"] == 250
    assert len(transaction["errors"]) == 100
    assert transaction["errors"][0]["line"] == 2


def test_ndjson_line_errors(file_tenant: FileTenant) -> None:
    body = (
        b'{"order_id": "N-1", "amount": 1}\n'
        b"not json\n"
        b'{"order_id": "N-3", "amount": 1, "amount": 2}\n'
        b"[1, 2]\n"
        b'{"order_id": "N-5", "amount": NaN}\n'
        b'{"order_id": "N-6", "amount": 1e999}\n'
        b'{"order_id": "N-7", "amount": 1}\n'
    )
    transaction = file_tenant.upload(body, NDJSON)
    assert transaction["status"] == "rejected"
    assert [(e["line"], e["keyword"]) for e in transaction["errors"]] == [
        (2, "json"),
        (3, "json"),
        (4, "type"),
        (5, "json"),
        (6, "json"),
    ]
    assert "duplicate" in transaction["errors"][1]["message"]
    assert_nothing_stored(file_tenant, transaction)


def test_json_array_errors_carry_record_and_line(file_tenant: FileTenant) -> None:
    body = b'[\n{"order_id": "J-1", "amount": 1},\n{"order_id": "J-2"},\n7\n]'
    transaction = file_tenant.upload(body, JSON)
    assert transaction["status"] == "rejected"
    assert [(e["record"], e["line"], e["path"], e["keyword"]) for e in transaction["errors"]] == [
        (1, 3, "/amount", "required"),
        (2, 4, "", "type"),
    ]


UNREADABLE = [
    ("text/csv", b"", "empty"),
    ("text/csv", b"order_id,amount\n", "no records"),
    ("text/csv", b"order_id,order_id\nA,1\n", "twice"),
    ("text/csv", b"order_id,,amount\nA,,1\n", "no name"),
    ("text/csv", b"order_id,amount\nA-1,1\nA-\xff,2\n", "UTF-8"),
    ("text/csv", b'order_id,amount\nA-1,"1\n', "CSV"),
    (JSON, b'[{"order_id": "A-1", "amount": 1}, {"order_id": "A', "invalid JSON"),
    (JSON, b"", "empty"),
    (JSON, b"42", "array of records or one JSON object"),
    (JSON, b'"text"', "array of records or one JSON object"),
    (JSON, b"[]", "no records"),
    (JSON, b'[{"order_id": "A-1", "amount": 1}] trailing', "after the JSON value"),
    (JSON, b'[{"order_id": "A-1", "amount": 1} {"order_id": "A-2"}]', "expected ','"),
    (JSON, b'[{"order_id": "\xff"}]', "UTF-8"),
    (NDJSON, b"", "no records"),
    (NDJSON, b"\n\n", "no records"),
    ("text/csv", b"\x1f\x8b\x08\x00garbage", "gzip"),
]


@pytest.mark.parametrize(("content_type", "body", "why"), UNREADABLE)
def test_unreadable_files_are_rejected_whole(
    file_tenant: FileTenant, content_type: str, body: bytes, why: str
) -> None:
    transaction = file_tenant.upload(body, content_type)
    assert transaction["status"] == "rejected", transaction
    assert_nothing_stored(file_tenant, transaction)
    assert transaction["errors"][0]["keyword"] == "file"
    assert why in transaction["errors"][0]["message"], transaction["errors"]


def test_invalid_utf8_names_its_line(file_tenant: FileTenant) -> None:
    body = b"order_id,amount\nA-1,1\nA-2,2\nA-\xff,3\n"
    transaction = file_tenant.upload(body)
    assert transaction["errors"][0]["line"] == 4


def test_quarantine_of_an_unreadable_file_stores_nothing(quarantine_tenant: FileTenant) -> None:
    body = b"order_id,amount\nA-1,1\nA-2,x\nA-\xff,3\n"
    transaction = quarantine_tenant.upload(body)
    assert transaction["status"] == "rejected"
    assert_nothing_stored(quarantine_tenant, transaction)
    response = quarantine_tenant.client.get(
        f"/platform/v1/transactions/{transaction['transaction_id']}/quarantine",
        headers=quarantine_tenant.headers,
    )
    assert response.json()["total_entries"] == 0


def test_files_are_stored_with_the_current_schema_version(file_tenant: FileTenant) -> None:
    from tests.ingestion.conftest import SCHEMA

    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "note": {"type": "string"}}}
    file_tenant.add_schema_version(schema)
    transaction = file_tenant.upload("order_id,amount,note\nV-1,1,hi\n")
    assert transaction["schema_version"] == 2
    assert file_tenant.records()[0]["schema_version"] == 2


def test_an_empty_cell_of_a_string_field_with_a_format_is_an_absent_member(
    file_tenant: FileTenant,
) -> None:
    """Contract section 6: "" can never pass `format`, so in a file it is an absent
    member; a plain string field keeps ""."""
    body = (
        "order_id,customer-email,amount,placed_at,channel\n"
        "A-1,,1.5,,\n"
        "A-2,b@example.com,2,2026-11-22T10:00:00Z,shop\n"
    )
    transaction = file_tenant.upload(body)
    assert transaction["status"] == "completed", transaction["errors"]
    records = file_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": file_tenant.client_id, "dataset_id": "orders"},
        headers=file_tenant.headers,
    ).json()["data"]
    first = next(r["data"] for r in records if r["data"]["order_id"] == "A-1")
    assert "customer-email" not in first and "placed_at" not in first
    assert first["channel"] == ""


def test_a_nul_in_a_file_is_the_error_a_push_gets(file_tenant: FileTenant) -> None:
    """One record check for every door: a NUL (U+0000) in a file's row, NDJSON or CSV, is
    refused with the error a push of the same record gets (keyword `characters`, at its
    JSON Pointer, the same message), and nothing of the file is stored."""
    record = {"order_id": "B\x00", "amount": 2}
    pushed = file_tenant.push([record])
    assert pushed.status_code == 422, pushed.text
    expected = [(e["path"], e["keyword"], e["message"]) for e in pushed.json()["errors"]]
    assert ("/order_id", "characters") in [(p, k) for p, k, _ in expected]
    ndjson = file_tenant.upload(orjson.dumps(record) + b"\n", NDJSON, file_name="n.ndjson")
    csv = file_tenant.upload("order_id,amount\nB\x00,2\n")
    for transaction in (ndjson, csv):
        assert transaction["status"] == "rejected", transaction
        found = [(e["path"], e["keyword"], e["message"]) for e in transaction["errors"]]
        assert found == expected
        assert_nothing_stored(file_tenant, transaction)
