"""SFTP uploads into the S3 store (a real S3 protocol server, moto, on loopback): the
file is written in parts (multipart upload past 8 MiB) and processed from S3."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from starlette.testclient import TestClient

from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows, run_worker
from tests.files.moto import ACCESS_KEY, REGION, SECRET_KEY, moto_server
from tests.sftp.conftest import create_account, paramiko_session

pytestmark = pytest.mark.http


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with moto_server(tmp_path_factory.mktemp("moto")) as url:
        yield url


@pytest.mark.long
def test_an_upload_goes_to_s3_in_parts_and_is_processed_from_there(
    s3_endpoint: str,
    make_client: Callable[..., TestClient],
    make_sftp: Any,
    admin: dict[str, str],
    company: str,
    tmp_path: Path,
) -> None:
    bucket = f"hw-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    s3.create_bucket(Bucket=bucket)
    s3_settings = {
        "storage_url": f"s3://{bucket}",
        "s3_endpoint_url": s3_endpoint,
        "s3_region": REGION,
        "s3_access_key_id": ACCESS_KEY,
        "s3_secret_access_key": SECRET_KEY,
    }
    app = make_client(**s3_settings)
    tenant = FileTenant(app, admin, company)
    account = create_account(tenant, tmp_path)
    server = make_sftp(**s3_settings)
    rows = 120_000  # about 9 MiB: two parts
    body = (CSV_HEADER + csv_rows(rows)).encode()
    assert len(body) > 8 * 1024 * 1024
    _, sftp = paramiko_session(server.port, account.username, key_file=account.key_file)
    with sftp.open(f"/{tenant.client_id}/orders/big.csv", "wb") as remote:
        remote.set_pipelined(True)
        remote.write(body)
    [key] = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(body)
    assert run_worker(app) == 1
    [transaction] = tenant.transactions(channel="sftp")["data"]
    assert transaction["status"] == "completed", transaction
    assert transaction["records_accepted"] == rows
