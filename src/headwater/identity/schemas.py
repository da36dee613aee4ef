"""Operator API and token endpoint models."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

from headwater.identity.tokens import COMPANY_SCOPES
from headwater.kit.clock import Timestamp
from headwater.kit.schemas import Input, Output

ClientId = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"),
    Field(
        description="Ingestion client id: `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`.", examples=["acme-crm"]
    ),
]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
CompanyScope = Literal[tuple(sorted(COMPANY_SCOPES))]  # type: ignore[valid-type]


class CompanyCreate(Input):
    name: Name = Field(examples=["Acme Ltd"])


class CompanyRead(Output):
    id: uuid.UUID
    name: str = Field(examples=["Acme Ltd"])
    created_at: Timestamp
    revoked_at: Timestamp | None = Field(
        None, description="Set once the company is revoked: its credentials get no token."
    )


class ClientCreate(Input):
    client_id: ClientId
    name: Name = Field(examples=["Acme CRM export"])


class ClientRead(Output):
    client_id: str = Field(examples=["acme-crm"])
    company_id: uuid.UUID
    name: str = Field(examples=["Acme CRM export"])
    created_at: Timestamp
    revoked_at: Timestamp | None = None


class CredentialCreate(Input):
    name: Name = Field(examples=["CRM nightly sync"])
    scopes: list[CompanyScope] = Field(  # type: ignore[valid-type]
        min_length=1,
        examples=[["data:write", "data:read"]],
        description="Scopes the credential may ask for; `admin` is for operators only.",
    )
    client_ids: list[ClientId] = Field(
        default_factory=list,
        description="Ingestion clients this credential may use; empty means all of the company's.",
    )


class CredentialRead(Output):
    client_id: str = Field(examples=["hw_3kT9wLq0PzV8mN2bXc4rYs7d"])
    name: str
    author_id: uuid.UUID = Field(description="Written as `author_id` on every change it makes.")
    company_id: uuid.UUID | None
    scopes: list[str]
    client_ids: list[str]
    created_at: Timestamp
    revoked_at: Timestamp | None = None


class CredentialCreated(CredentialRead):
    client_secret: str = Field(
        description="Shown in this response only; store it now.",
        examples=["q1V7c3b0ZrZ8yA1o0y2o8tJm3iJvC0QdM3y7lqQnKxE"],
    )


class TokenRequest(BaseModel):
    """`application/json` or `application/x-www-form-urlencoded`."""

    grant_type: Literal["client_credentials"] | None = None
    client_id: str | None = Field(None, examples=["hw_3kT9wLq0PzV8mN2bXc4rYs7d"])
    client_secret: str | None = Field(
        None, examples=["q1V7c3b0ZrZ8yA1o0y2o8tJm3iJvC0QdM3y7lqQnKxE"]
    )
    audience: str = Field(examples=["headwater-api"])
    scope: str | None = Field(
        None, description="Space-separated subset of the credential's scopes."
    )


class TokenResponse(BaseModel):
    access_token: str = Field(examples=["eyJhbGciOiJSUzI1NiIsImtpZCI6Ii4uLiJ9.eyJ..."])
    token_type: Literal["Bearer"] = "Bearer"  # noqa: S105 - the RFC 6750 token type
    expires_in: int = Field(examples=[86400])
    scope: str = Field(examples=["data:write data:read"])


class OAuthErrorBody(BaseModel):
    error: str = Field(examples=["invalid_client"])
    error_description: str = Field(examples=["Client authentication failed."])


class WhoAmI(Output):
    subject: str = Field(examples=["hw_3kT9wLq0PzV8mN2bXc4rYs7d"])
    author_id: uuid.UUID
    company_id: uuid.UUID | None
    client_ids: list[str]
    scopes: list[str]
