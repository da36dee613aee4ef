"""Identity errors: problem+json ones for the operator API, RFC 6749 ones for /oauth/token."""

from __future__ import annotations

from collections.abc import Mapping

from headwater.errors import BadRequest, Conflict, NotFound


class CompanyNotFound(NotFound):
    code = "company_not_found"


class ClientNotFound(NotFound):
    code = "client_not_found"


class CredentialNotFound(NotFound):
    code = "credential_not_found"


class ClientExists(Conflict):
    code = "client_exists"


class InvalidCredentialRequest(BadRequest):
    code = "invalid_credential"


class OAuthError(Exception):
    """An RFC 6749 section 5.2 error: `{"error", "error_description"}`, never problem+json."""

    def __init__(
        self,
        error: str,
        description: str,
        *,
        status: int = 400,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status
        self.headers = dict(headers or {})


def invalid_client() -> OAuthError:
    return OAuthError(
        "invalid_client",
        "Client authentication failed.",
        status=401,
        headers={"WWW-Authenticate": 'Basic realm="headwater"'},
    )


class SealingMismatch(RuntimeError):
    """This node's sealing material differs from the one the installation's secrets
    were sealed with: it must not start (contract 19: refuse rather than diverge)."""

    def __init__(self) -> None:
        super().__init__(
            "this node's sealing key differs from the one the other nodes on this database "
            "sealed their secrets with: set HEADWATER_WEBHOOK_SECRET_KEY (or "
            "HEADWATER_SIGNING_KEY_PASSPHRASE) to the same value on every node"
        )
