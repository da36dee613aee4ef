"""Access tokens: what a verified token grants (Principal), signing and verification."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from headwater.errors import Forbidden, InvalidToken
from headwater.identity.keys import KeyCache
from headwater.kit.actor import Actor

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

# PyJWT is imported where it is used (identity/keys.py says why).

SCOPES: dict[str, str] = {
    "data:write": "Push records and ask for file upload URLs.",
    "data:read": "Read records, transactions and datasets.",
    "workflows:read": "Read workflow categories, templates, workflows and tasks.",
    "workflows:write": "Create, change and delete workflow configuration.",
    "activities:read": "Search the activity log.",
    "events:read": "Read the event feed.",
    "webhooks:manage": "Manage webhook endpoints, read their deliveries and replay events.",
    "data:erase": "Erase data subjects' records everywhere, and list or lift suppressions.",
    "admin": "Operator: manage companies, clients, credentials and datasets.",
}
COMPANY_SCOPES = frozenset(SCOPES) - {"admin"}
GRANT_TYPE = "client_credentials"
VERIFIED_CACHE_SIZE = 10_000


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, as a verified token says; built without touching the database."""

    subject: str
    author_id: uuid.UUID
    company_id: uuid.UUID | None
    client_ids: tuple[str, ...]
    scopes: frozenset[str]

    @property
    def is_operator(self) -> bool:
        return "admin" in self.scopes

    @property
    def actor(self) -> Actor:
        """The company and author a company-scoped call acts as; operators have none."""
        if self.company_id is None:
            raise Forbidden("This call needs a token bound to a company.")
        return Actor(company_id=self.company_id, author_id=self.author_id)

    def may_use_client(self, client_id: str) -> bool:
        """An empty list of ingestion clients means all of the company's."""
        return not self.client_ids or client_id in self.client_ids


@dataclass(frozen=True, slots=True)
class _Verified:
    principal: Principal
    not_before: float
    expires: float
    generation: int


def sign_token(
    *,
    private_key: PrivateKeyTypes,
    kid: str,
    algorithm: str,
    issuer: str,
    audience: str,
    subject: str,
    scopes: list[str],
    company_id: uuid.UUID | None,
    client_ids: list[str],
    author_id: uuid.UUID,
    lifetime: int,
) -> str:
    import jwt

    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": issuer,
        "sub": subject,
        "aud": audience,
        "iat": now,
        "nbf": now,
        "exp": now + lifetime,
        "jti": uuid.uuid4().hex,
        "scope": " ".join(scopes),
        "gty": GRANT_TYPE,
        "company_id": str(company_id) if company_id else None,
        "client_ids": client_ids,
        "author_id": str(author_id),
    }
    return jwt.encode(claims, private_key, algorithm=algorithm, headers={"kid": kid})  # type: ignore[arg-type]


@cache
def _decode_errors() -> list[tuple[type[Exception], str]]:
    """What each of PyJWT's refusals tells the caller."""
    import jwt

    return [
        (jwt.ExpiredSignatureError, "The token has expired."),
        (jwt.ImmatureSignatureError, "The token is not valid yet (nbf or iat in the future)."),
        (jwt.InvalidAudienceError, "The token was issued for another audience."),
        (jwt.InvalidIssuerError, "The token was issued by another issuer."),
        (jwt.InvalidSignatureError, "The token's signature does not verify."),
        (jwt.MissingRequiredClaimError, "The token lacks a required claim."),
    ]


@dataclass(frozen=True, slots=True)
class Revocations:
    """Credentials (token `sub`) and companies revoked: their tokens no longer verify.
    Held in memory, refreshed from the database in the background (`revocations`)."""

    credentials: frozenset[str] = frozenset()
    companies: frozenset[uuid.UUID] = frozenset()

    def covers(self, principal: Principal) -> bool:
        return principal.subject in self.credentials or (
            principal.company_id is not None and principal.company_id in self.companies
        )


REVOKED = "The token's credential or company has been revoked."


