"""Identity use cases: companies, ingestion clients, credentials, signing keys, tokens."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from headwater.config import Settings
from headwater.db import dialect_insert
from headwater.identity import keys as keyring
from headwater.identity.errors import (
    ClientExists,
    ClientNotFound,
    CompanyNotFound,
    CredentialNotFound,
    InvalidCredentialRequest,
    OAuthError,
    invalid_client,
)
from headwater.identity.models import (
    Company,
    Credential,
    IngestionClient,
    SigningKey,
    TokenIssuer,
)
from headwater.identity.secrets import hash_secret, new_client_id, new_secret, verify_secret
from headwater.identity.tokens import COMPANY_SCOPES, SCOPES, Principal, Revocations, sign_token
from headwater.kit.clock import utcnow
from headwater.kit.pagination import PageQuery, paginate

if TYPE_CHECKING:
    import jwt

# --- companies ---------------------------------------------------------------------------


def create_company(session: Session, *, name: str) -> Company:
    company = Company(id=uuid.uuid4(), name=name, created_at=utcnow())
    session.add(company)
    session.flush()
    return company


def get_company(session: Session, company_id: uuid.UUID) -> Company:
    company = session.get(Company, company_id)
    if company is None:
        raise CompanyNotFound(f"No company has the id {company_id}.")
    return company


def list_companies(session: Session, *, params: PageQuery) -> tuple[Sequence[Company], int]:
    return paginate(session, select(Company), Company.created_at, Company.id, params=params)


def revoke_company(session: Session, company_id: uuid.UUID) -> None:
    """Revoke a company and with it each of its credentials: none gets a token any more,
    and each lists with its `revoked_at`."""
    company = get_company(session, company_id)
    now = utcnow()
    company.revoked_at = company.revoked_at or now
    session.execute(
        update(Credential)
        .where(Credential.company_id == company_id, Credential.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    session.flush()


# --- ingestion clients -------------------------------------------------------------------


def create_client(
    session: Session, *, company_id: uuid.UUID, client_id: str, name: str
) -> IngestionClient:
    get_company(session, company_id)
    if session.get(IngestionClient, client_id) is not None:
        raise ClientExists(f"The ingestion client id {client_id!r} is taken.")
    client = IngestionClient(
        client_id=client_id, company_id=company_id, name=name, created_at=utcnow()
    )
    try:
        with session.begin_nested():  # a savepoint: the unit of work goes on
            session.add(client)
    except IntegrityError:  # a concurrent create of the same id won
        raise ClientExists(f"The ingestion client id {client_id!r} is taken.") from None
    return client


def get_client_by_id(session: Session, client_id: str) -> IngestionClient:
    """An ingestion client whatever its company (operators); 404 if there is none."""
    client = session.get(IngestionClient, client_id)
    if client is None:
        raise ClientNotFound(f"No ingestion client {client_id!r}.")
    return client


def get_client(session: Session, *, company_id: uuid.UUID, client_id: str) -> IngestionClient:
    client = session.get(IngestionClient, client_id)
    if client is None or client.company_id != company_id:
        raise ClientNotFound(f"Company {company_id} has no ingestion client {client_id!r}.")
    return client


def list_clients(
    session: Session, *, company_id: uuid.UUID, params: PageQuery
) -> tuple[Sequence[IngestionClient], int]:
    get_company(session, company_id)
    query = select(IngestionClient).where(IngestionClient.company_id == company_id)
    return paginate(
        session, query, IngestionClient.created_at, IngestionClient.client_id, params=params
    )


def revoke_client(session: Session, *, company_id: uuid.UUID, client_id: str) -> None:
    client = get_client(session, company_id=company_id, client_id=client_id)
    client.revoked_at = client.revoked_at or utcnow()
    session.flush()


# --- credentials -------------------------------------------------------------------------


@dataclass(frozen=True)
class IssuedCredential:
    """A credential just created, with the only copy of its secret."""

    credential: Credential
    client_secret: str


def create_credential(
    session: Session,
    *,
    company_id: uuid.UUID | None,
    name: str,
    scopes: Sequence[str],
    client_ids: Sequence[str] = (),
    client_id: str | None = None,
    client_secret: str | None = None,
) -> IssuedCredential:
    """Create a company credential, or an operator one when `company_id` is None."""
    allowed = COMPANY_SCOPES if company_id is not None else frozenset(SCOPES)
    bad_scopes = sorted(set(scopes) - allowed)
    if bad_scopes:
        raise InvalidCredentialRequest(
            f"Scopes not grantable to this credential: {', '.join(bad_scopes)}.",
            errors=[
                {"location": "body", "field": "/scopes", "message": f"not allowed: {s}"}
                for s in bad_scopes
            ],
        )
    if company_id is not None:
        get_company(session, company_id)
        check_client_ids(session, company_id=company_id, client_ids=client_ids)
    elif client_ids:
        raise InvalidCredentialRequest("Operator credentials are not bound to ingestion clients.")
    secret = client_secret or new_secret()
    credential = Credential(
        client_id=client_id or new_client_id(),
        secret_hash=hash_secret(secret),
        name=name,
        company_id=company_id,
        author_id=uuid.uuid4(),
        scopes=sorted(set(scopes)),
        client_ids=list(dict.fromkeys(client_ids)),
        created_at=utcnow(),
    )
    session.add(credential)
    session.flush()
    return IssuedCredential(credential=credential, client_secret=secret)


def check_client_ids(session: Session, *, company_id: uuid.UUID, client_ids: Sequence[str]) -> None:
    if not client_ids:
        return
    found = set(
        session.scalars(
            select(IngestionClient.client_id).where(
                IngestionClient.company_id == company_id,
                IngestionClient.client_id.in_(client_ids),
            )
        )
    )
    missing = [c for c in client_ids if c not in found]
    if missing:
        raise InvalidCredentialRequest(
            f"Company {company_id} has no ingestion client {', '.join(map(repr, missing))}.",
            errors=[
                {"location": "body", "field": "/client_ids", "message": f"unknown: {c}"}
                for c in missing
            ],
        )


def get_credential(
    session: Session, client_id: str, *, company_id: uuid.UUID | None = None
) -> Credential:
    credential = session.get(Credential, client_id)
    if credential is None or (company_id is not None and credential.company_id != company_id):
        raise CredentialNotFound(f"No credential has the client id {client_id!r}.")
    return credential


def list_credentials(
    session: Session, *, company_id: uuid.UUID, params: PageQuery
) -> tuple[Sequence[Credential], int]:
    get_company(session, company_id)
    query = select(Credential).where(Credential.company_id == company_id)
    return paginate(session, query, Credential.created_at, Credential.client_id, params=params)


def revocations(session: Session, *, since: datetime) -> Revocations:
    """Credentials revoked since `since` (tokens older than that have expired anyway) and
    every revoked company: what the token verifier refuses."""
    credentials = session.scalars(
        select(Credential.client_id).where(Credential.revoked_at >= since)
    ).all()
    companies = session.scalars(select(Company.id).where(Company.revoked_at.is_not(None))).all()
    return Revocations(credentials=frozenset(credentials), companies=frozenset(companies))


def revoke_credential(session: Session, client_id: str) -> None:
    credential = get_credential(session, client_id)
    credential.revoked_at = credential.revoked_at or utcnow()
    session.flush()


def ensure_credential(
    session: Session,
    *,
    client_id: str,
    client_secret: str,
    name: str,
    company_id: uuid.UUID | None,
    scopes: Sequence[str],
    client_ids: Sequence[str] = (),
) -> Credential:
    """Create a credential with this id and secret, or reset an existing one to them."""
    credential = session.get(Credential, client_id)
    if credential is None:
        return create_credential(
            session,
            company_id=company_id,
            name=name,
            scopes=scopes,
            client_ids=client_ids,
            client_id=client_id,
            client_secret=client_secret,
        ).credential
    if credential.company_id != company_id:
        raise InvalidCredentialRequest(
            f"The credential {client_id!r} belongs to another company or is an operator's."
        )
    if not verify_secret(credential.secret_hash, client_secret):
        credential.secret_hash = hash_secret(client_secret)
    credential.scopes = sorted(set(scopes))
    credential.client_ids = list(dict.fromkeys(client_ids))
    credential.revoked_at = None
    session.flush()
    return credential


# --- signing keys ------------------------------------------------------------------------


def current_signing_key(session: Session, *, passphrase: str | None) -> SigningKey:
    """The newest key, made on first use."""
    key = session.scalars(
        select(SigningKey).order_by(SigningKey.created_at.desc(), SigningKey.kid).limit(1)
    ).first()
    return key or rotate_signing_key(session, passphrase=passphrase)


def rotate_signing_key(session: Session, *, passphrase: str | None) -> SigningKey:
    """Add a new signing key; older keys keep verifying until removed."""
    kid, pem, jwk = keyring.generate_rsa_key(passphrase)
    key = SigningKey(
        kid=kid,
        algorithm=keyring.ALGORITHM,
        private_key_pem=pem,
        public_jwk=jwk,
        created_at=utcnow(),
    )
    session.add(key)
    session.flush()
    return key


def list_signing_keys(session: Session) -> Sequence[SigningKey]:
    return session.scalars(select(SigningKey).order_by(SigningKey.created_at.desc())).all()


def remove_signing_key(session: Session, kid: str) -> None:
    """Remove a key: tokens it signed stop verifying. The newest key cannot be removed."""
    keys = list_signing_keys(session)
    if not any(k.kid == kid for k in keys):
        raise InvalidCredentialRequest(f"No signing key has the kid {kid!r}.")
    if keys[0].kid == kid:
        raise InvalidCredentialRequest("The current signing key cannot be removed; rotate first.")
    session.delete(next(k for k in keys if k.kid == kid))
    session.flush()


def jwks(session: Session) -> dict[str, Any]:
    return {"keys": [k.public_jwk for k in list_signing_keys(session)]}


def verification_keys(session: Session) -> dict[str, jwt.PyJWK]:
    return keyring.public_keys(jwks(session), [keyring.ALGORITHM])


# --- tokens ------------------------------------------------------------------------------


def authenticate(session: Session, *, client_id: str, client_secret: str) -> Credential:
    """The credential of a client id and secret, neither it nor its company revoked;
    raises `invalid_client` otherwise (the same answer for every reason). The secret's
    hash is checked even for an unknown id, so the time taken tells nothing."""
    credential = session.get(Credential, client_id)
    ok = verify_secret(credential.secret_hash if credential else None, client_secret)
    if credential is None or not ok or not _active(session, credential):
        raise invalid_client()
    return credential


def active_principal(session: Session, client_id: str) -> Principal | None:
    """The caller a credential is, as its token would say, if neither it nor its company
    is revoked now (the console checks it on every page)."""
    credential = session.get(Credential, client_id)
    if credential is None or not _active(session, credential):
        return None
    return Principal(
        subject=credential.client_id,
        author_id=credential.author_id,
        company_id=credential.company_id,
        client_ids=tuple(credential.client_ids),
        scopes=frozenset(credential.scopes),
    )


def _active(session: Session, credential: Credential) -> bool:
    if credential.revoked_at is not None:
        return False
    if credential.company_id is None:
        return True
    company = session.get(Company, credential.company_id)
    return company is not None and company.revoked_at is None


@dataclass(frozen=True)
class TokenGrant:
    access_token: str
    expires_in: int
    scope: str
    public_jwk: dict[str, Any]


def issue_token(
    session: Session,
    settings: Settings,
    *,
    client_id: str,
    client_secret: str,
    audience: str,
    scope: str | None,
) -> TokenGrant:
    """The client credentials grant: authenticate, check audience and scope, sign."""
    credential = authenticate(session, client_id=client_id, client_secret=client_secret)
    if audience != settings.audience:
        raise OAuthError(
            "access_denied",
            f"This client may not request tokens for audience {audience!r}.",
            status=403,
        )
    granted = credential.scopes
    if scope is not None:
        asked = scope.split()
        refused = sorted(set(asked) - set(granted))
        if refused or not asked:
            raise OAuthError(
                "invalid_scope",
                f"Scopes not granted to this client: {' '.join(refused)}."
                if refused
                else "The scope parameter is empty.",
            )
        granted = sorted(set(asked))
    key = current_signing_key(session, passphrase=settings.signing_key_passphrase)
    token = sign_token(
        private_key=keyring.load_private_key(key.private_key_pem, settings.signing_key_passphrase),
        kid=key.kid,
        algorithm=key.algorithm,
        issuer=settings.token_issuer,
        audience=audience,
        subject=credential.client_id,
        scopes=list(granted),
        company_id=credential.company_id,
        client_ids=list(credential.client_ids),
        author_id=credential.author_id,
        lifetime=settings.token_lifetime_seconds,
    )
    return TokenGrant(
        access_token=token,
        expires_in=settings.token_lifetime_seconds,
        scope=" ".join(granted),
        public_jwk=key.public_jwk,
    )


def token_issuer(session: Session, *, proposed: str, named: bool) -> str:
    """The installation's token issuer: `proposed` when the operator `named` it
    (HEADWATER_ISSUER or HEADWATER_PUBLIC_URL), recorded for the instances that do not;
    else the one recorded by the first instance to start, which is `proposed` if none
    has. Every instance on one database so signs and accepts the same `iss`."""
    now = utcnow()
    insert = dialect_insert(session.get_bind().dialect)(TokenIssuer).values(
        id=1, issuer=proposed, recorded_at=now
    )
    if named:
        session.execute(
            insert.on_conflict_do_update(
                index_elements=["id"], set_={"issuer": proposed, "recorded_at": now}
            )
        )
        return proposed
    session.execute(insert.on_conflict_do_nothing(index_elements=["id"]))
    return str(session.scalars(select(TokenIssuer.issuer).where(TokenIssuer.id == 1)).one())
