"""Files an SFTP account holds under temporary names until it renames them (contract
11): in the database, so any instance sees them and a restart keeps them; at most
`HEADWATER_SFTP_MAX_HELD` an account, removed with their bytes after
`HEADWATER_SFTP_HELD_HOURS`.

Each function works in the caller's unit of work and answers the object keys that are
no longer referenced: the caller removes them from the store after its commit, so a
held entry never points at bytes already removed.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, func, select
from sqlalchemy.orm import Session

from headwater.kit.clock import utcnow, utcnow_ms
from headwater.sftp.models import SftpHeldFile
from headwater.sftp.service import Login


class TooManyHeld(Exception):
    """The account holds its maximum of files already."""


@dataclass(frozen=True, slots=True)
class Place:
    """Where a held file is: a name in one of the account's dataset directories."""

    client_id: str
    dataset_id: str
    name: str


def _mine(login: Login) -> tuple[ColumnElement[bool], ...]:
    """The account's held files (the leading columns of the primary key)."""
    return SftpHeldFile.company_id == login.company_id, SftpHeldFile.username == login.username


def _in(login: Login, client_id: str, dataset_id: str) -> tuple[ColumnElement[bool], ...]:
    return (
        *_mine(login),
        SftpHeldFile.client_id == client_id,
        SftpHeldFile.dataset_id == dataset_id,
    )


def _where(login: Login, place: Place) -> tuple[ColumnElement[bool], ...]:
    return (*_in(login, place.client_id, place.dataset_id), SftpHeldFile.name == place.name)


def find(session: Session, login: Login, place: Place) -> SftpHeldFile | None:
    return session.scalars(select(SftpHeldFile).where(*_where(login, place))).one_or_none()


def listing(session: Session, login: Login, client_id: str, dataset_id: str) -> list[SftpHeldFile]:
    return list(
        session.scalars(
            select(SftpHeldFile)
            .where(*_in(login, client_id, dataset_id))
            .order_by(SftpHeldFile.name)
        )
    )


def hold(
    session: Session,
    login: Login,
    place: Place,
    *,
    stored: SftpHeldFile,
    max_held: int,
) -> list[str]:
    """Hold `stored` at `place`, replacing what was held there; TooManyHeld past
    `max_held` files. The key of the file it replaced, if any."""
    replaced = release(session, login, place)
    count = session.scalar(select(func.count()).where(*_mine(login)))
    if (count or 0) >= max_held:
        raise TooManyHeld(f"too many held files: at most {max_held} an account")
    session.add(stored)
    session.flush()
    return [replaced.object_key] if replaced is not None else []


def release(session: Session, login: Login, place: Place) -> SftpHeldFile | None:
    """The file held at `place`, no longer held (it is being ingested, moved or removed)."""
    found = find(session, login, place)
    if found is not None:
        session.delete(found)
        session.flush()
    return found


def move(session: Session, login: Login, old: Place, new: Place, *, max_held: int) -> list[str]:
    """A held file renamed to another temporary name. The keys no longer referenced."""
    found = release(session, login, old)
    if found is None:
        return []
    moved = entry(
        login, new, file_id=found.file_id, key=found.object_key, size=found.size, etag=found.etag
    )
    return hold(session, login, new, stored=moved, max_held=max_held)


def entry(
    login: Login, place: Place, *, file_id: uuid.UUID, key: str, size: int, etag: str
) -> SftpHeldFile:
    """A held file's row, not yet added."""
    return SftpHeldFile(
        company_id=login.company_id,
        username=login.username,
        client_id=place.client_id,
        dataset_id=place.dataset_id,
        name=place.name,
        file_id=file_id,
        object_key=key,
        size=size,
        etag=etag,
        held_at=utcnow_ms(),
    )


def expire(session: Session, *, hours: int, now: datetime | None = None) -> Sequence[str]:
    """Forget files held longer than `hours` (the worker); their keys."""
    cutoff = (now or utcnow()) - timedelta(hours=hours)
    return session.scalars(
        delete(SftpHeldFile).where(SftpHeldFile.held_at < cutoff).returning(SftpHeldFile.object_key)
    ).all()


def known(session: Session, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these file ids are held files'."""
    found = select(SftpHeldFile.file_id).where(SftpHeldFile.file_id.in_(list(ids)))
    return set(session.scalars(found))
