"""Keys every node of an installation holds the same (contract 19): made once by the
first node that needs one, kept in the database sealed (`kit.sealing`), read by every
other. A node whose sealing material differs cannot open them and refuses to start,
rather than seal new secrets that the other nodes could not open."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from sqlalchemy import select
from sqlalchemy.orm import Session

from headwater.db import dialect_insert
from headwater.identity.errors import SealingMismatch
from headwater.identity.models import SharedKey
from headwater.kit import sealing
from headwater.kit.clock import utcnow

SHARED_KEYS = b"headwater shared keys"
# a value sealed by the first node to start: the others check that they can open it
_SEALING = "sealing"


def shared_key(session: Session, name: str, make: Callable[[], str]) -> str:
    """The shared key `name`; `make()` gives it if no node has yet (the first to commit
    wins, and every node then reads the winner). Raises SealingMismatch."""
    box = sealing.box(SHARED_KEYS)
    owner = uuid.uuid5(uuid.NAMESPACE_URL, f"headwater:shared:{name}")
    found = session.scalar(select(SharedKey.sealed).where(SharedKey.name == name))
    if found is None:
        session.execute(
            dialect_insert(session.get_bind().dialect)(SharedKey)
            .values(name=name, sealed=box.seal(owner, make()), created_at=utcnow())
            .on_conflict_do_nothing(index_elements=["name"])
        )
        found = session.scalars(select(SharedKey.sealed).where(SharedKey.name == name)).one()
    try:
        return box.open(owner, found)
    except InvalidTag:
        raise SealingMismatch from None


def check_sealing(session: Session) -> None:
    """Raise SealingMismatch unless this node seals as the first node did."""
    shared_key(session, _SEALING, lambda: _SEALING)
