"""A browser's view of the console through the test client: sign in with a credential,
read pages, post forms with the page's CSRF token."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from tests.factories import OPERATOR_ID, OPERATOR_SECRET

# the tenants of the domains whose pages these tests read, as their own tests make them
from tests.files.conftest import file_tenant, other_file_tenant, quarantine_tenant
from tests.subjects.conftest import subject_tenant
from tests.webhooks.conftest import hooks, other_hooks

__all__ = [
    "file_tenant",
    "hooks",
    "other_file_tenant",
    "other_hooks",
    "quarantine_tenant",
    "subject_tenant",
]

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class Browser:
    """One browser: its own cookie jar on the app the session's test client started."""

    def __init__(self, client: TestClient, base_url: str = "http://testserver") -> None:
        self.http = TestClient(client.app, base_url=base_url)

    def get(self, path: str, **params: Any) -> httpx.Response:
        # no `params` unless given: an empty one would drop the path's own query
        return self.http.get(path, params=params or None, follow_redirects=False)

    def post(self, path: str, data: dict[str, str], *, csrf: bool | str = True) -> httpx.Response:
        if csrf is True:
            data = {"csrf": self.csrf(path)} | data
        elif isinstance(csrf, str):
            data = {"csrf": csrf} | data
        return self.http.post(path, data=data, follow_redirects=False)

    def csrf(self, path: str = "/console/transactions") -> str:
        """The session's CSRF token, from the page a form posts to or any other of the
        session's pages (each has the sign-out form)."""
        for candidate in (path, "/console/transactions", "/console/companies", "/console/erasures"):
            found = CSRF.search(self.get(candidate).text)
            if found:
                return found.group(1)
        raise AssertionError("no page of this session shows a CSRF token")

    def sign_in(self, credential: dict[str, Any], *, next: str = "/console") -> httpx.Response:
        form = self.get("/console/sign-in", next=next)
        assert form.status_code == 200, form.text
        token = CSRF.search(form.text)
        assert token
        return self.post(
            "/console/sign-in",
            {
                "client_id": credential["client_id"],
                "client_secret": credential["client_secret"],
                "next": next,
            },
            csrf=token.group(1),
        )

    def signed_in(self, credential: dict[str, Any]) -> Browser:
        response = self.sign_in(credential)
        assert response.status_code == 303, response.text
        return self


OPERATOR = {"client_id": OPERATOR_ID, "client_secret": OPERATOR_SECRET}


@pytest.fixture
def browser(client: TestClient) -> Browser:
    return Browser(client)
