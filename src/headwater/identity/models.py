"""Identity tables."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, JSONDocument, UTCDateTime


class Company(Base):
    __tablename__ = "companies"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class IngestionClient(Base):
    """A `client_id` of the interface document: a namespace of datasets, owned by a company."""

    __tablename__ = "ingestion_clients"
    __table_args__ = (Index(None, "company_id", "created_at"),)

    client_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("companies.id"))
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class Credential(Base):
    """An OAuth client of the embedded identity provider. Only the secret's hash is kept."""

    __tablename__ = "credentials"
    __table_args__ = (Index(None, "company_id", "created_at"),)

    client_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))
    company_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("companies.id"))
    author_id: Mapped[uuid.UUID] = mapped_column(Uuid, unique=True, default=uuid.uuid4)
    scopes: Mapped[list[str]] = mapped_column(JSONDocument)
    client_ids: Mapped[list[str]] = mapped_column(JSONDocument)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)

    @property
    def is_operator(self) -> bool:
        return self.company_id is None


class TokenIssuer(Base):
    """The `iss` of this installation's tokens, recorded by the first instance to start,
    so that every instance sharing the database signs and accepts the same one."""

    __tablename__ = "token_issuer"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1: one row
    issuer: Mapped[str] = mapped_column(String(2048))
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SharedKey(Base):
    """A key every node of the installation must hold the same (contract 19), made
    once by the first node that needs it and sealed (`kit.sealing`): the SFTP host
    key; and `sealing`, a value sealed with the sealing material, which tells a node
    whose material differs from the others' (it refuses to start)."""

    __tablename__ = "shared_keys"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SigningKey(Base):
    """A token signing key pair. The newest signs; every stored key verifies."""

    __tablename__ = "signing_keys"

    kid: Mapped[str] = mapped_column(String(64), primary_key=True)
    algorithm: Mapped[str] = mapped_column(String(10))
    private_key_pem: Mapped[str] = mapped_column(Text)
    public_jwk: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
