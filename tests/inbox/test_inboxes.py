"""Inboxes through the operator API (contract section 12)."""

from __future__ import annotations

import re
import uuid

from tests.factories import assert_problem
from tests.files.conftest import FileTenant
from tests.inbox.conftest import DOMAIN, create_inbox


def test_an_inbox_has_an_unguessable_address(mail_tenant: FileTenant) -> None:
    made = create_inbox(mail_tenant, ["Ann@Example.com", "@example.org"])
    assert set(made) == {
        "inbox_id",
        "address",
        "client_id",
        "dataset_id",
        "allowed_senders",
        "created_at",
    }
    local, _, domain = made["address"].partition("@")
    assert domain == DOMAIN
    assert re.fullmatch(r"in-[a-z2-7]{20}", local)  # 100 random bits
    assert made["allowed_senders"] == ["ann@example.com", "@example.org"]
    other = create_inbox(mail_tenant)
    assert other["address"] != made["address"]


def test_list_get_update_delete(mail_tenant: FileTenant) -> None:
    client, admin = mail_tenant.client, mail_tenant.admin
    first, second = create_inbox(mail_tenant), create_inbox(mail_tenant)
    listed = client.get(
        "/admin/v1/inboxes", params={"client_id": mail_tenant.client_id}, headers=admin
    ).json()
    assert [i["inbox_id"] for i in listed["data"]] == [first["inbox_id"], second["inbox_id"]]
    url = f"/admin/v1/inboxes/{first['inbox_id']}"
    assert client.get(url, headers=admin).json() == first
    patched = client.patch(url, json={"allowed_senders": ["bob@example.net"]}, headers=admin)
    assert patched.status_code == 200 and patched.json()["allowed_senders"] == ["bob@example.net"]
    assert client.delete(url, headers=admin).status_code == 204
    assert_problem(client.get(url, headers=admin), 404, "inbox_not_found")


def test_refusals(mail_tenant: FileTenant) -> None:
    client, admin = mail_tenant.client, mail_tenant.admin
    base = f"/admin/v1/clients/{mail_tenant.client_id}/datasets"
    for body in ({"allowed_senders": []}, {"allowed_senders": ["not an address"]}, {}):
        assert_problem(client.post(f"{base}/orders/inboxes", json=body, headers=admin), 400)
    good = {"allowed_senders": ["ann@example.com"]}
    assert_problem(client.post(f"{base}/missing/inboxes", json=good, headers=admin), 404)
    assert_problem(
        client.post("/admin/v1/clients/nobody/datasets/orders/inboxes", json=good, headers=admin),
        404,
    )
    missing = f"/admin/v1/inboxes/{uuid.uuid4()}"
    assert_problem(client.get(missing, headers=admin), 404)
    assert_problem(client.patch(missing, json=good, headers=admin), 404)
    assert_problem(client.delete(missing, headers=admin), 404)
    assert (
        client.post(f"{base}/orders/inboxes", json=good, headers=mail_tenant.headers).status_code
        == 403
    )
