"""FastAPI dependencies of every domain: the runtime, the unit of work, read sessions,
paging, and the one strict reading of every request (the caller and its scopes are
identity's: `identity/deps.py`)."""

from __future__ import annotations

from collections import abc
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Concatenate, ParamSpec, Protocol, TypeVar, get_args, get_origin

from fastapi import Depends, Query, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel
from sqlalchemy.orm import Session

from headwater.config import Settings
from headwater.db import Database
from headwater.errors import (
    BadRequest,
    InvalidParameter,
    MalformedJSON,
    UnsupportedMediaType,
)
from headwater.kit import strictjson
from headwater.kit.coalesce import Coalescer
from headwater.kit.gate import Gate
from headwater.kit.pagination import PageQuery
from headwater.kit.ratelimit import FailureLimit, RateLimiter
from headwater.kit.signals import Signals


class Services(Protocol):
    """What routers may use of the running service, whatever their domain.
    `runtime.Runtime` builds it; this layer names only what it needs, and no domain's
    type, so that nothing below the wiring imports it and no domain package imports
    another through it. A domain's router names the parts of its own (the store, the
    push queue, the token verifier) in a protocol of its own that extends this one."""

    settings: Settings
    db: Database
    limiter: RateLimiter
    secret_checks: Gate
    token_failures: FailureLimit
    commits: Signals
    numbering: Coalescer

    def poll(self, polling: float) -> float: ...


async def get_runtime(request: Request) -> Services:
    # async: a sync dependency would cost every request a hop through the thread pool
    runtime: Services = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Services, Depends(get_runtime)]


def get_session(runtime: RuntimeDep) -> Iterator[Session]:
    """The request's unit of work: committed when the route returns, before the response
    is sent (so a failed commit answers its error), rolled back if the route raises."""
    with runtime.db.unit_of_work() as session:
        yield session


# scope="function": the exit (the commit) runs before the response, not after it is sent
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def get_read_session(runtime: RuntimeDep) -> Iterator[Session]:
    """A session for routes that only read: no transaction round trips on PostgreSQL."""
    with runtime.db.read_session() as session:
        yield session


ReadSessionDep = Annotated[Session, Depends(get_read_session)]


def get_replica_session(runtime: RuntimeDep) -> Iterator[Session]:
    """A session for reads that may lag (lists): on the replica, if one is set
    (HEADWATER_DATABASE_READ_URL; docs/scaling.md lists the routes)."""
    with runtime.db.replica_session() as session:
        yield session


ReplicaSessionDep = Annotated[Session, Depends(get_replica_session)]

P = ParamSpec("P")
T = TypeVar("T")


