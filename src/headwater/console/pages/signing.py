"""Signing in with an API credential and out again (contract 18)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from headwater.console import sessions
from headwater.console.deps import (
    COOKIE,
    CSRF_FIELD,
    SIGN_IN_COOKIE,
    Changing,
    ConsoleRoute,
    Form,
    page,
    redirect,
    secure,
    set_cookie,
    sign_in_token,
)
from headwater.console.errors import CsrfRefused
from headwater.identity.errors import OAuthError
from headwater.web.deps import RuntimeDep

router = APIRouter(prefix="/console", route_class=ConsoleRoute)


@router.get("/sign-in")
def sign_in_form(request: Request, next: str = "/console") -> HTMLResponse:
    token = sign_in_token(request)
    response = page(request, "sign_in.html", None, sign_in_csrf=token, next=_local(next))
    set_cookie(request, response, SIGN_IN_COOKIE, token, max_age=3600)
    return response


@router.post("/sign-in")
async def sign_in(request: Request, runtime: RuntimeDep, fields: Form) -> Response:
    """Check the credential as the token endpoint does (the same failure limit per
    address), then start a session: an HttpOnly, SameSite=Strict cookie."""
    expected = request.cookies.get(SIGN_IN_COOKIE, "")
    if not expected or fields.get(CSRF_FIELD) != expected:
        raise CsrfRefused("The sign-in form has expired; reload it and sign in again.")
    address = request.client.host if request.client else "unknown"
    next_page = _local(fields.get("next", "/console"))
    client_id = fields.get("client_id", "").strip()
    client_secret = fields.get("client_secret", "")

    def again(message: str, status: int) -> HTMLResponse:
        return page(
            request,
            "sign_in.html",
            None,
            status=status,
            sign_in_csrf=expected,
            next=next_page,
            client_id=client_id,
            error=message,
        )

    if runtime.token_failures.refused(address):
        return again("Too many failed sign-ins from this address; wait a minute.", 429)
    if not client_id or not client_secret:
        return again("Give the credential's client id and its secret.", 400)

    def start() -> sessions.Started:
        with runtime.db.unit_of_work() as session:
            return sessions.sign_in(
                session,
                client_id=client_id,
                client_secret=client_secret,
                hours=runtime.settings.console_session_hours,
            )

    try:
        started = await runtime.secret_checks.run(start)
    except OAuthError:
        await runtime.token_failures.failed(address)
        return again("That client id and secret do not sign in.", 401)
    response = redirect(next_page)
    hours = runtime.settings.console_session_hours
    set_cookie(request, response, COOKIE, started.token, max_age=hours * 3600)
    response.delete_cookie(SIGN_IN_COOKIE, path="/console")
    return response


@router.post("/sign-out")
def sign_out(request: Request, runtime: RuntimeDep, who: Changing) -> Response:
    with runtime.db.unit_of_work() as session:
        sessions.sign_out(session, request.cookies.get(COOKIE, ""))
    response = redirect("/console/sign-in")
    response.delete_cookie(COOKIE, path="/console", secure=secure(request), httponly=True)
    return response


def _local(target: str) -> str:
    """A page of the console to go to after signing in, never another site's."""
    if target.startswith("/console") and not target.startswith("//") and "\\" not in target:
        return target
    return "/console"
