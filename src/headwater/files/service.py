"""File use cases: hand out upload URLs, receive embedded uploads, notice S3 uploads,
expire what never arrived, list and re-submit quarantined rows."""

from __future__ import annotations

import functools
import hmac
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any
from urllib.parse import unquote_plus

import anyio.to_thread
import structlog
from sqlalchemy import Connection, Insert, insert, select, update
from sqlalchemy.orm import Session

from headwater import wakeups
from headwater.config import Settings
from headwater.db import Database, core_connection, dialect_insert
from headwater.files import parsers
from headwater.files.errors import (
    BadNotificationSecret,
    FileTooLarge,
    UnsupportedFileType,
    UploadRefused,
)
from headwater.files.models import (
    EXPIRED,
    PENDING,
    QUEUED,
    RECEIVING,
    REFUSED,
    UPLOADED,
    FileJob,
    FileUpload,
)
from headwater.files.processing import file_error
from headwater.files.schemas import UploadUrl, UploadUrlQuery
from headwater.files.stores import EmbeddedStore, Incoming, Store
from headwater.identity.tokens import Principal
from headwater.ingestion import api as ingestion
from headwater.kit.clock import utcnow, utcnow_ms

log = structlog.get_logger("headwater.files")

WRITE_PIECE = 1024 * 1024  # PUT bodies reach the disk in pieces of this size


def _media_type(content_type: str | None) -> str:
    """`text/CSV; charset=utf-8` → `text/csv`: how content types are compared here."""
    return (content_type or "").split(";", 1)[0].strip().lower()


# --- upload URL -------------------------------------------------------------------------------


def create_upload_url(
    session: Session, caller: Principal, query: UploadUrlQuery, *, store: Store, settings: Settings
) -> UploadUrl:
    """A file transaction in `awaiting_upload` and the URL its file goes to."""
    content_type = _media_type(query.content_type)
    if content_type not in parsers.CONTENT_TYPES:
        raise UnsupportedFileType(query.content_type)
    dataset = ingestion.file_dataset(session, caller, query.client_id, query.dataset_id)
    now = utcnow_ms()
    lifetime = settings.upload_url_lifetime_seconds
    expires_at = now + timedelta(seconds=lifetime)
    transaction_id = ingestion.open_file(
        session,
        dataset,
        channel="upload",
        author_id=caller.author_id,
        file_name=query.file_name,
        content_type=content_type,
    )
    file_id = uuid.uuid4()
    key = store.object_key(company_id=dataset.company_id, file_id=file_id)
    session.add(
        FileUpload(
            id=file_id,
            transaction_id=transaction_id,
            company_id=dataset.company_id,
            bucket=store.bucket,
            object_key=key,
            content_type=content_type,
            max_bytes=settings.max_file_bytes,
            state=PENDING,
            expires_at=expires_at,
            created_at=now,
        )
    )
    url = store.upload_url(
        key=key, content_type=content_type, max_bytes=settings.max_file_bytes, expires_at=expires_at
    )
    session.flush()
    return UploadUrl(
        upload_url=url,
        headers={"Content-Type": content_type},
        transaction_id=transaction_id,
        file_id=file_id,
        expires_at=expires_at,
        expires_in=lifetime,
    )


# --- a file another channel has stored ---------------------------------------------------------


def accept_stored(
    connection: Connection | Session,
    caller: Principal,
    *,
    channel: ingestion.Channel,
    client_id: str,
    dataset_id: str,
    file_name: str,
    content_type: str,
    store: Store,
    key: str,
    file_id: uuid.UUID,
    size: int,
    etag: str,
) -> uuid.UUID:
    """A file a channel (SFTP, email) has stored whole at `key`: its transaction, begun
    `processing`, and its job, queued as an upload's would be, in the caller's database
    transaction; until it commits, the worker sees nothing. 403/404 as for an upload URL.
    Core statements, not the ORM: every message and every SFTP upload passes here."""
    connection = core_connection(connection)
    dataset = ingestion.file_dataset(connection, caller, client_id, dataset_id)
    now = utcnow_ms()
    transaction_id = ingestion.open_file(
        connection,
        dataset,
        channel=channel,
        author_id=caller.author_id,
        status=ingestion.Status.PROCESSING,
        file_name=file_name,
        content_type=content_type,
        file_size=size,
        uploaded_at=now,
    )
    connection.execute(
        insert(FileUpload),
        [
            {
                "id": file_id,
                "transaction_id": transaction_id,
                "company_id": dataset.company_id,
                "bucket": store.bucket,
                "object_key": key,
                "content_type": content_type,
                "max_bytes": size,
                "state": UPLOADED,
                "etag": etag,
                "size": size,
                "expires_at": now,
                "created_at": now,
                "uploaded_at": now,
            }
        ],
    )
    _queue_job(
        connection,
        company_id=dataset.company_id,
        file_id=file_id,
        bucket=store.bucket,
        key=key,
        etag=etag,
    )
    return transaction_id


