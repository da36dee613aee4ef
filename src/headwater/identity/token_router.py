"""The embedded identity provider: token endpoint, JWKS and discovery (contract section 2)."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from urllib.parse import parse_qs, unquote_plus

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from headwater.errors import BadRequest
from headwater.identity import service
from headwater.identity.deps import IdentityRuntime
from headwater.identity.errors import OAuthError
from headwater.identity.schemas import OAuthErrorBody, TokenRequest, TokenResponse
from headwater.identity.tokens import GRANT_TYPE, SCOPES
from headwater.kit import strictjson
from headwater.kit.gate import GateFull
from headwater.web.deps import StrictRoute


class _TokenRoute(StrictRoute):
    """The token endpoint's query is checked as every route's (no unknown parameter, no
    U+0000), and refused as RFC 6749 5.2 says: `invalid_request`, not problem+json."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def oauth(request: Request) -> Response:
            try:
                return await handler(request)
            except BadRequest as refused:
                raise OAuthError("invalid_request", refused.detail) from None

        return oauth


router = APIRouter(tags=["identity provider"], route_class=StrictRoute)
grants = APIRouter(tags=["identity provider"], route_class=_TokenRoute)  # POST /oauth/token

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_FIELDS = ("grant_type", "client_id", "client_secret", "audience", "scope")


def _oauth_errors() -> dict[int | str, dict[str, Any]]:
    def example(error: str, description: str) -> dict[str, Any]:
        return {
            "model": OAuthErrorBody,
            "content": {
                "application/json": {"example": {"error": error, "error_description": description}}
            },
        }

    return {
        400: example("invalid_request", "The audience parameter is required.")
        | {"description": "`invalid_request`, `unsupported_grant_type` or `invalid_scope`."},
        401: example("invalid_client", "Client authentication failed.")
        | {
            "description": "Unknown client, wrong secret or revoked credential (indistinguishable)."
        },
        403: example("access_denied", "This client may not request tokens for audience 'x'.")
        | {"description": "The audience is not this API's."},
        429: example("temporarily_unavailable", "Too many token requests; retry in 1 s.")
        | {"description": "Too many token requests for this client id."},
    }


REFUSAL_PAUSE_SECONDS = 1.0


def _too_many_failures() -> OAuthError:
    return OAuthError(
        "temporarily_unavailable",
        "Too many failed token requests from this address; retry in a minute.",
        status=429,
        headers={"Retry-After": "60"},
    )


