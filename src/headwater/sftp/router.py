"""Operator API for SFTP accounts (scope `admin`, contract section 11)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status
from starlette.responses import Response as StarletteResponse

from headwater.identity.deps import Admin
from headwater.kit.pagination import Page
from headwater.sftp import service
from headwater.sftp.schemas import (
    AccountCreate,
    AccountCreated,
    AccountQuery,
    AccountRead,
    KeysUpdate,
)
from headwater.web.deps import ReadSessionDep, SessionDep, StrictRoute
from headwater.web.responses import json_response

router = APIRouter(prefix="/admin/v1", tags=["operator: sftp"], route_class=StrictRoute)
UsernamePath = Annotated[str, Path(description="The SFTP account's username.")]


@router.post(
    "/companies/{company_id}/sftp_accounts",
    status_code=status.HTTP_201_CREATED,
    response_model=AccountCreated,
    response_model_exclude_none=True,
    responses={
        400: {
            "description": "A key that does not parse (named by its index), no key and "
            "no password, or an unknown client."
        },
        404: {"description": "No such company."},
        409: {"description": "The username is taken."},
    },
)
def create_account(
    company_id: uuid.UUID, body: AccountCreate, session: SessionDep, _: Admin
) -> StarletteResponse:
    """Create an SFTP login for a company's systems: public keys, and a generated password
    if asked for (shown only in this answer)."""
    created = service.create_account(session, company_id=company_id, data=body)
    return StarletteResponse(
        created.model_dump_json(exclude_none=True),
        status_code=201,
        media_type="application/json",
    )


@router.get(
    "/sftp_accounts",
    response_model=Page[AccountRead],
    responses={404: {"description": "`company_id` names no company."}},
)
def list_accounts(
    session: ReadSessionDep, _: Admin, query: Annotated[AccountQuery, Query()]
) -> object:
    """Every SFTP account, or one company's (`company_id`), oldest first."""
    items, total = service.list_accounts(session, company_id=query.company_id, params=query)
    return json_response(
        Page[AccountRead].of([service.view(a) for a in items], params=query, total=total)
    )


@router.get(
    "/sftp_accounts/{username}",
    response_model=AccountRead,
    responses={404: {"description": "No such account."}},
)
def get_account(username: UsernamePath, session: ReadSessionDep, _: Admin) -> object:
    return json_response(service.view(service.get_account(session, username)))


@router.put(
    "/sftp_accounts/{username}/public_keys",
    response_model=AccountRead,
    responses={
        400: {"description": "A key that does not parse, named by its index."},
        404: {"description": "No such account."},
    },
)
def replace_keys(username: UsernamePath, body: KeysUpdate, session: SessionDep, _: Admin) -> object:
    """Replace every public key of the account (sessions already open go on)."""
    return json_response(service.view(service.replace_keys(session, username, body.public_keys)))


@router.delete(
    "/sftp_accounts/{username}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={404: {"description": "No such account."}},
)
def delete_account(username: UsernamePath, session: SessionDep, _: Admin) -> Response:
    """Delete the account: no new login, and its open sessions end within 5 s."""
    service.delete_account(session, username)
    return Response(status_code=204)
