"""The console's HTTP plumbing: who is signed in (the session cookie), the CSRF check of
every form, the page templates and their security headers, and errors shown as pages."""

from __future__ import annotations

import hmac
import secrets
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path as FilePath
from typing import Annotated, Any, Protocol
from urllib.parse import quote

import orjson
from fastapi import Depends, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError

from headwater.console import sessions
from headwater.console.errors import BadForm, CsrfRefused
from headwater.console.sessions import SignedIn
from headwater.errors import DomainError, InsufficientScope, RateLimited
from headwater.files.stores import Store
from headwater.identity.tokens import TokenVerifier
from headwater.ingestion.schemas import ID_PATTERN
from headwater.kit import strictjson
from headwater.web.deps import RuntimeDep, Services, check_request_text
from headwater.webhooks.crypto import SecretBox

HERE = FilePath(__file__).parent
COOKIE = "headwater_console"
# the sign-in form's own CSRF token (double submit): there is no session to hold it yet
SIGN_IN_COOKIE = "headwater_sign_in"
CSRF_FIELD = "csrf"

templates = Jinja2Templates(directory=HERE / "templates")  # autoescape on (Starlette's)

# Nothing loads from outside the service, no inline script or style runs, no other site
# frames a page or receives a form.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


# A page's path parameters: an object's uuid, or a name (a client, dataset or credential
# id, an SFTP username) of the shape the API accepts; anything else answers 400.
IdPath = Annotated[uuid.UUID, Path()]
NamePath = Annotated[str, Path(pattern=ID_PATTERN)]


class ConsoleServices(Services, Protocol):
    """The running service's parts the console uses beside the database."""

    secret_box: SecretBox
    store: Store
    verifier: TokenVerifier


async def get_console_runtime(request: Request) -> ConsoleServices:
    runtime: ConsoleServices = request.app.state.runtime
    return runtime


ConsoleRuntime = Annotated[ConsoleServices, Depends(get_console_runtime)]


class SignInNeeded(Exception):
    """No live session: the page answers a redirect to the sign-in form."""


def secure(request: Request) -> bool:
    """Whether the console is served over https: the request says so, or the public URL
    does (behind a load balancer that ends TLS, the request itself is http)."""
    public: str = request.app.state.runtime.settings.public_url
    return request.url.scheme == "https" or public.startswith("https://")


def viewer(request: Request, runtime: RuntimeDep) -> SignedIn:
    """The signed-in browser's session, checked against the database on every page: a
    revoked credential or company, or an expired session, signs it out at once."""
    token = request.cookies.get(COOKIE)
    if not token:
        raise SignInNeeded()
    with runtime.db.read_session() as session:
        found = sessions.signed_in(session, token)
    if found is None:
        raise SignInNeeded()
    request.state.subject = found.principal.subject
    return found


Viewer = Annotated[SignedIn, Depends(viewer)]


async def limited(request: Request, runtime: RuntimeDep, who: Viewer) -> SignedIn:
    """The credential's rate limit, the same budget its API calls draw from."""
    decision = await runtime.limiter.hit("credential:" + who.principal.subject)
    request.state.rate_limit = decision
    if not decision.allowed:
        raise RateLimited(f"Rate limit exceeded; retry in {decision.retry_after} s.")
    return who


Signed = Annotated[SignedIn, Depends(limited)]


class Fields:
    """A posted form's text fields."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items

    def get(self, name: str, default: str = "") -> str:
        """The field's last value."""
        found = [v for k, v in self._items if k == name]
        return found[-1] if found else default

    def __contains__(self, name: object) -> bool:
        return any(k == name for k, _ in self._items)

    def all(self, name: str) -> list[str]:
        """Every value of a repeated field (checkboxes), in order."""
        return [v for k, v in self._items if k == name]

    def json(self, name: str) -> Any:
        """A JSON field (a schema, steps, records), read as the API reads a body."""
        try:
            value = strictjson.loads(self.get(name).encode())
        except ValueError as error:
            raise BadForm(f"{name}: not JSON: {error}") from None
        found = next(strictjson.nul_paths(value), None)
        if found is not None:
            where = strictjson.pointer(found[0]).replace("\x00", "\\u0000") or "/"
            raise BadForm(f"{name}: the member at {where} holds a NUL (U+0000) character.")
        return value

    def utc(self, name: str) -> str | None:
        """A `datetime-local` field, read as UTC (the page says so); None if empty."""
        value = self.get(name).strip()
        if not value:
            return None
        has_zone = value.endswith("Z") or "+" in value[10:] or "-" in value[10:]
        return value if has_zone else value + "Z"


