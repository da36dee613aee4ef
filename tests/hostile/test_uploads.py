"""Presigned uploads to the embedded store (contract section 15): nothing the signature
does not cover, and the signed Content-Type byte for byte."""

from __future__ import annotations

import uuid

import pytest
from starlette.testclient import TestClient

from tests.factories import assert_problem, create_company
from tests.files.conftest import CSV_HEADER, FileTenant, csv_rows


@pytest.fixture
def files(client: TestClient, admin: dict[str, str]) -> FileTenant:
    return FileTenant(client, admin, create_company(client, admin, f"U {uuid.uuid4().hex[:6]}"))


def test_a_query_parameter_the_signature_does_not_cover_is_403(files: FileTenant) -> None:
    ticket = files.upload_url()
    body = (CSV_HEADER + csv_rows(1)).encode()
    refused = files.put(ticket, body, url=ticket["upload_url"] + "&x-extra=1")
    problem = assert_problem(refused, 403)
    assert "x-extra" in problem["detail"]
    # the URL as given still works: the refusal used nothing up
    assert files.put(ticket, body).status_code == 200


@pytest.mark.parametrize(
    "content_type", ["TEXT/CSV", "text/csv;x=1", "text/csv ", "text/csv; charset=utf-8"]
)
def test_the_content_type_must_equal_the_signed_one_byte_for_byte(
    files: FileTenant, content_type: str
) -> None:
    ticket = files.upload_url()
    refused = files.put(ticket, b"order_id\nA\n", **{"Content-Type": content_type})
    problem = assert_problem(refused, 403)
    assert "is not the signed 'text/csv'" in problem["detail"]
