"""The operator's commands for the channels: `headwater inboxes` and `headwater
sftp-accounts` create, list and delete, on the tests' database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncssh

from tests.factories import run_cli
from tests.files.conftest import FileTenant


def _cli(base_settings: dict[str, Any], *args: str) -> Any:
    done = run_cli(
        *args, data_dir=base_settings["data_dir"], database_url=base_settings["database_url"]
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_inboxes_commands(base_settings: dict[str, Any], mail_tenant: FileTenant) -> None:
    made = json.loads(
        _cli(
            base_settings,
            "inboxes",
            "create",
            mail_tenant.client_id,
            "orders",
            "--sender",
            "@Example.com",
        )
    )
    assert made["allowed_senders"] == ["@example.com"] and made["dataset_id"] == "orders"
    listed = json.loads(
        _cli(base_settings, "inboxes", "list", "--client-id", mail_tenant.client_id)
    )
    assert [i["inbox_id"] for i in listed] == [made["inbox_id"]]
    _cli(base_settings, "inboxes", "delete", made["inbox_id"])
    got = mail_tenant.client.get(f"/admin/v1/inboxes/{made['inbox_id']}", headers=mail_tenant.admin)
    assert got.status_code == 404
    refused = run_cli(
        "inboxes",
        "create",
        mail_tenant.client_id,
        "missing",
        "--sender",
        "a@example.com",
        data_dir=base_settings["data_dir"],
        database_url=base_settings["database_url"],
    )
    assert refused.returncode != 0


def test_sftp_accounts_commands(
    base_settings: dict[str, Any], mail_tenant: FileTenant, tmp_path: Path
) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    public = tmp_path / "key.pub"
    public.write_bytes(key.export_public_key())
    made = json.loads(
        _cli(
            base_settings,
            "sftp-accounts",
            "create",
            mail_tenant.company_id,
            "cli-user",
            "--public-key",
            str(public),
            "--password",
        )
    )
    assert made["key_fingerprints"] == [key.get_fingerprint("sha256")] and made["password"]
    listed = json.loads(
        _cli(base_settings, "sftp-accounts", "list", "--company-id", mail_tenant.company_id)
    )
    assert [a["username"] for a in listed] == ["cli-user"] and "password" not in listed[0]
    _cli(base_settings, "sftp-accounts", "delete", "cli-user")
    got = mail_tenant.client.get("/admin/v1/sftp_accounts/cli-user", headers=mail_tenant.admin)
    assert got.status_code == 404