class TokenVerifier:
    """Checks a bearer token's signature, algorithm, issuer, audience and times, and
    that neither its credential nor its company is revoked."""

    def __init__(
        self,
        *,
        keys: KeyCache,
        issuer: str,
        audience: str,
        algorithms: list[str],
        claim_map: Mapping[str, str],
        leeway: int,
    ) -> None:
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.algorithms = [a for a in algorithms if not a.upper().startswith(("HS", "NONE"))]
        self.claim_map = dict(claim_map)
        self.leeway = leeway
        self.revoked = Revocations()
        self._verified: dict[str, _Verified] = {}

    def revoke(self, *, credential: str | None = None, company: uuid.UUID | None = None) -> None:
        """Revoke at once in this process (other processes learn it at their next refresh)."""
        self.revoked = Revocations(
            credentials=self.revoked.credentials | ({credential} if credential else set()),
            companies=self.revoked.companies | ({company} if company else set()),
        )

    async def verify(self, token: str) -> Principal:
        """The principal of a valid token; raises InvalidToken otherwise.

        A token that verified before is answered from memory while its time window holds
        and the key set is unchanged: the signature over the same bytes cannot change.
        """
        hit = self._verified.get(token)
        if hit is not None and hit.generation == self.keys.generation:
            now = time.time()
            if hit.not_before - self.leeway <= now <= hit.expires + self.leeway:
                if self.revoked.covers(hit.principal):
                    raise InvalidToken(REVOKED)
                return hit.principal
            del self._verified[token]
        principal, claims = await self._verify(token)
        if self.revoked.covers(principal):
            raise InvalidToken(REVOKED)
        if len(self._verified) >= VERIFIED_CACHE_SIZE:
            del self._verified[next(iter(self._verified))]  # the oldest entry
        self._verified[token] = _Verified(
            principal=principal,
            not_before=float(max(claims.get("nbf", 0), claims["iat"])),
            expires=float(claims["exp"]),
            generation=self.keys.generation,
        )
        return principal

    async def _verify(self, token: str) -> tuple[Principal, dict[str, Any]]:
        import jwt

        if "=" in token:  # RFC 7515: base64url without padding
            raise InvalidToken("The token is not a well-formed JWT (base64url has no padding).")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("The token is not a well-formed JWT.") from None
        algorithm = header.get("alg")
        if algorithm not in self.algorithms:
            raise InvalidToken(f"Tokens signed with {algorithm!r} are not accepted.")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("The token header names no key (kid).")
        key = await self.keys.get(kid)
        if key is None:
            raise InvalidToken("The token was signed with an unknown key.")
        if key.algorithm_name != algorithm:
            raise InvalidToken("The token's algorithm does not match its key.")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            detail = next(
                (text for cls, text in _decode_errors() if isinstance(exc, cls)),
                "The token is invalid.",
            )
            raise InvalidToken(detail) from None
        for name in ("exp", "iat", "nbf"):  # RFC 7519 NumericDate: a JSON number
            value = claims.get(name)
            if name in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise InvalidToken(f"The token's {name} claim is not a NumericDate.")
        return self._principal(claims), claims

    def _claim(self, claims: Mapping[str, Any], name: str) -> Any:
        return claims.get(self.claim_map.get(name, name))

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        raw_scope = self._claim(claims, "scope") or ""
        scopes = raw_scope.split() if isinstance(raw_scope, str) else list(raw_scope)
        raw_clients = self._claim(claims, "client_ids") or []
        if not isinstance(raw_clients, list) or not all(isinstance(c, str) for c in raw_clients):
            raise InvalidToken("The token's client_ids claim is not a list of strings.")
        company_id = _uuid_claim(self._claim(claims, "company_id"), "company_id")
        author_id = _uuid_claim(self._claim(claims, "author_id"), "author_id") or uuid.uuid5(
            uuid.NAMESPACE_URL, f"{claims['iss']}#{claims['sub']}"
        )
        return Principal(
            subject=str(claims["sub"]),
            author_id=author_id,
            company_id=company_id,
            client_ids=tuple(raw_clients),
            scopes=frozenset(str(s) for s in scopes),
        )


def _uuid_claim(value: Any, name: str) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidToken(f"The token's {name} claim is not a uuid.") from None
