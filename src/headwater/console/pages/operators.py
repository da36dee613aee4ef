"""The operator's pages (scope `admin`): companies, their ingestion clients, credentials
(a new secret shown once) and SFTP accounts, and the dataset registry: register a
dataset, add a schema version, set and preview transform steps, its inboxes."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from headwater.console.deps import (
    Changing,
    ConsoleRoute,
    ConsoleRuntime,
    Fields,
    Form,
    IdPath,
    NamePath,
    Signed,
    needs,
    page,
    pages,
    pretty,
    redirect,
)
from headwater.console.errors import BadForm
from headwater.console.sessions import SignedIn
from headwater.identity import service as identity
from headwater.identity.schemas import (
    ClientCreate,
    CompanyCreate,
    CompanyRead,
    CredentialCreate,
    CredentialRead,
)
from headwater.identity.tokens import COMPANY_SCOPES
from headwater.inbox import service as inboxes
from headwater.inbox.schemas import InboxQuery
from headwater.ingestion import datasets, transform_service
from headwater.ingestion.schemas import DatasetCreate, PreviewRequest, TransformsUpdate
from headwater.kit.pagination import PageQuery
from headwater.sftp import service as sftp

router = APIRouter(prefix="/console", route_class=ConsoleRoute)

ADMIN = "admin"
LISTED = PageQuery(page_size=100)


def _operator(who: SignedIn) -> None:
    needs(who, ADMIN)


@router.get("/companies")
def company_list(request: Request, runtime: ConsoleRuntime, who: Signed) -> HTMLResponse:
    _operator(who)
    query = PageQuery.model_validate(dict(request.query_params))
    with runtime.db.read_session() as session:
        rows, total = identity.list_companies(session, params=query)
        items = [CompanyRead.model_validate(r, from_attributes=True) for r in rows]
    return page(
        request, "companies.html", who, items=items, total=total, pages=pages(request, query, total)
    )


@router.post("/companies")
def create_company(runtime: ConsoleRuntime, who: Changing, fields: Form) -> Response:
    _operator(who)
    body = CompanyCreate.model_validate({"name": fields.get("name")})
    with runtime.db.unit_of_work() as session:
        company_id = identity.create_company(session, name=body.name).id
    return redirect(f"/console/companies/{company_id}")


@router.get("/companies/{company_id}")
def company_page(
    request: Request, company_id: IdPath, runtime: ConsoleRuntime, who: Signed
) -> HTMLResponse:
    _operator(who)
    return _company(request, runtime, who, company_id)


def _company(
    request: Request,
    runtime: ConsoleRuntime,
    who: SignedIn,
    company_id: uuid.UUID,
    *,
    status: int = 200,
    issued: identity.IssuedCredential | None = None,
) -> HTMLResponse:
    with runtime.db.read_session() as session:
        company = CompanyRead.model_validate(
            identity.get_company(session, company_id), from_attributes=True
        )
        clients, _ = identity.list_clients(session, company_id=company_id, params=LISTED)
        rows, _ = identity.list_credentials(session, company_id=company_id, params=LISTED)
        credentials = [CredentialRead.model_validate(c, from_attributes=True) for c in rows]
        logins, _ = sftp.list_accounts(session, company_id=company_id, params=LISTED)
        accounts = [sftp.view(a) for a in logins]
    return page(
        request,
        "company.html",
        who,
        status=status,
        company=company,
        clients=clients,
        credentials=credentials,
        accounts=accounts,
        scopes=sorted(COMPANY_SCOPES),
        issued=issued,
    )


@router.post("/companies/{company_id}/revoke")
def revoke_company(company_id: IdPath, runtime: ConsoleRuntime, who: Changing) -> Response:
    """As the API's: no new token, and its sessions and tokens end at once here (within
    10 s on the other instances)."""
    _operator(who)
    with runtime.db.unit_of_work() as session:
        identity.revoke_company(session, company_id)
    runtime.verifier.revoke(company=company_id)
    return redirect(f"/console/companies/{company_id}")


@router.post("/companies/{company_id}/clients")
def create_client(
    company_id: IdPath, runtime: ConsoleRuntime, who: Changing, fields: Form
) -> Response:
    _operator(who)
    body = ClientCreate.model_validate(
        {"client_id": fields.get("client_id"), "name": fields.get("name")}
    )
    with runtime.db.unit_of_work() as session:
        identity.create_client(
            session, company_id=company_id, client_id=body.client_id, name=body.name
        )
    return redirect(f"/console/companies/{company_id}")


@router.post("/companies/{company_id}/clients/{client_id}/revoke")
def revoke_client(
    company_id: IdPath, client_id: NamePath, runtime: ConsoleRuntime, who: Changing
) -> Response:
    """As the API's: the client takes no more data, and its id is never reused."""
    _operator(who)
    with runtime.db.unit_of_work() as session:
        identity.revoke_client(session, company_id=company_id, client_id=client_id)
    return redirect(f"/console/companies/{company_id}")


@router.post("/companies/{company_id}/credentials")
def create_credential(
    request: Request, company_id: IdPath, runtime: ConsoleRuntime, who: Changing, fields: Form
) -> HTMLResponse:
    """The company's page again, with the new secret: the one time it is shown."""
    _operator(who)
    body = CredentialCreate.model_validate(
        {
            "name": fields.get("name"),
            "scopes": fields.all("scopes"),
            "client_ids": [c for c in fields.all("client_ids") if c],
        }
    )
    with runtime.db.unit_of_work() as session:
        issued = identity.create_credential(
            session,
            company_id=company_id,
            name=body.name,
            scopes=body.scopes,
            client_ids=body.client_ids,
        )
    return _company(request, runtime, who, company_id, status=201, issued=issued)


