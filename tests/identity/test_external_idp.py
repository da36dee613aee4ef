"""External OIDC provider mode: tokens from another issuer, keys from its JWKS URL."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.factories import assert_problem, auth
from tests.loopback import serving

ISSUER = "https://tenant.idp.example/"
AUDIENCE = "https://api.headwater.example"
CLAIMS = {
    "company_id": "https://headwater.example/company_id",
    "client_ids": "https://headwater.example/client_ids",
    "author_id": "https://headwater.example/author_id",
    "scope": "scope",
}


class JwksServer:
    """A JWKS endpoint on loopback serving whatever keys the test puts in it."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.hits = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits += 1
                body = json.dumps({"keys": [k for _, k in server.keys.values()]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.handler = Handler
        self.url = ""  # once served (`idp`)

    def add_rsa(self, kid: str) -> Any:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
        self.keys[kid] = (private, jwk | {"kid": kid, "use": "sig", "alg": "RS256"})
        return private

    def add_ec(self, kid: str) -> Any:
        private = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
        self.keys[kid] = (private, jwk | {"kid": kid, "use": "sig", "alg": "ES256"})
        return private


@pytest.fixture
def idp() -> Iterator[JwksServer]:
    server = JwksServer()
    server.add_rsa("ext-1")
    with serving(server.handler) as httpd:
        server.url = f"http://127.0.0.1:{httpd.server_address[1]}/.well-known/jwks.json"
        yield server


@pytest.fixture
def external(make_client: Any, idp: JwksServer) -> Any:
    return make_client(
        oidc_issuer=ISSUER,
        oidc_jwks_url=idp.url,
        oidc_audience=AUDIENCE,
        oidc_claim_map=CLAIMS,
        jwks_min_refresh_seconds=60,
    )


def _token(idp: JwksServer, kid: str, alg: str = "RS256", **changes: Any) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": "auth0|machine-42@clients",
        "aud": [AUDIENCE, "other"],
        "iat": now,
        "exp": now + 300,
        "scope": "data:read workflows:read",
        CLAIMS["company_id"]: "0b9f7c7e-5d42-4b8c-a4a1-7d3f0c4e1a22",
        CLAIMS["client_ids"]: ["acme-crm"],
    }
    claims.update(changes)
    return jwt.encode(claims, idp.keys[kid][0], algorithm=alg, headers={"kid": kid})


def test_external_token_is_accepted_with_mapped_claims(external: Any, idp: JwksServer) -> None:
    response = external.get("/platform/v1/whoami", headers=auth(_token(idp, "ext-1")))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["company_id"] == "0b9f7c7e-5d42-4b8c-a4a1-7d3f0c4e1a22"
    assert body["client_ids"] == ["acme-crm"]
    assert body["scopes"] == ["data:read", "workflows:read"]
    expected_author = uuid.uuid5(uuid.NAMESPACE_URL, f"{ISSUER}#auth0|machine-42@clients")
    assert body["author_id"] == str(expected_author)


def test_es256_keys_work(external: Any, idp: JwksServer) -> None:
    idp.add_ec("ext-ec")
    token = _token(idp, "ext-ec", alg="ES256")
    assert external.get("/platform/v1/whoami", headers=auth(token)).status_code == 200


@pytest.mark.parametrize(
    "changes",
    [
        {"iss": "http://testserver"},
        {"aud": "headwater-api"},
        {"exp": int(time.time()) - 300},
        {CLAIMS["company_id"]: "not-a-uuid"},
        {CLAIMS["client_ids"]: "acme-crm"},
    ],
    ids=["iss", "aud", "expired", "bad-company", "bad-clients"],
)
def test_bad_external_tokens_are_refused(
    external: Any, idp: JwksServer, changes: dict[str, Any]
) -> None:
    response = external.get("/platform/v1/whoami", headers=auth(_token(idp, "ext-1", **changes)))
    assert_problem(response, 401, "invalid_token")


def test_embedded_tokens_are_not_accepted_and_endpoint_is_off(
    external: Any, client: Any, company_token: str
) -> None:
    response = external.get("/platform/v1/whoami", headers=auth(company_token))
    assert_problem(response, 401, "invalid_token")
    assert external.post("/oauth/token", json={}).status_code == 404


def test_external_scopes_are_enforced(external: Any, idp: JwksServer) -> None:
    token = _token(idp, "ext-1")
    assert_problem(
        external.get("/admin/v1/companies", headers=auth(token)), 403, "insufficient_scope"
    )


def test_new_kid_triggers_one_rate_limited_refresh(make_client: Any, idp: JwksServer) -> None:
    app = make_client(
        oidc_issuer=ISSUER,
        oidc_jwks_url=idp.url,
        oidc_audience=AUDIENCE,
        oidc_claim_map=CLAIMS,
        jwks_min_refresh_seconds=0.5,
    )
    assert app.get("/platform/v1/whoami", headers=auth(_token(idp, "ext-1"))).status_code == 200
    hits = idp.hits
    # Forged kids: at most one JWKS fetch per refresh interval, however many arrive.
    for i in range(20):
        forged = jwt.encode(
            {"iss": ISSUER}, idp.keys["ext-1"][0], algorithm="RS256", headers={"kid": f"forged-{i}"}
        )
        assert app.get("/platform/v1/whoami", headers=auth(forged)).status_code == 401
    assert idp.hits - hits <= 1
    # A real rotation at the provider is picked up once the interval has passed.
    idp.add_rsa("ext-2")
    time.sleep(0.6)
    response = app.get("/platform/v1/whoami", headers=auth(_token(idp, "ext-2")))
    assert response.status_code == 200, response.text
    assert app.get("/platform/v1/whoami", headers=auth(_token(idp, "ext-2"))).status_code == 200


def test_unreachable_jwks_refuses_tokens_without_crashing(
    make_client: Any, idp: JwksServer
) -> None:
    token = _token(idp, "ext-1")
    app = make_client(
        oidc_issuer=ISSUER,
        oidc_jwks_url="http://127.0.0.1:1/jwks.json",
        oidc_audience=AUDIENCE,
        oidc_claim_map=CLAIMS,
    )
    assert_problem(app.get("/platform/v1/whoami", headers=auth(token)), 401, "invalid_token")


def test_partial_external_configuration_is_refused() -> None:
    from pydantic import ValidationError

    from headwater.config import Settings

    with pytest.raises(ValidationError, match="together"):
        Settings(oidc_issuer=ISSUER)
