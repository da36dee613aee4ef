"""Operator API models for inboxes (contract section 12)."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import Field, StringConstraints

from headwater.kit.clock import Timestamp
from headwater.kit.pagination import PageQuery
from headwater.kit.schemas import Input, Output

Sender = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        to_lower=True,
        pattern=r"^([^@\s]+@[^@\s]+\.[^@\s]+|@[^@\s]+\.[^@\s]+)$",
        max_length=320,
    ),
    Field(
        description="A full address, or `@domain` for every address of that domain; "
        "matched case-insensitively against the envelope sender (MAIL FROM).",
        examples=["ann@example.com"],
    ),
]
SENDERS = Field(min_length=1, max_length=100, examples=[["ann@example.com", "@example.org"]])


class InboxCreate(Input):
    allowed_senders: list[Sender] = SENDERS


class InboxUpdate(Input):
    allowed_senders: list[Sender] = SENDERS


class InboxRead(Output):
    inbox_id: uuid.UUID
    address: str = Field(examples=["in-3f6k2m9q8t1w4e7r5y0u@ingest.localhost"])
    client_id: str = Field(examples=["acme-crm"])
    dataset_id: str = Field(examples=["orders"])
    allowed_senders: list[str] = Field(examples=[["ann@example.com", "@example.org"]])
    created_at: Timestamp


class InboxQuery(PageQuery):
    client_id: str | None = None
