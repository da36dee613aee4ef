"""Bearer token verification and scopes on every route (contract section 2)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import event
from starlette.testclient import TestClient

from headwater.identity import keys as keyring
from headwater.identity import service as identity
from tests.factories import AUDIENCE, assert_problem, auth, database

WHOAMI = "/platform/v1/whoami"


@pytest.fixture
def signing(settings: Any) -> Iterator[tuple[str, Any, str]]:
    """The service's current signing key: (kid, private key, public PEM)."""
    with database(settings) as db, db.unit_of_work() as session:
        key = identity.current_signing_key(session, passphrase=None)
    private = keyring.load_private_key(key.private_key_pem, None)
    public_pem = (
        private.public_key()
        .public_bytes(  # type: ignore[union-attr]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        .decode()
    )
    yield key.kid, private, public_pem


def _claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "iss": "http://testserver",
        "sub": "forged",
        "aud": AUDIENCE,
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "scope": "admin data:read",
        "gty": "client_credentials",
        "company_id": None,
        "client_ids": [],
        "author_id": "6f1c5f4e-2f0a-4d7e-9a57-0b1f0c9d2e11",
    }
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not ...}


def _sign(signing: tuple[str, Any, str], claims: dict[str, Any], **header: Any) -> str:
    kid, private, _ = signing
    return jwt.encode(claims, private, algorithm="RS256", headers={"kid": kid, **header})


def _assert_invalid_token(response: Any) -> None:
    assert_problem(response, 401, "invalid_token")
    assert response.headers["www-authenticate"].startswith('Bearer error="invalid_token"')


def test_valid_forged_shape_is_accepted(client: TestClient, signing: Any) -> None:
    """The control for the tests below: a token signed right passes."""
    response = client.get(WHOAMI, headers=auth(_sign(signing, _claims())))
    assert response.status_code == 200, response.text
    assert response.json()["subject"] == "forged"


@pytest.mark.parametrize("path", [WHOAMI, "/admin/v1/companies"])
def test_no_header_answers_a_bare_challenge(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert_problem(response, 401, "missing_token")
    assert response.headers["www-authenticate"] == "Bearer"


def test_other_scheme_answers_a_bare_challenge(client: TestClient) -> None:
    response = client.get(WHOAMI, headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


def test_alg_none_is_refused(client: TestClient, signing: Any) -> None:
    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    token = f"{b64({'alg': 'none', 'typ': 'JWT', 'kid': signing[0]})}.{b64(_claims())}."
    _assert_invalid_token(client.get(WHOAMI, headers=auth(token)))


def test_hs256_signed_with_the_public_key_is_refused(client: TestClient, signing: Any) -> None:
    kid, _, public_pem = signing
    header = {"alg": "HS256", "typ": "JWT", "kid": kid}
    signing_input = ".".join(
        base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode()
        for part in (header, _claims())
    )
    import hashlib
    import hmac

    mac = hmac.new(public_pem.encode(), signing_input.encode(), hashlib.sha256).digest()
    token = signing_input + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    _assert_invalid_token(client.get(WHOAMI, headers=auth(token)))


@pytest.mark.parametrize(
    "changes",
    [
        {"aud": "another-api"},
        {"iss": "https://evil.example"},
        {"exp": int(time.time()) - 120},
        {"nbf": int(time.time()) + 3600},
        {"iat": int(time.time()) + 3600},
        {"exp": ...},
        {"sub": ...},
    ],
    ids=["wrong-aud", "wrong-iss", "expired", "nbf-future", "iat-future", "no-exp", "no-sub"],
)
def test_bad_claims_are_refused(client: TestClient, signing: Any, changes: dict[str, Any]) -> None:
    token = _sign(signing, _claims(**changes))
    _assert_invalid_token(client.get(WHOAMI, headers=auth(token)))


def test_expiry_within_leeway_is_accepted(client: TestClient, signing: Any) -> None:
    token = _sign(signing, _claims(exp=int(time.time()) - 20))
    assert client.get(WHOAMI, headers=auth(token)).status_code == 200


def test_unknown_kid_is_refused(client: TestClient, signing: Any) -> None:
    token = _sign(signing, _claims(), kid="no-such-key")
    _assert_invalid_token(client.get(WHOAMI, headers=auth(token)))


def test_foreign_key_with_our_kid_is_refused(client: TestClient, signing: Any) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode(_claims(), other, algorithm="RS256", headers={"kid": signing[0]})
    _assert_invalid_token(client.get(WHOAMI, headers=auth(token)))


def test_tampered_payload_is_refused(client: TestClient, signing: Any) -> None:
    header, payload, signature = _sign(signing, _claims(scope="data:read")).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["scope"] = "admin"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    _assert_invalid_token(
        client.get("/admin/v1/companies", headers=auth(f"{header}.{forged}.{signature}"))
    )


@pytest.mark.parametrize("token", ["garbage", "a.b.c", "e30.e30.", " "])
def test_malformed_tokens_are_refused(client: TestClient, token: str) -> None:
    response = client.get(WHOAMI, headers={"Authorization": f"Bearer {token}x"})
    _assert_invalid_token(response)


def test_missing_scope_is_insufficient_scope(client: TestClient, company_token: str) -> None:
    response = client.get("/admin/v1/companies", headers=auth(company_token))
    body = assert_problem(response, 403, "insufficient_scope")
    assert body["required_scopes"] == ["admin"]
    assert (
        response.headers["www-authenticate"] == 'Bearer error="insufficient_scope", scope="admin"'
    )


def test_verifying_a_token_does_not_touch_the_database(
    client: TestClient, company_token: str
) -> None:
    client.get(WHOAMI, headers=auth(company_token))  # keys are held from here on
    statements: list[str] = []
    engine = client.app.state.runtime.db.engine  # type: ignore[attr-defined]

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    event.listen(engine, "before_cursor_execute", count)
    try:
        response = client.get(WHOAMI, headers=auth(company_token))
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert response.status_code == 200
    assert statements == []
