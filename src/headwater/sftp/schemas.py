"""Operator API models for SFTP accounts (contract section 11)."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import Field, StringConstraints

from headwater.identity.schemas import ClientId
from headwater.kit.clock import Timestamp
from headwater.kit.pagination import PageQuery
from headwater.kit.schemas import Input, Output

USERNAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
Username = Annotated[
    str,
    StringConstraints(pattern=USERNAME_PATTERN),
    Field(
        description="`[a-z0-9][a-z0-9_.-]{0,63}`, unique on the platform.",
        examples=["acme-nightly"],
    ),
]
PublicKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=16384),
    Field(
        description="An OpenSSH public key line: ssh-ed25519, ecdsa-sha2-nistp256/384/521 "
        "or ssh-rsa of at least 2048 bits; a trailing comment is dropped.",
        examples=["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFvQ9... nightly@acme"],
    ),
]


class AccountCreate(Input):
    username: Username
    public_keys: list[PublicKey] = Field(default_factory=list, max_length=20)
    password: bool = Field(
        False,
        description="true: the answer holds a generated password, shown only there and "
        "stored as a slow hash. An account needs at least one key or a password.",
    )
    client_ids: list[ClientId] = Field(
        default_factory=list,
        max_length=1000,
        description="Ingestion clients the account may use; empty means all of the company's.",
    )


class KeysUpdate(Input):
    public_keys: list[PublicKey] = Field(
        min_length=1, max_length=20, description="Replaces every key of the account."
    )


class AccountRead(Output):
    username: str = Field(examples=["acme-nightly"])
    company_id: uuid.UUID
    client_ids: list[str] = Field(examples=[["acme-crm"]])
    key_fingerprints: list[str] = Field(
        examples=[["SHA256:Jx0l9N2pYy0Lm0zV4sS1Cw7bqDmYv0mY5cXJ9Q3KqQk"]]
    )
    created_at: Timestamp


class AccountCreated(AccountRead):
    password: str | None = Field(
        None,
        description="Only when `password` was asked for (else absent): the generated "
        "password, shown only in this answer.",
        examples=["m2o1Xr7B4w8tC6qv0J3Y9uZk"],
    )


class AccountQuery(PageQuery):
    company_id: uuid.UUID | None = None
