"""GET /platform/v1/data/file_upload_url: the ticket, and its failure cases."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.factories import auth, create_credential, get_token
from tests.files.conftest import FileTenant


@pytest.mark.parametrize("content_type", ["text/csv", "application/json", "application/x-ndjson"])
def test_ticket_has_every_field_and_a_waiting_transaction(
    file_tenant: FileTenant, content_type: str
) -> None:
    ticket = file_tenant.upload_url(content_type, file_name="Q4 orders.csv")
    assert set(ticket) == {
        "upload_url",
        "method",
        "headers",
        "transaction_id",
        "file_id",
        "expires_at",
        "expires_in",
    }
    assert ticket["method"] == "PUT"
    assert ticket["headers"] == {"Content-Type": content_type}
    assert ticket["expires_in"] == 900
    expires_at = datetime.fromisoformat(ticket["expires_at"].replace("Z", "+00:00"))
    assert 890 <= (expires_at - datetime.now(UTC)).total_seconds() <= 900
    url = urlsplit(ticket["upload_url"])
    assert url.path == "/uploads/" + ticket["file_id"].replace("-", "")
    assert set(parse_qs(url.query)) == {"expires", "max_bytes", "signature"}
    assert "Q4" not in ticket["upload_url"]
    transaction = file_tenant.transaction(ticket["transaction_id"])
    assert transaction["kind"] == "file"
    assert transaction["status"] == "awaiting_upload"
    assert transaction["file_name"] == "Q4 orders.csv"
    assert transaction["content_type"] == content_type
    assert transaction["records_received"] == 0


def test_file_name_is_metadata_only(file_tenant: FileTenant) -> None:
    ticket = file_tenant.upload_url(file_name="../../etc/passwd")
    assert "passwd" not in ticket["upload_url"]
    assert ".." not in urlsplit(ticket["upload_url"]).path
    response = file_tenant.put(ticket, b"order_id,amount\nA-1,1\n")
    assert response.status_code == 200
    transaction = file_tenant.transaction(ticket["transaction_id"])
    assert transaction["file_name"] == "../../etc/passwd"


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "image/png", ""])
def test_other_content_types_are_415(file_tenant: FileTenant, content_type: str) -> None:
    problem = file_tenant.upload_url(content_type, status=415)
    assert problem["code"] == "unsupported_file_type"
    assert file_tenant.transactions(status="awaiting_upload")["total_entries"] == 0


def test_unknown_dataset_is_404(file_tenant: FileTenant) -> None:
    problem = file_tenant.upload_url(dataset_id="nope", status=404)
    assert problem["code"] == "dataset_not_found"


def test_another_companys_client_is_403(
    file_tenant: FileTenant, other_file_tenant: FileTenant
) -> None:
    response = file_tenant.client.get(
        "/platform/v1/data/file_upload_url",
        params={
            "client_id": other_file_tenant.client_id,
            "dataset_id": "orders",
            "file_name": "x.csv",
            "content_type": "text/csv",
        },
        headers=file_tenant.headers,
    )
    missing = file_tenant.client.get(
        "/platform/v1/data/file_upload_url",
        params={
            "client_id": "no-such-client",
            "dataset_id": "orders",
            "file_name": "x.csv",
            "content_type": "text/csv",
        },
        headers=file_tenant.headers,
    )
    assert response.status_code == missing.status_code == 403
    assert response.json()["code"] == missing.json()["code"] == "client_not_allowed"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"file_name": ""}, "file_name"),
        ({"file_name": "a\nb.csv"}, "file_name"),
        ({"file_name": "x" * 256}, "file_name"),
        ({"client_id": "bad id!"}, "client_id"),
        ({"unknown": "1"}, "unknown"),
    ],
)
def test_bad_parameters_are_400_naming_them(
    file_tenant: FileTenant, params: dict[str, str], field: str
) -> None:
    problem = file_tenant.upload_url(status=400, **params)
    assert any(e["field"] == field for e in problem["errors"]), problem


def test_missing_parameters_are_400(file_tenant: FileTenant) -> None:
    response = file_tenant.client.get(
        "/platform/v1/data/file_upload_url",
        params={"client_id": file_tenant.client_id},
        headers=file_tenant.headers,
    )
    assert response.status_code == 400
    named = {e["field"] for e in response.json()["errors"]}
    assert {"dataset_id", "file_name", "content_type"} <= named


def test_needs_data_write_scope(file_tenant: FileTenant) -> None:
    reader = create_credential(
        file_tenant.client, file_tenant.admin, file_tenant.company_id, scopes=["data:read"]
    )
    headers = auth(get_token(file_tenant.client, reader["client_id"], reader["client_secret"]))
    response = file_tenant.client.get(
        "/platform/v1/data/file_upload_url",
        params={
            "client_id": file_tenant.client_id,
            "dataset_id": "orders",
            "file_name": "x.csv",
            "content_type": "text/csv",
        },
        headers=headers,
    )
    assert response.status_code == 403
    assert response.json()["code"] == "insufficient_scope"
    assert file_tenant.client.get("/platform/v1/data/file_upload_url").status_code == 401
