"""FastAPI dependencies: the session, the calling principal, and one alias per scope."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Concatenate, ParamSpec, TypeVar

from fastapi import Depends, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.models import OAuthFlowClientCredentials, OAuthFlows
from fastapi.security import OAuth2, SecurityScopes
from sqlalchemy.orm import Session

from headwater.errors import InsufficientScope, MissingToken, RateLimited
from headwater.identity.tokens import SCOPES, Principal
from headwater.kit.pagination import PageQuery
from headwater.runtime import Runtime

oauth2 = OAuth2(
    flows=OAuthFlows(
        clientCredentials=OAuthFlowClientCredentials(tokenUrl="/oauth/token", scopes=SCOPES)
    ),
    scheme_name="oauth2",
    description=(
        "OAuth 2.0 client credentials. `POST /oauth/token` with `client_id`, "
        "`client_secret` and `audience`, then send `Authorization: Bearer <access_token>`."
    ),
    auto_error=False,
)


async def get_runtime(request: Request) -> Runtime:
    # async: a sync dependency would cost every request a hop through the thread pool
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_session(runtime: RuntimeDep) -> Iterator[Session]:
    """A session for one request. Services commit; anything uncommitted is rolled back."""
    with runtime.db.session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def get_read_session(runtime: RuntimeDep) -> Iterator[Session]:
    """A session for routes that only read: no transaction round trips on PostgreSQL."""
    with runtime.db.read_session() as session:
        yield session


ReadSessionDep = Annotated[Session, Depends(get_read_session)]

P = ParamSpec("P")
T = TypeVar("T")


class Reader:
    """Runs a read-only service function on a read session, in the thread pool.

    For `async` routes on hot read paths: the session opens, runs and closes in one
    thread-pool hop, where a `ReadSessionDep` and a sync route take three (the
    dependency's enter and exit, then the route).
    """

    def __init__(self, runtime: Runtime) -> None:
        self._db = runtime.db

    def _run(self, call: Callable[[Session], T]) -> T:
        with self._db.read_session() as session:
            return call(session)

    async def __call__(
        self, fn: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await run_in_threadpool(self._run, lambda session: fn(session, *args, **kwargs))


async def get_reader(runtime: RuntimeDep) -> Reader:
    return Reader(runtime)


ReaderDep = Annotated[Reader, Depends(get_reader)]

# `page` and `page_size` of a list without other parameters; unknown parameters answer 400.
Paging = Annotated[PageQuery, Query()]


async def principal(
    security_scopes: SecurityScopes,
    request: Request,
    authorization: Annotated[str | None, Depends(oauth2)],
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
    runtime: Runtime = request.app.state.runtime
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
