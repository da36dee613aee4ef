"""The console's one table: its sign-in sessions."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from headwater.db import Base, UTCDateTime


class ConsoleSession(Base):
    """A signed-in browser. The cookie holds a random token; only its SHA-256 is kept,
    so a copy of the table signs nobody in. `csrf` is the token every form of the
    session posts back."""

    __tablename__ = "console_sessions"
    __table_args__ = (Index(None, "expires_at"), Index(None, "credential_id"))

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    credential_id: Mapped[str] = mapped_column(String(64), ForeignKey("credentials.client_id"))
    company_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, default=None)
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
