"""One record shape (issue 33): a record reads the same on every path that shows it.

The records page renders `RecordRead`; NDJSON lines and the portable feed write
`feed.record_json`'s text; PostgreSQL's feed writes the same text in SQL (`LINE_SQL`);
an NDJSON export writes its own lines. Here each is read back, for records pushed and
records from a file, with text that must be escaped and numbers of each kind, and they
must agree to the byte where they are the same JSON text."""

from __future__ import annotations

import json
from typing import Any

from tests.downstream.conftest import FeedTenant
from tests.downstream.test_exports import export

ODD = 'a "quoted" \\ back\tslash, ünïcödé ✓ and 🙂'


def _ndjson(tenant: FeedTenant) -> list[bytes]:
    with tenant.client.stream(
        "GET",
        "/platform/v1/data",
        params={"client_id": tenant.client_id, "dataset_id": "orders"},
        headers=tenant.headers | {"Accept": "application/x-ndjson"},
    ) as response:
        assert response.status_code == 200
        return [line.encode() for line in response.iter_lines() if line]


def _export(tenant: FeedTenant) -> list[dict[str, Any]]:
    _, body = export(tenant, format="ndjson")
    return [json.loads(line) for line in body.splitlines() if line]


def test_a_record_reads_the_same_on_every_path(feed_tenant: FeedTenant) -> None:
    pushed = [
        {"order_id": ODD, "amount": 12.5, "quantity": 3, "paid": True},
        {"order_id": "B-2", "amount": 1e-7, "placed_at": "2026-11-26T10:00:00.123+01:00"},
        {"order_id": "C-3", "amount": 9007199254740993},
    ]
    assert feed_tenant.push(pushed).status_code == 200
    file = feed_tenant.upload(
        f'order_id,amount\n"{ODD.replace(chr(34), chr(34) * 2)}",7\n', "text/csv"
    )
    assert file["status"] == "completed", file

    page = feed_tenant.records()
    lines = _ndjson(feed_tenant)
    followed, _ = feed_tenant.follow()
    assert len(page) == 4
    assert [json.loads(line) for line in lines] == page  # NDJSON: RecordRead's JSON
    assert followed == page  # the feed (SQL text on PostgreSQL, Python's elsewhere)
    raw = feed_tenant.client.get(
        "/platform/v1/data/changes",
        params={"client_id": feed_tenant.client_id, "dataset_id": "orders"},
        headers=feed_tenant.headers,
    ).content
    assert raw.startswith(b'{"data":[' + b",".join(lines) + b"]")  # the same text, to the byte
    exported = _export(feed_tenant)
    assert [{k: r[k] for k in page[0]} for r in exported] == page
    assert [r["data"]["order_id"] for r in page] == [ODD, "B-2", "C-3", ODD]
    assert page[1]["data"]["placed_at"] == "2026-11-26T09:00:00.123Z"
    assert page[2]["data"]["amount"] == 9007199254740993  # no float on any path
