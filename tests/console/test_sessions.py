"""Signing in and out of the console (contract 18): the cookie's attributes, the CSRF
token of every form, revocation ending a session at once, and nothing shown signed out."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from tests.console.conftest import OPERATOR, Browser
from tests.factories import create_company, create_credential

SECRET_WRONG = "not-the-secret"


def test_a_page_signed_out_sends_the_browser_to_sign_in(browser: Browser) -> None:
    response = browser.get("/console/transactions", status="completed")
    assert response.status_code == 303
    assert response.headers["location"] == "/console/sign-in?next=/console/transactions"
    form = browser.get("/console/sign-in", next="/console/transactions")
    assert form.status_code == 200
    assert 'name="client_secret"' in form.text and 'type="password"' in form.text
    assert 'value="/console/transactions"' in form.text


def test_signing_in_sets_a_strict_http_only_cookie_and_goes_where_it_was_asked(
    browser: Browser, credential: dict[str, Any]
) -> None:
    response = browser.sign_in(credential, next="/console/transactions")
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/console/transactions"
    cookie = next(
        c for c in response.headers.get_list("set-cookie") if c.startswith("headwater_console=")
    )
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "path", "max-age", "samesite"} <= attributes
    assert "samesite=strict" in cookie.lower()
    assert "Max-Age=28800" in cookie  # HEADWATER_CONSOLE_SESSION_HOURS, 8 by default
    assert "secure" not in attributes  # served over http here; https adds it
    page = browser.get("/console/transactions")
    assert page.status_code == 200
    assert credential["client_id"] in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert page.headers["cache-control"] == "no-store"


def test_a_wrong_secret_is_refused_with_the_form_again(
    browser: Browser, credential: dict[str, Any]
) -> None:
    response = browser.sign_in(credential | {"client_secret": SECRET_WRONG})
    assert response.status_code == 401
    assert "do not sign in" in response.text
    assert credential["client_id"] in response.text  # the id stays typed in
    assert "headwater_console=" not in response.headers.get("set-cookie", "")
    assert browser.get("/console/transactions").status_code == 303


def test_the_sign_in_form_needs_its_own_csrf_token(
    browser: Browser, credential: dict[str, Any]
) -> None:
    browser.get("/console/sign-in")
    response = browser.post(
        "/console/sign-in",
        {"client_id": credential["client_id"], "client_secret": credential["client_secret"]},
        csrf="forged",
    )
    assert response.status_code == 403
    assert "expired" in response.text
    assert browser.get("/console/transactions").status_code == 303


def test_a_next_page_off_the_console_is_not_followed(
    browser: Browser, credential: dict[str, Any]
) -> None:
    for target in ("https://evil.example/", "//evil.example/console", "/console\\@evil"):
        fresh = Browser(browser.http)
        response = fresh.sign_in(credential, next=target)
        assert response.headers["location"] == "/console", target


def test_a_form_posted_without_its_csrf_token_is_refused(
    browser: Browser, credential: dict[str, Any]
) -> None:
    browser.signed_in(credential)
    for csrf in (False, "forged"):
        response = browser.post("/console/sign-out", {}, csrf=csrf)
        assert response.status_code == 403
        assert "CSRF" in response.text
    assert browser.get("/console/transactions").status_code == 200  # still signed in


def test_signing_out_ends_the_session(browser: Browser, credential: dict[str, Any]) -> None:
    browser.signed_in(credential)
    cookie = browser.http.cookies["headwater_console"]
    response = browser.post("/console/sign-out", {})
    assert response.status_code == 303
    assert response.headers["location"] == "/console/sign-in"
    assert browser.get("/console/transactions").status_code == 303
    # the cookie's value, kept by someone, no longer signs anybody in
    thief = Browser(browser.http)
    thief.http.cookies.set("headwater_console", cookie, path="/console")
    assert thief.get("/console/transactions").status_code == 303


def test_revoking_the_credential_ends_its_session_at_once(
    client: TestClient, browser: Browser, admin: dict[str, str], company: str
) -> None:
    credential = create_credential(client, admin, company, scopes=["data:read"])
    browser.signed_in(credential)
    assert browser.get("/console/transactions").status_code == 200
    revoked = client.delete(f"/admin/v1/credentials/{credential['client_id']}", headers=admin)
    assert revoked.status_code == 204, revoked.text
    assert browser.get("/console/transactions").status_code == 303
    assert browser.sign_in(credential).status_code == 401


def test_revoking_the_company_ends_its_users_sessions(
    client: TestClient, browser: Browser, admin: dict[str, str]
) -> None:
    company = create_company(client, admin, "Leaving Co")
    credential = create_credential(client, admin, company, scopes=["data:read"])
    browser.signed_in(credential)
    revoked = client.delete(f"/admin/v1/companies/{company}", headers=admin)
    assert revoked.status_code == 204, revoked.text
    assert browser.get("/console").status_code == 303


def test_an_operator_starts_on_the_companies_page(browser: Browser) -> None:
    browser.signed_in(OPERATOR)
    response = browser.get("/console")
    assert response.status_code == 303
    assert response.headers["location"] == "/console/companies"


def test_a_page_beyond_the_credentials_scopes_is_refused(
    client: TestClient, browser: Browser, admin: dict[str, str], company: str
) -> None:
    credential = create_credential(client, admin, company, scopes=["workflows:read"])
    browser.signed_in(credential)
    response = browser.get("/console/transactions")
    assert response.status_code == 403
    assert "data:read" in response.text


def test_the_cookie_is_secure_where_the_console_is_served_over_https(
    make_client: Any, credential: dict[str, Any]
) -> None:
    behind_tls = make_client(public_url="https://console.example.com")
    browser = Browser(behind_tls, base_url="https://console.example.com")
    response = browser.sign_in(credential)
    assert response.status_code == 303, response.text
    cookie = next(
        c for c in response.headers.get_list("set-cookie") if c.startswith("headwater_console=")
    )
    assert "; secure" in cookie.lower()
    assert browser.get("/console/transactions").status_code == 200