# --- noticing an upload -----------------------------------------------------------------------


def _mark_uploaded(
    connection: Connection, upload: Any, *, size: int, etag: str, from_states: Sequence[str]
) -> bool:
    """Move an upload to `uploaded`, its transaction to `processing`, and queue its job;
    False if the upload was no longer in one of `from_states` (someone else moved it)."""
    now = utcnow_ms()
    moved = connection.execute(
        update(FileUpload)
        .where(FileUpload.id == upload.id, FileUpload.state.in_(from_states))
        .values(state=UPLOADED, size=size, etag=etag, uploaded_at=now)
    ).rowcount
    if not moved:
        return False
    ingestion.received(connection, upload.transaction_id, size=size, at=now)
    _queue_job(
        connection,
        company_id=upload.company_id,
        file_id=upload.id,
        bucket=upload.bucket,
        key=upload.object_key,
        etag=etag,
    )
    return True


@functools.cache
def _queued(dialect: str) -> Insert:
    """`_queue_job`'s statement, built once a dialect (values bound at each call)."""
    return dialect_insert(dialect)(FileJob).on_conflict_do_nothing(  # type: ignore[no-any-return]
        index_elements=["bucket", "object_key", "etag", "company_id"]
    )


def _queue_job(
    connection: Connection,
    *,
    company_id: uuid.UUID,
    file_id: uuid.UUID,
    bucket: str,
    key: str,
    etag: str,
) -> None:
    """Queue the processing of a stored file, once per object version; the workers
    are woken once it commits."""
    wakeups.mark(connection, "files")
    connection.execute(
        _queued(connection.dialect.name),
        {
            "id": uuid.uuid4(),
            "company_id": company_id,
            "file_id": file_id,
            "bucket": bucket,
            "object_key": key,
            "etag": etag,
            "state": QUEUED,
            "attempts": 0,
            "created_at": utcnow_ms(),
        },
    )


def _refuse(connection: Connection, upload: Any, *, size: int | None, message: str) -> None:
    """The object arrived but will not be processed: the transaction is `rejected`."""
    now = utcnow_ms()
    moved = connection.execute(
        update(FileUpload)
        .where(FileUpload.id == upload.id, FileUpload.state == PENDING)
        .values(state=REFUSED, size=size, uploaded_at=now)
    ).rowcount
    if moved:
        ingestion.finish(
            connection,
            upload.transaction_id,
            ingestion.Status.REJECTED,
            file_size=size,
            uploaded_at=now,
            completed_at=now,
            error_count=1,
            errors=[file_error(0, 0, message)],
        )


_UPLOAD_COLUMNS = (
    FileUpload.id,
    FileUpload.transaction_id,
    FileUpload.company_id,
    FileUpload.bucket,
    FileUpload.object_key,
    FileUpload.content_type,
    FileUpload.max_bytes,
    FileUpload.state,
    FileUpload.expires_at,
)


@dataclass(frozen=True, slots=True)
class SignedPut:
    """What an embedded PUT carries: its key, query and headers as received."""

    key: str
    expires: str | None
    max_bytes: str | None
    signature: str | None
    content_type: str | None
    content_length: str | None
    unsigned: tuple[str, ...] = ()  # query parameters the signature does not cover


