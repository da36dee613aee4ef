"""Console sign-in sessions: begun with an API credential's id and secret, looked up on
every page, ended by signing out, by time, or by revoking the credential or company."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from headwater.console.models import ConsoleSession
from headwater.identity import service as identity
from headwater.identity.tokens import Principal
from headwater.kit.clock import utcnow


@dataclass(frozen=True, slots=True)
class SignedIn:
    """Who a browser is signed in as, and the CSRF token of its forms."""

    principal: Principal
    csrf: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Started:
    """A session just begun: the cookie's value exists only here."""

    token: str
    signed_in: SignedIn


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def sign_in(session: Session, *, client_id: str, client_secret: str, hours: int) -> Started:
    """A new session for a credential and its secret (`invalid_client` if they do not
    match, or it or its company is revoked). Sessions that have expired go at the same
    time, so the table holds only live ones and those revoked since."""
    credential = identity.authenticate(session, client_id=client_id, client_secret=client_secret)
    now = utcnow()
    session.execute(delete(ConsoleSession).where(ConsoleSession.expires_at <= now))
    token = secrets.token_urlsafe(32)
    row = ConsoleSession(
        token_hash=_hash(token),
        credential_id=credential.client_id,
        company_id=credential.company_id,
        csrf=secrets.token_urlsafe(32),
        created_at=now,
        expires_at=now + timedelta(hours=hours),
    )
    session.add(row)
    session.flush()
    principal = identity.active_principal(session, credential.client_id)
    assert principal is not None  # authenticated a moment ago, in this transaction
    return Started(token=token, signed_in=SignedIn(principal, row.csrf, row.expires_at))


def signed_in(session: Session, token: str) -> SignedIn | None:
    """The session of a cookie's token, if it has not expired and neither its credential
    nor its company is revoked (checked on every call: revocation ends it at once)."""
    row = session.scalars(
        select(ConsoleSession).where(ConsoleSession.token_hash == _hash(token))
    ).one_or_none()
    if row is None or row.expires_at <= utcnow():
        return None
    principal = identity.active_principal(session, row.credential_id)
    if principal is None:
        return None
    return SignedIn(principal, row.csrf, row.expires_at)


def sign_out(session: Session, token: str) -> None:
    session.execute(delete(ConsoleSession).where(ConsoleSession.token_hash == _hash(token)))
