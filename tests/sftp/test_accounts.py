"""SFTP accounts through the operator API (contract section 11)."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncssh
from starlette.testclient import TestClient

from tests.factories import assert_problem, create_ingestion_client
from tests.files.conftest import FileTenant
from tests.sftp.conftest import create_account, new_key


def _url(tenant: FileTenant) -> str:
    return f"/admin/v1/companies/{tenant.company_id}/sftp_accounts"


def test_an_account_with_a_key(sftp_tenant: FileTenant, tmp_path: Path) -> None:
    made = create_account(sftp_tenant, tmp_path)
    body = made.created
    assert set(body) == {"username", "company_id", "client_ids", "key_fingerprints", "created_at"}
    assert body["company_id"] == sftp_tenant.company_id and body["client_ids"] == []
    assert body["key_fingerprints"] == [made.key.get_fingerprint("sha256")]
    assert body["key_fingerprints"][0].startswith("SHA256:")
    got = sftp_tenant.client.get(
        f"/admin/v1/sftp_accounts/{made.username}", headers=sftp_tenant.admin
    )
    assert got.status_code == 200 and got.json() == body


def test_a_generated_password_is_shown_once(sftp_tenant: FileTenant, tmp_path: Path) -> None:
    made = create_account(sftp_tenant, tmp_path, public_keys=[], password=True)
    assert len(made.created["password"]) >= 20
    got = sftp_tenant.client.get(
        f"/admin/v1/sftp_accounts/{made.username}", headers=sftp_tenant.admin
    )
    assert "password" not in got.json()
    listed = sftp_tenant.client.get(
        "/admin/v1/sftp_accounts",
        params={"company_id": sftp_tenant.company_id},
        headers=sftp_tenant.admin,
    ).json()
    assert made.created["password"] not in str(listed)


def test_refusals(sftp_tenant: FileTenant, tmp_path: Path) -> None:
    client, admin = sftp_tenant.client, sftp_tenant.admin
    good = new_key(tmp_path)[0].export_public_key().decode()
    weak = asyncssh.generate_private_key("ssh-rsa", key_size=1024).export_public_key().decode()
    cases = [
        ({"username": "nokey"}, 400, "/public_keys"),
        (
            {"username": "badkey", "public_keys": [good, "ssh-ed25519 AAAAnotakey"]},
            400,
            "/public_keys/1",
        ),
        ({"username": "weak", "public_keys": [weak]}, 400, "/public_keys/0"),
        ({"username": "Upper", "public_keys": [good]}, 400, "/username"),
        ({"username": "c1", "public_keys": [good], "client_ids": ["nope"]}, 400, "/client_ids"),
        ({"username": "x", "public_keys": [good], "extra": 1}, 400, "/extra"),
    ]
    for body, status, field in cases:
        answer = client.post(_url(sftp_tenant), json=body, headers=admin)
        assert_problem(answer, status)
        assert field in {e["field"] for e in answer.json()["errors"]}, answer.text
    taken = create_account(sftp_tenant, tmp_path)
    again = client.post(
        _url(sftp_tenant), json={"username": taken.username, "public_keys": [good]}, headers=admin
    )
    assert_problem(again, 409, "sftp_account_exists")
    missing = client.post(
        f"/admin/v1/companies/{uuid.uuid4()}/sftp_accounts",
        json={"username": "orphan", "public_keys": [good]},
        headers=admin,
    )
    assert_problem(missing, 404)
    assert_problem(client.get("/admin/v1/sftp_accounts/nobody", headers=admin), 404)
    assert_problem(client.delete("/admin/v1/sftp_accounts/nobody", headers=admin), 404)


def test_only_operators_manage_accounts(sftp_tenant: FileTenant, tmp_path: Path) -> None:
    good = new_key(tmp_path)[0].export_public_key().decode()
    answer = sftp_tenant.client.post(
        _url(sftp_tenant),
        json={"username": "mine", "public_keys": [good]},
        headers=sftp_tenant.headers,
    )
    assert answer.status_code == 403
    assert sftp_tenant.client.get("/admin/v1/sftp_accounts").status_code == 401


def test_list_replace_keys_delete(sftp_tenant: FileTenant, tmp_path: Path) -> None:
    client, admin = sftp_tenant.client, sftp_tenant.admin
    restricted_client = create_ingestion_client(client, admin, sftp_tenant.company_id)
    first = create_account(sftp_tenant, tmp_path, client_ids=[restricted_client])
    second = create_account(sftp_tenant, tmp_path)
    page = client.get(
        "/admin/v1/sftp_accounts", params={"company_id": sftp_tenant.company_id}, headers=admin
    ).json()
    assert [a["username"] for a in page["data"]] == [first.username, second.username]
    assert page["data"][0]["client_ids"] == [restricted_client]
    key = new_key(tmp_path)[0]
    replaced = client.put(
        f"/admin/v1/sftp_accounts/{first.username}/public_keys",
        json={"public_keys": [key.export_public_key().decode()]},
        headers=admin,
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["key_fingerprints"] == [key.get_fingerprint("sha256")]
    empty = client.put(
        f"/admin/v1/sftp_accounts/{first.username}/public_keys",
        json={"public_keys": []},
        headers=admin,
    )
    assert_problem(empty, 400)
    assert (
        client.delete(f"/admin/v1/sftp_accounts/{first.username}", headers=admin).status_code == 204
    )
    assert_problem(client.get(f"/admin/v1/sftp_accounts/{first.username}", headers=admin), 404)


def test_accounts_are_in_the_openapi_description(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/admin/v1/companies/{company_id}/sftp_accounts" in paths
    assert {"get", "delete"} <= set(paths["/admin/v1/sftp_accounts/{username}"])
    assert "put" in paths["/admin/v1/sftp_accounts/{username}/public_keys"]
