"""A file an SFTP account has uploaded whole, into the ingestion core: one use case, in
the server's unit of work."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from headwater.files import service as files
from headwater.files.stores import Store
from headwater.sftp import held
from headwater.sftp.errors import HeldFileGone
from headwater.sftp.service import Login, record_upload


def accept_upload(
    session: Session,
    login: Login,
    *,
    store: Store,
    client_id: str,
    dataset_id: str,
    name: str,
    content_type: str,
    file_id: uuid.UUID,
    key: str,
    size: int,
    etag: str,
    renamed: held.Place | None,
) -> uuid.UUID:
    """A file the account has uploaded whole becomes a transaction with a queued job
    (`files.service.accept_stored`) and the account's receipt, in the caller's unit of
    work, which also lets go of the held file it was `renamed` from (`HeldFileGone` if
    another session took that first). The transaction's id."""
    if renamed is not None and held.release(session, login, renamed) is None:
        raise HeldFileGone(f"no file {renamed.name} being uploaded")
    transaction_id = files.accept_stored(
        session,
        login.principal(),
        channel="sftp",
        client_id=client_id,
        dataset_id=dataset_id,
        file_name=name,
        content_type=content_type,
        store=store,
        key=key,
        file_id=file_id,
        size=size,
        etag=etag,
    )
    record_upload(
        session,
        login,
        transaction_id=transaction_id,
        client_id=client_id,
        dataset_id=dataset_id,
        name=name,
    )
    return transaction_id