class Reader:
    """Runs a read-only service function on a read session, in the thread pool.

    For `async` routes on hot read paths: the session opens, runs and closes in one
    thread-pool hop, where a `ReadSessionDep` and a sync route take three (the
    dependency's enter and exit, then the route).
    """

    def __init__(self, runtime: Services) -> None:
        self._db = runtime.db

    async def __call__(
        self, fn: Callable[Concatenate[Session, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await self._db.read_on_thread(lambda session: fn(session, *args, **kwargs))


async def get_reader(runtime: RuntimeDep) -> Reader:
    return Reader(runtime)


ReaderDep = Annotated[Reader, Depends(get_reader)]

# `page` and `page_size` of a list without other parameters; unknown parameters answer 400.
Paging = Annotated[PageQuery, Query()]


# --- one reading of every request ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryNames:
    """The query parameters a route declares: all of them, and those that take one value."""

    known: frozenset[str]
    single: frozenset[str]


def _takes_many(annotation: Any) -> bool:
    """Whether a parameter's type holds several values (a list, say, in `X | None` too)."""
    origin = get_origin(annotation)
    if origin in (list, tuple, set, frozenset) or origin is abc.Sequence:
        return True
    return any(_takes_many(arg) for arg in get_args(annotation)) if origin else False


def _query_names(dependant: Dependant) -> QueryNames:
    """Every query parameter name a route (with its dependencies) declares, and those of
    them that take one value; a query model's fields count by their aliases."""
    fields: dict[str, Any] = {}
    stack = [dependant]
    while stack:
        current = stack.pop()
        stack.extend(current.dependencies)
        for field in current.query_params:
            annotation = field.field_info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                fields.update(
                    (f.alias or name, f.annotation) for name, f in annotation.model_fields.items()
                )
            else:
                fields[field.alias] = annotation
    single = frozenset(name for name, kind in fields.items() if not _takes_many(kind))
    return QueryNames(frozenset(fields), single)


def check_request_text(request: Request, *, known_query: QueryNames | None) -> None:
    """400 for a query parameter the route does not know (when `known_query` is given) or
    that takes one value and came more than once, and for U+0000 anywhere in the path or
    the query, naming what holds it."""
    # from the scope: no URL object or query parsing on the hot path (a push has no query)
    if "\x00" in request.scope["path"]:
        raise InvalidParameter(
            "The path holds a NUL (U+0000) character.",
            errors=[{"location": "path", "field": "", "message": "must not contain NUL"}],
        )
    if not request.scope.get("query_string"):
        return
    seen: set[str] = set()
    for name, value in request.query_params.multi_items():
        if known_query is not None and name not in known_query.known:
            raise InvalidParameter(
                f"Unknown query parameter {name!r}; this operation takes "
                + (", ".join(sorted(known_query.known)) or "none")
                + ".",
                errors=[{"location": "query", "field": name, "message": "unknown parameter"}],
            )
        if known_query is not None and name in seen and name in known_query.single:
            raise InvalidParameter(
                f"Query parameter {name!r} is given more than once; it takes one value.",
                errors=[{"location": "query", "field": name, "message": "given more than once"}],
            )
        seen.add(name)
        if "\x00" in name or "\x00" in value:
            raise InvalidParameter(
                f"Query parameter {name!r} holds a NUL (U+0000) character.",
                errors=[{"location": "query", "field": name, "message": "must not contain NUL"}],
            )


def is_json_media(content_type: str | None) -> bool:
    media = (content_type or "").partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class StrictRoute(APIRoute):
    """Every route reads its request one way, before FastAPI's own parsing:

    - a JSON body only as `application/json` (or `+json`; else 415), read by the strict
      parser with the depth limit (duplicate members, NaN, deep nesting: 400), and no
      U+0000 in any of its strings (400 naming the member);
    - no query parameter the route does not declare, and no U+0000 in the path or query.

    Routes that read their own body (the push, the token endpoint, uploads) declare no
    body field and are left to do so.
    """

    # False for routes that judge unknown query parameters themselves (signed URLs: 403)
    refuses_unknown_query = True

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        json_body = self.body_field is not None
        known_query = _query_names(self.dependant) if self.refuses_unknown_query else None

        async def strict(request: Request) -> Response:
            check_request_text(request, known_query=known_query)
            if json_body:
                body = await request.body()
                if body:
                    if not is_json_media(request.headers.get("content-type")):
                        raise UnsupportedMediaType(
                            "Send this body as application/json; got "
                            f"{request.headers.get('content-type') or 'no Content-Type'}."
                        )
                    runtime: Services = request.app.state.runtime
                    try:
                        value = strictjson.loads(body, max_depth=runtime.settings.max_json_depth)
                    except strictjson.StrictJSONError as exc:
                        raise MalformedJSON.of(exc) from None
                    found = next(strictjson.nul_paths(value), None)
                    if found is not None:
                        where = strictjson.pointer(found[0]).replace("\x00", "\\u0000")
                        raise BadRequest(
                            f"The body member at {where or '/'} holds a NUL (U+0000) character.",
                            errors=[
                                {
                                    "location": "body",
                                    "field": where,
                                    "message": "must not contain NUL (U+0000) characters",
                                }
                            ],
                        )
                    request._json = value  # FastAPI's own `await request.json()` reads this
            return await handler(request)

        return strict


class SignedRoute(StrictRoute):
    """A presigned URL's route: a parameter the signature does not cover is the route's
    to refuse (403, as a store does), not a 400."""

    refuses_unknown_query = False
