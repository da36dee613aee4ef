"""Who calls: the bearer token verified, its credential rate-limited, its scopes
checked; one alias per scope for the routers of every domain."""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Depends, Request, Security
from fastapi.openapi.models import OAuthFlowClientCredentials, OAuthFlows
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer, OAuth2, SecurityScopes

from headwater.errors import InsufficientScope, MissingToken, RateLimited
from headwater.identity.tokens import SCOPES, Principal, TokenVerifier
from headwater.web.deps import Services, get_runtime


class IdentityServices(Services, Protocol):
    """The running service's parts that identity uses."""

    verifier: TokenVerifier


IdentityRuntime = Annotated[IdentityServices, Depends(get_runtime)]

oauth2 = OAuth2(
    flows=OAuthFlows(
        clientCredentials=OAuthFlowClientCredentials(tokenUrl="/oauth/token", scopes=SCOPES)
    ),
    scheme_name="oauth2",
    description=(
        "OAuth 2.0 client credentials. `POST /oauth/token` with `client_id`, "
        "`client_secret` and `audience`, then send `Authorization: Bearer <access_token>`. "
        "The flow's token URL names this API's audience in its query, so a client that "
        "sends no `audience` of its own (this page's Authorize) gets a token for it."
    ),
    auto_error=False,
)
# The same header, named as a bearer scheme too, so that a token got elsewhere (curl, the
# Python client) can be pasted on the docs page: either scheme authorises a call.
bearer = HTTPBearer(
    scheme_name="bearer",
    bearerFormat="JWT",
    description="An access token from `POST /oauth/token`, sent as `Authorization: Bearer`.",
    auto_error=False,
)


async def principal(
    security_scopes: SecurityScopes,
    request: Request,
    authorization: Annotated[str | None, Depends(oauth2)],
    _pasted: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """Verify the bearer token (no database access), rate-limit its credential, check scopes.

    The rate-limit decision goes into the request state; the observability middleware
    writes its RateLimit-* fields on whatever response the request ends with.
    """
    if not authorization:
        raise MissingToken()
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise MissingToken()
    runtime: IdentityServices = request.app.state.runtime
    caller = await runtime.verifier.verify(token)
    request.state.subject = caller.subject
    decision = await runtime.limiter.hit("credential:" + caller.subject)
    request.state.rate_limit = decision
    if not decision.allowed:
        raise RateLimited(f"Rate limit exceeded; retry in {decision.retry_after} s.")
    missing = [s for s in security_scopes.scopes if s not in caller.scopes]
    if missing:
        raise InsufficientScope(missing)
    return caller


Authenticated = Annotated[Principal, Security(principal)]
Admin = Annotated[Principal, Security(principal, scopes=["admin"])]
DataWrite = Annotated[Principal, Security(principal, scopes=["data:write"])]
DataRead = Annotated[Principal, Security(principal, scopes=["data:read"])]
WorkflowsRead = Annotated[Principal, Security(principal, scopes=["workflows:read"])]
WorkflowsWrite = Annotated[Principal, Security(principal, scopes=["workflows:write"])]
ActivitiesRead = Annotated[Principal, Security(principal, scopes=["activities:read"])]
EventsRead = Annotated[Principal, Security(principal, scopes=["events:read"])]
WebhooksManage = Annotated[Principal, Security(principal, scopes=["webhooks:manage"])]
DataErase = Annotated[Principal, Security(principal, scopes=["data:erase"])]
