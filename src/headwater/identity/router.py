"""Operator API (scope `admin`): companies, ingestion clients, credentials."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response, status

from headwater.identity import service
from headwater.identity.deps import Admin, Authenticated, IdentityRuntime
from headwater.identity.schemas import (
    ClientCreate,
    ClientRead,
    CompanyCreate,
    CompanyRead,
    CredentialCreate,
    CredentialCreated,
    CredentialRead,
    WhoAmI,
)
from headwater.kit.pagination import Page
from headwater.web.deps import Paging, ReadSessionDep, SessionDep, StrictRoute
from headwater.web.responses import json_response

router = APIRouter(prefix="/admin/v1", tags=["operator"], route_class=StrictRoute)
token_info = APIRouter(tags=["identity provider"], route_class=StrictRoute)


@token_info.get("/platform/v1/whoami", response_model=WhoAmI)
async def whoami(caller: Authenticated) -> WhoAmI:
    """What the bearer token grants, as the API sees it. Reads no database."""
    return WhoAmI(
        subject=caller.subject,
        author_id=caller.author_id,
        company_id=caller.company_id,
        client_ids=list(caller.client_ids),
        scopes=sorted(caller.scopes),
    )


@router.post("/companies", status_code=status.HTTP_201_CREATED, response_model=CompanyRead)
def create_company(body: CompanyCreate, session: SessionDep, _: Admin) -> object:
    """Register a customer organisation."""
    return service.create_company(session, name=body.name)


@router.get("/companies", response_model=Page[CompanyRead])
def list_companies(session: ReadSessionDep, _: Admin, paging: Paging) -> object:
    items, total = service.list_companies(session, params=paging)
    return json_response(Page[CompanyRead].of(items, params=paging, total=total))


@router.get("/companies/{company_id}", response_model=CompanyRead)
def get_company(company_id: uuid.UUID, session: ReadSessionDep, _: Admin) -> object:
    return service.get_company(session, company_id)


@router.delete("/companies/{company_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_company(
    company_id: uuid.UUID, session: SessionDep, _: Admin, runtime: IdentityRuntime
) -> Response:
    """Revoke a company: none of its credentials gets a new token, and tokens already
    issued to them answer 401 on every instance within 10 s (at once on this one)."""
    service.revoke_company(session, company_id)
    runtime.verifier.revoke(company=company_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/companies/{company_id}/clients",
    status_code=status.HTTP_201_CREATED,
    response_model=ClientRead,
    responses={409: {"description": "The client id exists."}},
)
def create_client(
    company_id: uuid.UUID, body: ClientCreate, session: SessionDep, _: Admin
) -> object:
    """Register an ingestion client (a `client_id` of the data API) for a company."""
    return service.create_client(
        session, company_id=company_id, client_id=body.client_id, name=body.name
    )


@router.get("/companies/{company_id}/clients", response_model=Page[ClientRead])
def list_clients(
    company_id: uuid.UUID, session: ReadSessionDep, _: Admin, paging: Paging
) -> object:
    items, total = service.list_clients(session, company_id=company_id, params=paging)
    return json_response(Page[ClientRead].of(items, params=paging, total=total))


@router.get("/companies/{company_id}/clients/{client_id}", response_model=ClientRead)
def get_client(company_id: uuid.UUID, client_id: str, session: ReadSessionDep, _: Admin) -> object:
    return service.get_client(session, company_id=company_id, client_id=client_id)


@router.delete(
    "/companies/{company_id}/clients/{client_id}", status_code=status.HTTP_204_NO_CONTENT
)
def revoke_client(company_id: uuid.UUID, client_id: str, session: SessionDep, _: Admin) -> Response:
    """Revoke an ingestion client; its id is never reused."""
    service.revoke_client(session, company_id=company_id, client_id=client_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/companies/{company_id}/credentials",
    status_code=status.HTTP_201_CREATED,
    response_model=CredentialCreated,
)
def create_credential(
    company_id: uuid.UUID, body: CredentialCreate, session: SessionDep, _: Admin
) -> object:
    """Issue an API credential. The answer is the only one that ever holds the secret."""
    issued = service.create_credential(
        session,
        company_id=company_id,
        name=body.name,
        scopes=body.scopes,
        client_ids=body.client_ids,
    )
    read = CredentialRead.model_validate(issued.credential, from_attributes=True)
    return CredentialCreated(**read.model_dump(), client_secret=issued.client_secret)


@router.get("/companies/{company_id}/credentials", response_model=Page[CredentialRead])
def list_credentials(
    company_id: uuid.UUID, session: ReadSessionDep, _: Admin, paging: Paging
) -> object:
    items, total = service.list_credentials(session, company_id=company_id, params=paging)
    return json_response(Page[CredentialRead].of(items, params=paging, total=total))


@router.get("/credentials/{client_id}", response_model=CredentialRead)
def get_credential(client_id: str, session: ReadSessionDep, _: Admin) -> object:
    return service.get_credential(session, client_id)


@router.delete("/credentials/{client_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_credential(
    client_id: str, session: SessionDep, _: Admin, runtime: IdentityRuntime
) -> Response:
    """Revoke a credential: it gets no new token, and tokens already issued to it answer
    401 on every instance within 10 s (at once on this one)."""
    service.revoke_credential(session, client_id)
    runtime.verifier.revoke(credential=client_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
