"""Exports to an S3 store (a real S3 protocol server, moto, on loopback): the file is
written in parts, downloaded through S3's own presigned GET, and deleted after its
lifetime."""

from __future__ import annotations

import io
from typing import Any

import httpx
import orjson
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError

from tests.downstream.conftest import FeedTenant
from tests.downstream.test_exports import ask, expire, read, run_exports
from tests.files.test_s3 import bucket, s3_app, s3_client, s3_endpoint

__all__ = ["bucket", "s3_app", "s3_endpoint"]  # fixtures


def test_an_export_to_s3_downloads_through_a_presigned_get_and_expires(
    feed_tenant: FeedTenant, s3_app: Any, bucket: str, s3_endpoint: str
) -> None:
    tenant = feed_tenant.via(s3_app())
    tenant.push_orders(1, 2, 3)
    for format in ("parquet", "ndjson"):
        queued = ask(tenant, format=format)
        assert run_exports(tenant.client) >= 1
        done = read(tenant, queued["export_id"])
        assert done["status"] == "completed" and done["record_count"] == 3
        url = done["download_url"]
        assert url.startswith(f"{s3_endpoint}/{bucket}/exports/") and "X-Amz-Signature" in url
        response = httpx.get(url, timeout=30)
        assert response.status_code == 200
        assert (
            f"orders-{queued['export_id'][:8]}.{format}" in response.headers["content-disposition"]
        )
        assert len(response.content) == done["file_size"]
        if format == "parquet":
            table = pq.read_table(io.BytesIO(response.content))
            assert sorted(table.column("order_id").to_pylist()) == ["A-1", "A-2", "A-3"]
        else:
            lines = [orjson.loads(line) for line in response.content.splitlines()]
            assert sorted(line["data"]["order_id"] for line in lines) == ["A-1", "A-2", "A-3"]
    assert expire(tenant, done["export_id"]) == 1
    key = url.split(f"/{bucket}/", 1)[1].split("?", 1)[0]
    with pytest.raises(ClientError):
        s3_client(s3_endpoint).head_object(Bucket=bucket, Key=key)
    read(tenant, done["export_id"], status=410)