def _check_put(db: Database, store: EmbeddedStore, put: SignedPut) -> Any:
    """The upload a PUT may fill, now `receiving`; else 403 (or 413) saying why."""
    if not (put.expires and put.max_bytes and put.signature):
        raise UploadRefused("The URL lacks its expires, max_bytes or signature parameter.")
    if put.unsigned:
        raise UploadRefused(
            f"The URL's signature does not cover the parameter {put.unsigned[0]!r}; "
            "send the upload_url exactly as it was given."
        )
    if not (put.expires.isdigit() and put.max_bytes.isdigit()):
        raise UploadRefused("The URL's signature does not match.")
    try:
        file_id = uuid.UUID(hex=put.key)
    except ValueError:
        raise UploadRefused("The URL's signature does not match.") from None
    with db.read_connection() as connection:
        upload = connection.execute(
            select(*_UPLOAD_COLUMNS).where(FileUpload.id == file_id, FileUpload.bucket == "")
        ).one_or_none()
    expected = (
        store.signature(
            key=put.key,
            expires=int(put.expires),
            content_type=upload.content_type,
            max_bytes=int(put.max_bytes),
        )
        if upload is not None
        else ""
    )
    if upload is None or not hmac.compare_digest(expected, put.signature):
        raise UploadRefused("The URL's signature does not match.")
    if int(put.expires) < utcnow().timestamp():
        raise UploadRefused("The upload URL has expired; ask for a new one.")
    if put.content_type != upload.content_type:  # byte for byte, as S3 compares it
        raise UploadRefused(
            f"Content-Type {put.content_type or '(none)'!r} is not the signed "
            f"{upload.content_type!r}; send it exactly as the upload URL's headers say."
        )
    declared = put.content_length
    if declared is not None and declared.isdigit() and int(declared) > int(put.max_bytes):
        raise FileTooLarge(f"The file is larger than the limit of {put.max_bytes} bytes.")
    # a PUT while another is still arriving is taken too (S3 takes both): a client that
    # retries after a connection died must not wait for the server to notice the death
    with db.begin() as connection:
        taken = connection.execute(
            update(FileUpload)
            .where(FileUpload.id == file_id, FileUpload.state.in_([PENDING, RECEIVING]))
            .values(state=RECEIVING)
        ).rowcount
    if not taken:
        raise UploadRefused(_USED)
    return upload


_USED = "This upload URL has been used or is no longer valid."


def _release(db: Database, store: EmbeddedStore, upload: Any, *, placed: bool) -> None:
    """After a failed PUT, the URL may be used again (until it expires). A body already
    placed in the store is removed under the upload's row lock, so that it can never be
    the file of another PUT that finished since."""
    try:
        with db.begin() as connection:
            released = connection.execute(
                update(FileUpload)
                .where(FileUpload.id == upload.id, FileUpload.state.in_([PENDING, RECEIVING]))
                .values(state=PENDING)
            ).rowcount
            if released and placed:
                store.delete(upload.object_key)
    except Exception:
        log.exception("could not release an upload after a failed PUT", file_id=str(upload.id))


async def receive_upload(
    db: Database, store: EmbeddedStore, put: SignedPut, body: AsyncIterator[bytes]
) -> str:
    """Stream a PUT body to the embedded store; answers the object's ETag.

    The body reaches the disk in pieces (never whole in memory), is fsynced and renamed
    into place only when complete and within the limit; anything else leaves nothing.
    """
    upload = await anyio.to_thread.run_sync(_check_put, db, store, put)
    limit = int(put.max_bytes or 0)
    incoming: Incoming | None = None
    placed = False
    try:
        incoming = await anyio.to_thread.run_sync(store.incoming_file, put.key)
        pending: list[bytes] = []
        held = 0
        async for chunk in body:
            if incoming.size + held + len(chunk) > limit:
                raise FileTooLarge(f"The file is larger than the limit of {limit} bytes.")
            pending.append(chunk)
            held += len(chunk)
            if held >= WRITE_PIECE:
                await anyio.to_thread.run_sync(incoming.write, b"".join(pending))
                pending, held = [], 0
        if pending:
            await anyio.to_thread.run_sync(incoming.write, b"".join(pending))
        await anyio.to_thread.run_sync(incoming.seal)
        arrived = incoming

        def record() -> bool:
            """The first PUT to finish is the file: its body takes the object's place
            inside the transaction that marks the upload, so a later one finds it used."""
            nonlocal placed
            with db.begin() as connection:
                marked = _mark_uploaded(
                    connection,
                    upload,
                    size=arrived.size,
                    etag=arrived.etag,
                    from_states=[PENDING, RECEIVING],
                )
                if marked:
                    arrived.place()
                    placed = True
                return marked

        recorded = await anyio.to_thread.run_sync(record)
    except BaseException:
        if incoming is not None:
            await anyio.to_thread.run_sync(incoming.discard)
        await anyio.to_thread.run_sync(partial(_release, db, store, upload, placed=placed))
        raise
    if not recorded:  # another PUT of this URL finished first, or the URL expired
        await anyio.to_thread.run_sync(arrived.discard)
        raise UploadRefused(_USED)
    return arrived.etag