async def form(request: Request) -> Fields:
    """The posted form's text fields (files are not read as text)."""
    try:
        posted = await request.form()
    except Exception as error:  # python-multipart's refusals have no common base
        raise BadForm(f"The form could not be read: {error}") from None
    items = [(k, v) for k, v in posted.multi_items() if isinstance(v, str)]
    for name, value in items:
        if "\x00" in name or "\x00" in value:
            shown = name.replace("\x00", "\\u0000")
            raise BadForm(f"The field {shown!r} holds a NUL (U+0000) character.")
    return Fields(items)


Form = Annotated[Fields, Depends(form)]


async def checked(who: Signed, fields: Form) -> SignedIn:
    """A signed-in form post whose CSRF token is its session's; refused (403) otherwise."""
    if not hmac.compare_digest(fields.get(CSRF_FIELD, ""), who.csrf):
        raise CsrfRefused("The form's CSRF token is missing or not this session's; reload it.")
    return who


Changing = Annotated[SignedIn, Depends(checked)]


def needs(who: SignedIn, *scopes: str) -> None:
    """Refuse (403) what the credential's scopes would not allow through the API."""
    missing = [s for s in scopes if s not in who.principal.scopes]
    if missing:
        raise InsufficientScope(missing)


def page(
    request: Request,
    template: str,
    who: SignedIn | None,
    *,
    status: int = 200,
    **context: Any,
) -> HTMLResponse:
    response = templates.TemplateResponse(
        request,
        template,
        {"who": who, "csrf": who.csrf if who else None, "path": request.url.path, **context},
        status_code=status,
    )
    response.headers.update(SECURITY_HEADERS)
    return response


class Paged(Protocol):
    page: int
    page_size: int


def pages(request: Request, query: Paged, total: int) -> dict[str, str | None]:
    """The links to a list's previous and next pages, and where this one stands."""
    last = max(0, (total - 1) // query.page_size)

    def link(number: int) -> str:
        return str(request.url.include_query_params(page=number))

    return {
        "previous": link(query.page - 1) if query.page > 0 else None,
        "next": link(query.page + 1) if query.page < last else None,
        "label": f"page {query.page + 1} of {last + 1}",
    }


def pretty(document: Any) -> str:
    """JSON as a page shows it: indented, in its own order."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


def redirect(to: str) -> RedirectResponse:
    response = RedirectResponse(to, status_code=303)
    response.headers.update(SECURITY_HEADERS)
    return response


def sign_in_token(request: Request) -> str:
    return request.cookies.get(SIGN_IN_COOKIE) or secrets.token_urlsafe(32)


def set_cookie(
    request: Request, response: Response, name: str, value: str, *, max_age: int
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )


class ConsoleRoute(APIRoute):
    """A console route: errors answer an HTML page with their status (not problem+json),
    and a browser with no session is sent to the sign-in form."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                check_request_text(request, known_query=None)  # no NUL in path or query
                return await handle(request)
            except SignInNeeded:
                back = request.url.path if request.method == "GET" else "/console"
                response = redirect("/console/sign-in?next=" + quote(back, safe="/"))
                response.delete_cookie(COOKIE, path="/console")
                return response
            except DomainError as error:
                return error_page(request, error.status, error.title, error.detail)
            except (RequestValidationError, ValidationError) as error:
                return error_page(request, 400, "Bad request", _invalid(error))

        return route


def error_page(request: Request, status: int, title: str, detail: str) -> HTMLResponse:
    # not-found and refusals say no more than the API does; no session is shown
    return page(request, "error.html", None, status=status, title=title, detail=detail)


def _invalid(error: RequestValidationError | ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item.get("loc", ()) if p not in ("query", "path", "body"))
        parts.append(f"{where}: {item.get('msg', 'invalid')}" if where else item.get("msg", ""))
    return "; ".join(parts) or "The request is not valid."
