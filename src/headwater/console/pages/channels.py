"""The operator's doors for a company's systems: SFTP accounts (public keys, or a
generated password shown once) and email inboxes of a dataset."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from headwater.console.deps import (
    Changing,
    ConsoleRoute,
    ConsoleRuntime,
    Form,
    IdPath,
    NamePath,
    needs,
    page,
    redirect,
)
from headwater.inbox import service as inboxes
from headwater.inbox.schemas import InboxCreate
from headwater.sftp import service as sftp
from headwater.sftp.schemas import AccountCreate

router = APIRouter(prefix="/console", route_class=ConsoleRoute)


@router.post("/companies/{company_id}/sftp_accounts")
def create_account(
    request: Request, company_id: IdPath, runtime: ConsoleRuntime, who: Changing, fields: Form
) -> HTMLResponse:
    """The new account, with its generated password (if asked for) shown this once."""
    needs(who, "admin")
    body = AccountCreate.model_validate(
        {
            "username": fields.get("username"),
            "public_keys": [k.strip() for k in fields.get("public_keys").splitlines() if k.strip()],
            "password": fields.get("password") == "on",
            "client_ids": [c for c in fields.all("client_ids") if c],
        }
    )
    with runtime.db.unit_of_work() as session:
        created = sftp.create_account(session, company_id=company_id, data=body)
    return page(request, "sftp_created.html", who, status=201, account=created)


@router.post("/sftp_accounts/{username}/delete")
def delete_account(username: NamePath, runtime: ConsoleRuntime, who: Changing) -> Response:
    needs(who, "admin")
    with runtime.db.unit_of_work() as session:
        company_id = sftp.get_account(session, username).company_id
        sftp.delete_account(session, username)
    return redirect(f"/console/companies/{company_id}")


@router.post("/clients/{client_id}/datasets/{dataset_id}/inboxes")
def create_inbox(
    client_id: NamePath, dataset_id: NamePath, runtime: ConsoleRuntime, who: Changing, fields: Form
) -> Response:
    needs(who, "admin")
    senders = [s.strip() for s in fields.get("allowed_senders").splitlines() if s.strip()]
    body = InboxCreate.model_validate({"allowed_senders": senders})
    with runtime.db.unit_of_work() as session:
        inboxes.create_inbox(
            session,
            client_id=client_id,
            dataset_id=dataset_id,
            allowed_senders=body.allowed_senders,
        )
    return redirect(f"/console/clients/{client_id}/datasets/{dataset_id}")


@router.post("/inboxes/{inbox_id}/delete")
def delete_inbox(inbox_id: IdPath, runtime: ConsoleRuntime, who: Changing) -> Response:
    needs(who, "admin")
    with runtime.db.unit_of_work() as session:
        inbox = inboxes.get_inbox(session, inbox_id)
        back = f"/console/clients/{inbox.client_id}/datasets/{inbox.dataset_id}"
        inboxes.delete_inbox(session, inbox_id)
    return redirect(back)
