"""POST /oauth/token, JWKS and discovery (contract section 2)."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

import jwt
import pytest
from starlette.testclient import TestClient

from headwater.identity import service as identity
from tests.factories import (
    AUDIENCE,
    OPERATOR_ID,
    OPERATOR_SECRET,
    auth,
    create_credential,
    database,
    get_token,
    request_token,
)


def _oauth_error(response: Any, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["error"] == error
    assert isinstance(body["error_description"], str) and body["error_description"]
    assert set(body) == {"error", "error_description"}


def test_json_request_answers_a_bearer_jwt(
    client: TestClient, credential: dict[str, Any], company: str
) -> None:
    response = request_token(
        client,
        credential["client_id"],
        credential["client_secret"],
        grant_type="client_credentials",
    )
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 86400
    assert body["scope"] == "data:read workflows:read"
    header = jwt.get_unverified_header(body["access_token"])
    assert header["alg"] == "RS256" and header["kid"]
    claims = jwt.decode(body["access_token"], options={"verify_signature": False})
    assert claims["iss"] == "http://testserver"
    assert claims["sub"] == credential["client_id"]
    assert claims["aud"] == AUDIENCE
    assert claims["exp"] - claims["iat"] == 86400
    assert claims["gty"] == "client_credentials"
    assert claims["company_id"] == company
    assert claims["author_id"] == credential["author_id"]
    assert claims["client_ids"] == []


def test_form_request(client: TestClient, credential: dict[str, Any]) -> None:
    response = client.post(
        "/oauth/token",
        data={
            "grant_type": "client_credentials",
            "client_id": credential["client_id"],
            "client_secret": credential["client_secret"],
            "audience": AUDIENCE,
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["token_type"] == "Bearer"


def test_http_basic_client_authentication(client: TestClient, credential: dict[str, Any]) -> None:
    pair = f"{quote(credential['client_id'])}:{quote(credential['client_secret'])}"
    response = client.post(
        "/oauth/token",
        data={"grant_type": "client_credentials", "audience": AUDIENCE},
        headers={"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()},
    )
    assert response.status_code == 200, response.text


def test_basic_and_body_secret_together_is_invalid_request(
    client: TestClient, credential: dict[str, Any]
) -> None:
    pair = f"{credential['client_id']}:{credential['client_secret']}".encode()
    response = client.post(
        "/oauth/token",
        json={"client_secret": credential["client_secret"], "audience": AUDIENCE},
        headers={"Authorization": "Basic " + base64.b64encode(pair).decode()},
    )
    _oauth_error(response, 400, "invalid_request")


def test_wrong_secret_and_unknown_client_answer_the_same(
    client: TestClient, credential: dict[str, Any]
) -> None:
    wrong = client.post(
        "/oauth/token",
        json={"client_id": credential["client_id"], "client_secret": "nope", "audience": AUDIENCE},
    )
    unknown = client.post(
        "/oauth/token",
        json={"client_id": "hw_doesnotexist", "client_secret": "nope", "audience": AUDIENCE},
    )
    _oauth_error(wrong, 401, "invalid_client")
    _oauth_error(unknown, 401, "invalid_client")
    assert wrong.json() == unknown.json()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"client_secret": "x", "audience": AUDIENCE}, "invalid_request"),
        ({"client_id": "x", "audience": AUDIENCE}, "invalid_request"),
        ({"client_id": "x", "client_secret": "x"}, "invalid_request"),
        ({"client_id": 5, "client_secret": "x", "audience": AUDIENCE}, "invalid_request"),
        (
            {
                "client_id": "x",
                "client_secret": "x",
                "audience": AUDIENCE,
                "grant_type": "password",
            },
            "unsupported_grant_type",
        ),
    ],
)
def test_bad_requests(client: TestClient, body: dict[str, Any], error: str) -> None:
    _oauth_error(client.post("/oauth/token", json=body), 400, error)


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b"{not json", "application/json"),
        (b"[1, 2]", "application/json"),
        (
            b"client_id=a&client_id=b&client_secret=x&audience=headwater-api",
            "application/x-www-form-urlencoded",
        ),
        (b"client_id=a", "text/plain"),
    ],
)
def test_malformed_bodies_are_invalid_request(
    client: TestClient, content: bytes, content_type: str
) -> None:
    response = client.post("/oauth/token", content=content, headers={"Content-Type": content_type})
    _oauth_error(response, 400, "invalid_request")


def test_foreign_audience_is_access_denied(client: TestClient, credential: dict[str, Any]) -> None:
    response = request_token(
        client, credential["client_id"], credential["client_secret"], audience="someone-else"
    )
    _oauth_error(response, 403, "access_denied")


def test_scope_narrows_the_token(client: TestClient, credential: dict[str, Any]) -> None:
    token = get_token(
        client, credential["client_id"], credential["client_secret"], scope="data:read"
    )
    assert jwt.decode(token, options={"verify_signature": False})["scope"] == "data:read"
    response = client.get("/platform/v1/whoami", headers=auth(token))
    assert response.json()["scopes"] == ["data:read"]


@pytest.mark.parametrize("scope", ["admin", "data:read nonsense", ""])
def test_scope_not_granted_is_invalid_scope(
    client: TestClient, credential: dict[str, Any], scope: str
) -> None:
    response = request_token(
        client, credential["client_id"], credential["client_secret"], scope=scope
    )
    _oauth_error(response, 400, "invalid_scope")


def test_revoked_credential_gets_no_token(
    client: TestClient, admin: dict[str, str], credential: dict[str, Any]
) -> None:
    get_token(client, credential["client_id"], credential["client_secret"])
    assert (
        client.delete(f"/admin/v1/credentials/{credential['client_id']}", headers=admin).status_code
        == 204
    )
    response = request_token(client, credential["client_id"], credential["client_secret"])
    _oauth_error(response, 401, "invalid_client")


def test_revoked_company_credentials_get_no_token(
    client: TestClient, admin: dict[str, str], company: str, credential: dict[str, Any]
) -> None:
    assert client.delete(f"/admin/v1/companies/{company}", headers=admin).status_code == 204
    response = request_token(client, credential["client_id"], credential["client_secret"])
    _oauth_error(response, 401, "invalid_client")


def test_bootstrap_operator_gets_admin(client: TestClient) -> None:
    token = get_token(client, OPERATOR_ID, OPERATOR_SECRET)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["scope"] == "admin"
    assert claims["company_id"] is None


def test_jwks_and_discovery(client: TestClient, operator_token: str) -> None:
    jwks = client.get("/.well-known/jwks.json")
    assert jwks.status_code == 200
    kids = [k["kid"] for k in jwks.json()["keys"]]
    assert jwt.get_unverified_header(operator_token)["kid"] in kids
    for key in jwks.json()["keys"]:
        assert set(key) == {"kty", "n", "e", "kid", "use", "alg"}  # public members only
    discovery = client.get("/.well-known/openid-configuration").json()
    assert discovery["issuer"] == "http://testserver"
    assert discovery["token_endpoint"] == "http://testserver/oauth/token"
    assert discovery["jwks_uri"] == "http://testserver/.well-known/jwks.json"
    assert discovery["grant_types_supported"] == ["client_credentials"]


def test_key_rotation_keeps_old_tokens_until_the_key_is_removed(
    client: TestClient, settings: Any, admin: dict[str, str], company: str
) -> None:
    cred = create_credential(client, admin, company, scopes=["data:read"])
    old_token = get_token(client, cred["client_id"], cred["client_secret"])
    old_kid = jwt.get_unverified_header(old_token)["kid"]
    with database(settings) as db:
        with db.unit_of_work() as session:
            new_kid = identity.rotate_signing_key(session, passphrase=None).kid
        new_token = get_token(client, cred["client_id"], cred["client_secret"])
        assert jwt.get_unverified_header(new_token)["kid"] == new_kid != old_kid
        kids = [k["kid"] for k in client.get("/.well-known/jwks.json").json()["keys"]]
        assert kids[0] == new_kid and old_kid in kids
        for token in (old_token, new_token):
            assert client.get("/platform/v1/whoami", headers=auth(token)).status_code == 200
        with db.unit_of_work() as session:
            identity.remove_signing_key(session, old_kid)
    client.portal.call(client.app.state.runtime.verifier.keys.refresh)  # type: ignore[attr-defined, union-attr]
    response = client.get("/platform/v1/whoami", headers=auth(old_token))
    assert response.status_code == 401
    assert client.get("/platform/v1/whoami", headers=auth(new_token)).status_code == 200


def test_current_signing_key_cannot_be_removed(settings: Any) -> None:
    with database(settings) as db, db.unit_of_work() as session:
        current = identity.current_signing_key(session, passphrase=None)
        with pytest.raises(identity.InvalidCredentialRequest):
            identity.remove_signing_key(session, current.kid)


def test_the_documented_token_url_names_the_audience_for_clients_that_send_none(
    client: TestClient, credential: dict[str, Any]
) -> None:
    """The docs page's Authorize posts to the flow's token URL with no `audience`."""
    schemes = client.get("/openapi.json").json()["components"]["securitySchemes"]
    token_url = schemes["oauth2"]["flows"]["clientCredentials"]["tokenUrl"]
    assert token_url == f"/oauth/token?audience={AUDIENCE}"
    assert schemes["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": schemes["bearer"]["description"],
    }
    pair = (credential["client_id"], credential["client_secret"])
    granted = client.post(token_url, data={"grant_type": "client_credentials"}, auth=pair)
    assert granted.status_code == 200, granted.text
    token = granted.json()["access_token"]
    assert jwt.decode(token, options={"verify_signature": False})["aud"] == AUDIENCE
    assert client.get("/platform/v1/whoami", headers=auth(token)).status_code == 200
    # the same in the body is no conflict; another is
    same = client.post(token_url, data={"audience": AUDIENCE}, auth=pair)
    assert same.status_code == 200, same.text
    _oauth_error(
        client.post(token_url, data={"audience": "other"}, auth=pair), 400, "invalid_request"
    )
    # in the URL, a foreign audience is refused as in the body
    foreign = client.post(
        "/oauth/token?audience=someone-else", data={"grant_type": "client_credentials"}, auth=pair
    )
    _oauth_error(foreign, 403, "access_denied")
