"""The companies' hash keys (contract section 16): 32 random bytes per company, made by
the service when a company's first transform steps are set, kept sealed
(`kit.sealing`, purpose `HASH_KEYS`, the company's id as associated data), opened when
a dataset's steps are compiled; never shown, never logged."""

from __future__ import annotations

import base64
import secrets
import uuid

from sqlalchemy import Connection, select

from headwater.db import dialect_insert
from headwater.ingestion.models import CompanyHashKey
from headwater.kit import sealing
from headwater.kit.cache import LRU
from headwater.kit.clock import utcnow_ms

_opened: LRU[bytes] = LRU(maxsize=1024)


def ensure(connection: Connection, company_id: uuid.UUID) -> None:
    """Make the company's key unless it has one (in the caller's transaction)."""
    sealed = sealing.box(sealing.HASH_KEYS).seal(
        company_id, base64.b64encode(secrets.token_bytes(32)).decode()
    )
    connection.execute(
        dialect_insert(connection.dialect)(CompanyHashKey)
        .values(company_id=company_id, sealed=sealed, created_at=utcnow_ms())
        .on_conflict_do_nothing(index_elements=["company_id"])
    )


def key(connection: Connection, company_id: uuid.UUID) -> bytes:
    """The company's key, opened (once a process)."""

    def read() -> bytes:
        sealed = connection.scalar(
            select(CompanyHashKey.sealed).where(CompanyHashKey.company_id == company_id)
        )
        if sealed is None:
            raise LookupError(f"company {company_id} has no hash key")
        return base64.b64decode(sealing.box(sealing.HASH_KEYS).open(company_id, sealed))

    return _opened.get_or_compute(company_id, read)


def opened(connection: Connection, company_id: uuid.UUID) -> bool:
    """Whether the company has a key (opened, and kept for this process, if it has)."""
    try:
        key(connection, company_id)
    except LookupError:
        return False
    return True
