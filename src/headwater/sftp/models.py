"""SFTP accounts, the files they hold under temporary names, and the files they
uploaded (for receipts)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, UTCDateTime


class SftpAccount(Base):
    """A login for one company's systems: public keys and, optionally, a password."""

    __tablename__ = "sftp_accounts"

    username: Mapped[str] = mapped_column(String(64), primary_key=True)
    # the author of its transactions
    id: Mapped[uuid.UUID] = mapped_column(Uuid, unique=True, default=uuid.uuid4)
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("companies.id"), index=True)
    client_ids: Mapped[list[str]] = mapped_column(JSON)
    # [{"key": "ssh-ed25519 AAAA...", "fingerprint": "SHA256:..."}], comments dropped
    public_keys: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    password_hash: Mapped[str | None] = mapped_column(String(255), default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SftpUpload(Base):
    """A file an account uploaded and the transaction it became; its receipt is shown
    until removed or `HEADWATER_SFTP_RECEIPT_DAYS` after the upload."""

    __tablename__ = "sftp_uploads"
    __table_args__ = (Index(None, "company_id", "client_id", "dataset_id", "created_at"),)

    transaction_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    username: Mapped[str] = mapped_column(String(64))
    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    client_id: Mapped[str] = mapped_column(String(64))
    dataset_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    receipt_removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class SftpHeldFile(Base):
    """A file stored under a temporary name (`.part`, `.tmp`, `.filepart`, `.name`),
    waiting for its rename: seen from every instance and kept across restarts, removed
    with its bytes `HEADWATER_SFTP_HELD_HOURS` after it was written."""

    __tablename__ = "sftp_held_files"
    __table_args__ = (Index(None, "held_at"), Index(None, "file_id"))

    company_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), primary_key=True)
    client_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    file_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    object_key: Mapped[str] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(BigInteger)
    etag: Mapped[str] = mapped_column(String(255))
    held_at: Mapped[datetime] = mapped_column(UTCDateTime)