def notice_object(db: Database, store: Store, *, bucket: str, key: str) -> bool:
    """An object may have arrived at `key` (a notification or the poller says so): queue
    its processing once, or refuse it if it is over the size limit or of another type.
    True if this call queued or refused it; a repeated notice does nothing."""
    with db.read_connection() as connection:
        upload = connection.execute(
            select(*_UPLOAD_COLUMNS).where(
                FileUpload.bucket == bucket, FileUpload.object_key == key
            )
        ).one_or_none()
    if upload is None or upload.state != PENDING:
        return False
    info = store.head(key)
    if info is None:
        return False
    given = _media_type(info.content_type)
    if info.size > upload.max_bytes:
        # removed before the refusal commits, outside any database transaction: a refusal
        # whose commit fails is noticed again (or expires), and its bytes are gone anyway
        store.delete(key)
        with db.begin() as connection:
            _refuse(
                connection,
                upload,
                size=info.size,
                message=f"the file is {info.size} bytes; the limit is {upload.max_bytes}",
            )
        return True
    with db.begin() as connection:
        if info.content_type is not None and given != upload.content_type:
            _refuse(
                connection,
                upload,
                size=info.size,
                message=f"the file was stored as {info.content_type!r}, "
                f"not the signed {upload.content_type!r}",
            )
            return True
        return _mark_uploaded(
            connection, upload, size=info.size, etag=info.etag, from_states=[PENDING]
        )


def check_notification_secret(settings: Settings, authorization: str | None) -> None:
    secret = settings.storage_notification_secret
    given = (authorization or "").removeprefix("Bearer ").strip()
    expected = secret.get_secret_value().encode() if secret is not None else b""
    if not expected or not hmac.compare_digest(given.encode(), expected):
        raise BadNotificationSecret("The notification secret is missing or wrong.")


def handle_notification(db: Database, store: Store, event: Any) -> int:
    """An S3 event (`{"Records": [...]}`): notice each object created in our bucket.
    Answers how many uploads it queued (or refused); repeats count nothing."""
    records = event.get("Records") if isinstance(event, dict) else None
    noticed = 0
    for item in records if isinstance(records, list) else []:
        if not isinstance(item, dict) or not str(item.get("eventName", "")).startswith(
            "ObjectCreated"
        ):
            continue
        s3 = item.get("s3") or {}
        bucket = str((s3.get("bucket") or {}).get("name", ""))
        key = unquote_plus(str((s3.get("object") or {}).get("key", "")))
        if bucket == store.bucket and key:
            noticed += notice_object(db, store, bucket=bucket, key=key)
    return noticed


def poll_pending(db: Database, store: Store, *, limit: int = 100) -> int:
    """Look for objects of pending S3 uploads (in case a notification never came)."""
    if not store.bucket:
        return 0
    with db.read_connection() as connection:
        keys = connection.scalars(
            select(FileUpload.object_key)
            .where(
                FileUpload.bucket == store.bucket,
                FileUpload.state == PENDING,
                FileUpload.expires_at > utcnow() - timedelta(hours=1),
            )
            .order_by(FileUpload.created_at)
            .limit(limit)
        ).all()
    return sum(notice_object(db, store, bucket=store.bucket, key=key) for key in keys)


def expire_uploads(db: Database, *, grace: timedelta, limit: int = 500) -> int:
    """Uploads that never arrived, past their URL's lifetime and `grace`: `expired`."""
    cutoff = utcnow() - grace
    with db.begin() as connection:
        rows = connection.execute(
            select(FileUpload.id, FileUpload.transaction_id)
            .where(FileUpload.state.in_([PENDING, RECEIVING]), FileUpload.expires_at < cutoff)
            .limit(limit)
        ).all()
        now = utcnow_ms()
        expired = 0
        for row in rows:
            moved = connection.execute(
                update(FileUpload)
                .where(FileUpload.id == row.id, FileUpload.state.in_([PENDING, RECEIVING]))
                .values(state=EXPIRED)
            ).rowcount
            if moved:
                expired += 1
                ingestion.finish(
                    connection, row.transaction_id, ingestion.Status.EXPIRED, completed_at=now
                )
    return expired


def known_files(session: Session, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these ids are uploads' (a transaction's stored file)."""
    return set(session.scalars(select(FileUpload.id).where(FileUpload.id.in_(list(ids)))))


def stored_files(
    connection: Connection, transaction_ids: Sequence[uuid.UUID]
) -> list[tuple[uuid.UUID, str, str]]:
    """The raw files of these transactions that were stored (an upload, an SFTP or an
    email file): (transaction, bucket, object key)."""
    if not transaction_ids:
        return []
    rows = connection.execute(
        select(FileUpload.transaction_id, FileUpload.bucket, FileUpload.object_key).where(
            FileUpload.transaction_id.in_(list(transaction_ids)),
            FileUpload.state.in_([UPLOADED, REFUSED]),
        )
    )
    return [(row.transaction_id, row.bucket, row.object_key) for row in rows]