@router.post("/credentials/{client_id}/revoke")
def revoke_credential(
    client_id: NamePath, runtime: ConsoleRuntime, who: Changing, fields: Form
) -> Response:
    _operator(who)
    with runtime.db.unit_of_work() as session:
        company_id = identity.get_credential(session, client_id).company_id
        identity.revoke_credential(session, client_id)
    runtime.verifier.revoke(credential=client_id)
    return redirect(f"/console/companies/{company_id}" if company_id else "/console/companies")


# --- the dataset registry ------------------------------------------------------------------


@router.get("/clients/{client_id}")
def client_page(
    request: Request, client_id: NamePath, runtime: ConsoleRuntime, who: Signed
) -> HTMLResponse:
    _operator(who)
    with runtime.db.read_session() as session:
        client = identity.get_client_by_id(session, client_id)
        items, total = datasets.list_for_client(session, client_id=client_id, params=LISTED)
    return page(request, "client.html", who, client=client, items=items, total=total)


@router.post("/clients/{client_id}/datasets")
def register_dataset(
    client_id: NamePath, runtime: ConsoleRuntime, who: Changing, fields: Form
) -> Response:
    _operator(who)
    body = DatasetCreate.model_validate(
        {
            "dataset_id": fields.get("dataset_id"),
            "schema": fields.json("schema"),
            "options": {
                "invalid_rows": fields.get("invalid_rows") or "reject",
                "compatibility": fields.get("compatibility") or "backward",
            },
        }
    )
    with runtime.db.unit_of_work() as session:
        datasets.register(
            session,
            author_id=who.principal.author_id,
            client_id=client_id,
            dataset_id=body.dataset_id,
            schema=body.schema_,
            options=body.options,
            max_schema_bytes=runtime.settings.max_schema_bytes,
        )
    return redirect(f"/console/clients/{client_id}/datasets/{body.dataset_id}")


@router.get("/clients/{client_id}/datasets/{dataset_id}")
def registry_page(
    request: Request,
    client_id: NamePath,
    dataset_id: NamePath,
    runtime: ConsoleRuntime,
    who: Signed,
) -> HTMLResponse:
    _operator(who)
    return _registry(request, runtime, who, client_id, dataset_id)


def _registry(
    request: Request,
    runtime: ConsoleRuntime,
    who: SignedIn,
    client_id: str,
    dataset_id: str,
    *,
    preview: object = None,
    tried: Fields | None = None,
) -> HTMLResponse:
    with runtime.db.read_session() as session:
        dataset = datasets.get(session, client_id=client_id, dataset_id=dataset_id)
        steps = transform_service.current(session, client_id=client_id, dataset_id=dataset_id)
        found, _ = inboxes.list_inboxes(session, InboxQuery(client_id=client_id, page_size=100))
        domain = runtime.settings.inbound_email_domain
        shown = [inboxes.view(i, domain=domain) for i in found if i.dataset_id == dataset_id]
    return page(
        request,
        "registry.html",
        who,
        d=dataset,
        schema=pretty(dataset.schema_),
        transforms=steps,
        inboxes=shown,
        steps=pretty(steps.steps),
        preview=preview,
        tried_records=tried.get("records") if tried else "",
        tried_steps=tried.get("steps") if tried else pretty(steps.steps),
    )


@router.post("/clients/{client_id}/datasets/{dataset_id}/schema")
def add_version(
    client_id: NamePath, dataset_id: NamePath, runtime: ConsoleRuntime, who: Changing, fields: Form
) -> Response:
    _operator(who)
    schema = fields.json("schema")
    if not isinstance(schema, dict):
        raise BadForm("schema: a JSON Schema is a JSON object.")
    with runtime.db.unit_of_work() as session:
        datasets.add_version(
            session,
            author_id=who.principal.author_id,
            client_id=client_id,
            dataset_id=dataset_id,
            schema=schema,
            max_schema_bytes=runtime.settings.max_schema_bytes,
        )
    return redirect(f"/console/clients/{client_id}/datasets/{dataset_id}")


@router.post("/clients/{client_id}/datasets/{dataset_id}/transforms")
def set_transforms(
    client_id: NamePath, dataset_id: NamePath, runtime: ConsoleRuntime, who: Changing, fields: Form
) -> Response:
    _operator(who)
    body = TransformsUpdate.model_validate({"steps": fields.json("steps")})
    with runtime.db.unit_of_work() as session:
        transform_service.set_steps(
            session,
            author_id=who.principal.author_id,
            client_id=client_id,
            dataset_id=dataset_id,
            steps=body.steps,
        )
    return redirect(f"/console/clients/{client_id}/datasets/{dataset_id}")


@router.post("/clients/{client_id}/datasets/{dataset_id}/preview")
def preview_transforms(
    request: Request,
    client_id: NamePath,
    dataset_id: NamePath,
    runtime: ConsoleRuntime,
    who: Changing,
    fields: Form,
) -> HTMLResponse:
    """How records would fare with the steps typed in (nothing stored)."""
    _operator(who)
    body = PreviewRequest.model_validate(
        {
            "records": fields.json("records"),
            "steps": fields.json("steps") if fields.get("steps").strip() else None,
        }
    )
    result = transform_service.preview(
        runtime.db,
        client_id=client_id,
        dataset_id=dataset_id,
        records=body.records,
        steps=body.steps,
    )
    shown = [(r, None if r.output is None else pretty(r.output)) for r in result.results]
    return _registry(request, runtime, who, client_id, dataset_id, preview=shown, tried=fields)