async def _parameters(request: Request, in_url: str | None) -> dict[str, str]:
    """The token request's parameters from a JSON or form body plus HTTP Basic, and the
    audience from the URL's query when the body has none."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = await request.body()
    params: dict[str, Any]
    if media_type == "application/json":
        settings = request.app.state.runtime.settings
        try:
            params = strictjson.loads(raw or b"null", max_depth=settings.max_json_depth)
        except strictjson.StrictJSONError as exc:
            raise OAuthError("invalid_request", f"The body is not accepted JSON: {exc}.") from None
        if not isinstance(params, dict):
            raise OAuthError("invalid_request", "The JSON body must be an object.")
    elif media_type == "application/x-www-form-urlencoded":
        try:
            pairs = parse_qs(raw.decode(), keep_blank_values=True, strict_parsing=bool(raw))
        except (ValueError, UnicodeDecodeError):
            raise OAuthError("invalid_request", "The form body is malformed.") from None
        repeated = sorted(k for k, v in pairs.items() if len(v) > 1)
        if repeated:
            raise OAuthError("invalid_request", f"Parameters given twice: {', '.join(repeated)}.")
        params = {k: v[0] for k, v in pairs.items()}
    else:
        raise OAuthError(
            "invalid_request",
            "Send the token request as application/json or application/x-www-form-urlencoded.",
        )
    values = {k: params[k] for k in _FIELDS if k in params and params[k] is not None}
    # the token URL may name the audience in its query (RFC 6749 3.2 lets an endpoint's
    # URL carry one): the docs page's OAuth flow sends no `audience` of its own
    if in_url is not None and values.setdefault("audience", in_url) != in_url:
        raise OAuthError("invalid_request", "audience differs between the URL and the body.")
    wrong = sorted(k for k, v in values.items() if not isinstance(v, str))
    if wrong:
        raise OAuthError("invalid_request", f"Parameters must be strings: {', '.join(wrong)}.")
    with_nul = sorted(k for k, v in values.items() if "\x00" in v)
    if with_nul:
        raise OAuthError(
            "invalid_request", f"Parameters hold a NUL (U+0000) character: {', '.join(with_nul)}."
        )
    basic = _basic_credentials(request.headers.get("authorization"))
    if basic is not None:
        if "client_secret" in values:
            raise OAuthError(
                "invalid_request", "Use one client authentication method, not Basic and body both."
            )
        basic_id, values["client_secret"] = basic
        if values.setdefault("client_id", basic_id) != basic_id:
            raise OAuthError("invalid_request", "client_id differs from the Basic credentials.")
    return values


def _basic_credentials(header: str | None) -> tuple[str, str] | None:
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise OAuthError("invalid_request", "The Basic credentials are not valid base64.") from None
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        raise OAuthError("invalid_request", "The Basic credentials lack a ':'.")
    # RFC 6749 2.3.1: both halves are form-urlencoded before base64.
    return unquote_plus(client_id), unquote_plus(secret)


@grants.post(
    "/oauth/token",
    summary="Get an access token (OAuth 2.0 client credentials)",
    response_model=TokenResponse,
    responses=_oauth_errors(),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": TokenRequest.model_json_schema(),
                    "example": {
                        "client_id": "hw_3kT9wLq0PzV8mN2bXc4rYs7d",
                        "client_secret": "q1V7c3b0ZrZ8yA1o0y2o8tJm3iJvC0QdM3y7lqQnKxE",
                        "audience": "headwater-api",
                        "grant_type": "client_credentials",
                    },
                },
                "application/x-www-form-urlencoded": {"schema": TokenRequest.model_json_schema()},
            },
        }
    },
)
async def token(
    request: Request,
    runtime: IdentityRuntime,
    audience: Annotated[
        str | None,
        Query(
            description="The audience, when the body names none (the token URL of this "
            "API's OAuth flow carries it). Given in both, the two must be equal.",
            examples=["headwater-api"],
        ),
    ] = None,
) -> JSONResponse:
    """Exchange a client id and secret (in the body, or HTTP Basic) for a signed JWT.

    Errors follow RFC 6749 section 5.2 (`{"error", "error_description"}`), not problem+json.
    """
    params = await _parameters(request, audience)
    missing = [k for k in ("client_id", "client_secret", "audience") if not params.get(k)]
    if missing:
        raise OAuthError("invalid_request", f"Missing parameter: {', '.join(missing)}.")
    if params.get("grant_type", GRANT_TYPE) != GRANT_TYPE:
        raise OAuthError("unsupported_grant_type", f"Only grant_type={GRANT_TYPE} is supported.")
    decision = await runtime.limiter.hit("token:" + params["client_id"])
    if not decision.allowed:
        raise OAuthError(
            "temporarily_unavailable",
            f"Too many token requests; retry in {decision.retry_after} s.",
            status=429,
            headers=decision.headers(),
        )
    address = request.client.host if request.client else "unknown"
    if runtime.token_failures.refused(address):
        # answered after a pause (a tarpit): a client looping on refusals from one
        # connection sends one request a second instead of thousands
        await asyncio.sleep(REFUSAL_PAUSE_SECONDS)
        raise _too_many_failures()

    def issue() -> service.TokenGrant:
        # a read session: on SQLite it never waits for the writer (a file being stored)
        with runtime.db.read_session() as session:
            return service.issue_token(
                session,
                runtime.settings,
                client_id=params["client_id"],
                client_secret=params["client_secret"],
                audience=params["audience"],
                scope=params.get("scope"),
            )

    try:
        grant = await runtime.secret_checks.run(issue)
    except GateFull:
        raise OAuthError(
            "temporarily_unavailable",
            "The token endpoint is busy; retry in 1 s.",
            status=429,
            headers={"Retry-After": "1"},
        ) from None
    except OAuthError as refused:
        if refused.error == "invalid_client":
            await runtime.token_failures.failed(address)
        raise
    runtime.verifier.keys.remember(grant.public_jwk)
    body = TokenResponse(
        access_token=grant.access_token, expires_in=grant.expires_in, scope=grant.scope
    )
    return JSONResponse(body.model_dump(), headers=NO_STORE)


@router.get("/.well-known/jwks.json", summary="Token verification keys (JWKS)")
async def jwks(runtime: IdentityRuntime) -> JSONResponse:
    """Every public key that verifies tokens, newest (the signing key) first."""

    def load() -> dict[str, Any]:
        with runtime.db.unit_of_work() as session:
            return service.jwks(session)

    return JSONResponse(
        await run_in_threadpool(load), headers={"Cache-Control": "public, max-age=300"}
    )


@router.get("/.well-known/openid-configuration", summary="OpenID provider discovery")
async def discovery(runtime: IdentityRuntime) -> dict[str, Any]:
    base = runtime.settings.public_url.rstrip("/")
    return {
        "issuer": runtime.settings.token_issuer,
        "token_endpoint": f"{base}/oauth/token",
        "jwks_uri": f"{base}/.well-known/jwks.json",
        "grant_types_supported": [GRANT_TYPE],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": sorted(SCOPES),
        "response_types_supported": ["token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "claims_supported": [
            "iss",
            "sub",
            "aud",
            "iat",
            "nbf",
            "exp",
            "jti",
            "scope",
            "gty",
            "company_id",
            "client_ids",
            "author_id",
        ],
    }
