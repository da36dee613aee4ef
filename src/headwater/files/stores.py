"""Object stores behind one Protocol: the embedded store (local disk, HMAC-signed PUT
URLs answered by the service itself) and any S3-compatible store (presigned URLs)."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import os
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, Protocol, cast
from urllib.parse import urlencode

from headwater.config import Settings
from headwater.kit import keyfile
from headwater.kit.clock import utcnow

UPLOAD_PATH = "/uploads/"
DOWNLOAD_PATH = "/downloads/"
# the embedded store's signing key (HMAC-SHA256)
KEY_BYTES = 32
_KEY = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    size: int
    etag: str
    content_type: str | None


class Writer(Protocol):
    """A file on its way into a store, written in pieces: whole after `commit` (durable),
    absent after `discard`."""

    size: int

    @property
    def etag(self) -> str: ...

    def write(self, data: bytes) -> None: ...

    def rest(self) -> None:
        """Let go of what the writer holds between pieces (a file descriptor): a file
        that waits for its next piece, such as an idle SFTP handle, costs none."""
        ...

    def commit(self) -> None: ...

    def discard(self) -> None: ...


class Store(Protocol):
    """Where uploaded files live. `bucket` is "" for the embedded store."""

    bucket: str

    def object_key(self, *, company_id: uuid.UUID, file_id: uuid.UUID) -> str: ...

    def upload_url(
        self, *, key: str, content_type: str, max_bytes: int, expires_at: datetime
    ) -> str: ...

    def export_key(self, *, company_id: uuid.UUID, export_id: uuid.UUID, suffix: str) -> str: ...

    def download_url(self, *, key: str, filename: str, expires_at: datetime) -> str:
        """A presigned GET of the object, saved as `filename`, until `expires_at`."""
        ...

    def head(self, key: str) -> ObjectInfo | None: ...

    def open(self, key: str) -> BinaryIO:
        """The object's bytes; FileNotFoundError when the store does not hold it."""
        ...

    def delete(self, key: str) -> None: ...

    def ping(self) -> None: ...

    def incoming_file(self, key: str) -> Writer:
        """A writer for a file a channel receives (SFTP, email) at `key`."""
        ...

    def sweep_incoming(self, *, older_than: float) -> int:
        """Remove what writers left that were never committed or discarded (a process
        killed mid-file), untouched for `older_than` seconds; how many."""
        ...

    def stored_files(self, *, older_than: float) -> Iterator[tuple[str, uuid.UUID]]:
        """Every stored object of an upload or an export written more than `older_than`
        seconds ago: its key and the id it was made from (the file's or the export's)."""
        ...


# --- embedded ---------------------------------------------------------------------------------


class EmbeddedStore:
    """Files on local disk under `<data_dir>/store`, written only by a signed PUT.

    The signature (HMAC-SHA256 with a server-side key) binds the method, the path, the
    expiry, the content type and the size limit: changing any of them voids it. Keys are
    ids the service made (32 hex digits), so no name from a client reaches the disk.
    """

    bucket = ""

    def __init__(self, root: Path, *, public_url: str, signing_key: bytes | None) -> None:
        self.root = root
        self.objects = root / "objects"
        self.incoming = root / "incoming"
        self.objects.mkdir(parents=True, exist_ok=True)
        self.incoming.mkdir(parents=True, exist_ok=True)
        self.public_url = public_url.rstrip("/")
        self._key = signing_key or _load_or_make_key(root / "signing.key")

    def object_key(self, *, company_id: uuid.UUID, file_id: uuid.UUID) -> str:
        return file_id.hex

    def signature(self, *, key: str, expires: int, content_type: str, max_bytes: int) -> str:
        message = f"PUT\n{UPLOAD_PATH}{key}\n{expires}\n{content_type}\n{max_bytes}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def export_key(self, *, company_id: uuid.UUID, export_id: uuid.UUID, suffix: str) -> str:
        return export_id.hex

    def download_signature(self, *, key: str, expires: int, filename: str) -> str:
        """GET's signature: binds the method, the path, the expiry and the file name."""
        message = f"GET\n{DOWNLOAD_PATH}{key}\n{expires}\n{filename}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def download_url(self, *, key: str, filename: str, expires_at: datetime) -> str:
        expires = int(expires_at.timestamp())
        query = {
            "expires": expires,
            "filename": filename,
            "signature": self.download_signature(key=key, expires=expires, filename=filename),
        }
        return f"{self.public_url}{DOWNLOAD_PATH}{key}?{urlencode(query)}"

    def path_of(self, key: str) -> Path:
        """Where an object is on disk (FileNotFoundError for a key that is not one)."""
        return self._path(key)

    def upload_url(
        self, *, key: str, content_type: str, max_bytes: int, expires_at: datetime
    ) -> str:
        expires = int(expires_at.timestamp())
        query = {
            "expires": expires,
            "max_bytes": max_bytes,
            "signature": self.signature(
                key=key, expires=expires, content_type=content_type, max_bytes=max_bytes
            ),
        }
        return f"{self.public_url}{UPLOAD_PATH}{key}?{urlencode(query)}"

    def _path(self, key: str) -> Path:
        if not _KEY.match(key):
            raise FileNotFoundError(key)
        return self.objects / key

    def head(self, key: str) -> ObjectInfo | None:
        try:
            size = self._path(key).stat().st_size
        except FileNotFoundError:
            return None
        return ObjectInfo(size=size, etag="", content_type=None)

    def open(self, key: str) -> BinaryIO:
        return self._path(key).open("rb")

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def ping(self) -> None:
        if not os.access(self.objects, os.W_OK):
            raise OSError(f"the embedded store {self.objects} is not writable")

    def incoming_file(self, key: str) -> Incoming:
        return Incoming(self.incoming / f"{key}.{secrets.token_hex(4)}.part", self._path(key))

    def stored_files(self, *, older_than: float) -> Iterator[tuple[str, uuid.UUID]]:
        cutoff = time.time() - older_than
        for path in self.objects.iterdir():
            with contextlib.suppress(FileNotFoundError, ValueError):
                if path.stat().st_mtime < cutoff:
                    yield path.name, uuid.UUID(hex=path.name)

    def sweep_incoming(self, *, older_than: float) -> int:
        cutoff = time.time() - older_than
        swept = 0
        for part in self.incoming.glob("*.part"):
            with contextlib.suppress(FileNotFoundError):
                if part.stat().st_mtime < cutoff:
                    part.unlink()
                    swept += 1
        return swept


class Incoming:
    """One PUT body on its way to disk: written to a part file, fsynced, then renamed into
    place, so an object is either whole or absent. `discard` removes the part file."""

    def __init__(self, part: Path, final: Path) -> None:
        self.part = part
        self.final = final
        self.size = 0
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._file: io.BufferedWriter | None = part.open("xb")

    def _opened(self) -> io.BufferedWriter:
        """The part file, opened again after `rest`."""
        if self._file is None:
            self._file = self.part.open("ab")
        return self._file

    def write(self, data: bytes) -> None:
        self._opened().write(data)
        self._md5.update(data)
        self.size += len(data)

    def rest(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def etag(self) -> str:
        return self._md5.hexdigest()

    def commit(self) -> None:
        self.seal()
        self.place()

    def seal(self) -> None:
        """The part file on disk, whole; `place` then puts it where the object lives."""
        file = self._opened()
        file.flush()
        os.fsync(file.fileno())
        file.close()
        self._file = None

    def place(self) -> None:
        os.replace(self.part, self.final)
        directory = os.open(self.final.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self.part.unlink()


def _load_or_make_key(path: Path) -> bytes:
    """The store's signing key, made once (`kit.keyfile`). Every instance that shares
    the store's directory shares the key; a file that holds anything but a whole key is
    refused, never used (a process of an earlier release that died while making it left
    it empty, and an empty key would let anyone sign an upload)."""
    key = keyfile.load_or_make(path, lambda: secrets.token_bytes(KEY_BYTES))
    if len(key) != KEY_BYTES:
        raise RuntimeError(
            f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte key: remove it (URLs "
            "signed with it stop working) and start again to make a new one"
        )
    return key


# --- S3 ---------------------------------------------------------------------------------------


class _Body(io.RawIOBase):
    """A botocore streaming body as a raw stream, so io's buffering and gzip can wrap it."""

    def __init__(self, body: Any) -> None:
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._body.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._body.close()
        super().close()


class S3Store:
    """Any S3-compatible store, through boto3: presigned PUT URLs that bind the content
    type. S3 cannot cap a presigned PUT's size, so the size is checked (HEAD) before a
    file is processed."""

    def __init__(self, settings: Settings) -> None:
        import boto3
        from botocore.config import Config

        assert settings.s3_bucket is not None
        self.bucket = settings.s3_bucket
        secret = settings.s3_secret_access_key
        self.client: Any = boto3.client(
            "s3",
            endpoint_url=settings.s3_endpoint_url,
            region_name=settings.s3_region,
            aws_access_key_id=settings.s3_access_key_id,
            aws_secret_access_key=secret.get_secret_value() if secret else None,
            config=Config(
                signature_version="s3v4",
                connect_timeout=5,
                read_timeout=60,
                retries={"max_attempts": 3, "mode": "standard"},
            ),
        )

    def object_key(self, *, company_id: uuid.UUID, file_id: uuid.UUID) -> str:
        return f"uploads/{company_id.hex}/{file_id.hex}"

    def upload_url(
        self, *, key: str, content_type: str, max_bytes: int, expires_at: datetime
    ) -> str:
        lifetime = max(1, int((expires_at - utcnow()).total_seconds()))
        url: str = self.client.generate_presigned_url(
            "put_object",
            Params={"Bucket": self.bucket, "Key": key, "ContentType": content_type},
            ExpiresIn=lifetime,
            HttpMethod="PUT",
        )
        return url

    def export_key(self, *, company_id: uuid.UUID, export_id: uuid.UUID, suffix: str) -> str:
        return f"exports/{company_id.hex}/{export_id.hex}.{suffix}"

    def download_url(self, *, key: str, filename: str, expires_at: datetime) -> str:
        lifetime = max(1, int((expires_at - utcnow()).total_seconds()))
        url: str = self.client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self.bucket,
                "Key": key,
                "ResponseContentDisposition": f'attachment; filename="{filename}"',
            },
            ExpiresIn=lifetime,
            HttpMethod="GET",
        )
        return url

    def head(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError

        try:
            answer = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return ObjectInfo(
            size=int(answer["ContentLength"]),
            etag=str(answer.get("ETag", "")).strip('"'),
            content_type=answer.get("ContentType"),
        )

    def open(self, key: str) -> BinaryIO:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        except self.client.exceptions.NoSuchKey as exc:
            raise FileNotFoundError(key) from exc
        return cast(BinaryIO, io.BufferedReader(_Body(body), buffer_size=1024 * 1024))

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)

    def ping(self) -> None:
        self.client.head_bucket(Bucket=self.bucket)

    def incoming_file(self, key: str) -> Writer:
        return S3Incoming(self.client, self.bucket, key)

    def stored_files(self, *, older_than: float) -> Iterator[tuple[str, uuid.UUID]]:
        cutoff = utcnow() - timedelta(seconds=older_than)
        pages = self.client.get_paginator("list_objects_v2")
        for prefix in ("uploads/", "exports/"):
            for page in pages.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    if item["LastModified"] >= cutoff:
                        continue
                    name = str(item["Key"]).rsplit("/", 1)[-1].split(".", 1)[0]
                    with contextlib.suppress(ValueError):
                        yield str(item["Key"]), uuid.UUID(hex=name)

    def sweep_incoming(self, *, older_than: float) -> int:
        cutoff = utcnow() - timedelta(seconds=older_than)
        listed = self.client.list_multipart_uploads(Bucket=self.bucket)
        swept = 0
        for upload in listed.get("Uploads", []):
            if upload["Initiated"] < cutoff:
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                )
                swept += 1
        return swept


class S3Incoming:
    """A file written to S3 in parts (a multipart upload; one PUT if it is small), so
    memory holds at most one part. `commit` completes it; `discard` aborts it."""

    PART = 8 * 1024 * 1024

    def __init__(self, client: Any, bucket: str, key: str) -> None:
        self.client = client
        self.bucket = bucket
        self.key = key
        self.size = 0
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []

    @property
    def etag(self) -> str:
        return self._md5.hexdigest()

    def write(self, data: bytes) -> None:
        self._md5.update(data)
        self.size += len(data)
        self._held.append(data)
        self._held_bytes += len(data)
        if self._held_bytes >= self.PART:
            self._send_part()

    def rest(self) -> None:
        return None  # parts go out as they fill; nothing is held between writes

    def _send_part(self) -> None:
        if self._upload_id is None:
            started = self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key)
            self._upload_id = started["UploadId"]
        number = len(self._parts) + 1
        body = b"".join(self._held)
        self._held, self._held_bytes = [], 0
        answer = self.client.upload_part(
            Bucket=self.bucket, Key=self.key, UploadId=self._upload_id, PartNumber=number, Body=body
        )
        self._parts.append({"ETag": answer["ETag"], "PartNumber": number})

    def commit(self) -> None:
        if self._upload_id is None:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=b"".join(self._held))
            self._held = []
            return
        if self._held:
            self._send_part()
        self.client.complete_multipart_upload(
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self._upload_id,
            MultipartUpload={"Parts": self._parts},
        )

    def discard(self) -> None:
        self._held = []
        if self._upload_id is not None:
            with contextlib.suppress(Exception):
                self.client.abort_multipart_upload(
                    Bucket=self.bucket, Key=self.key, UploadId=self._upload_id
                )


def delete_own(store: Store, bucket: str, key: str) -> None:
    """Delete an object if it is in this store's bucket (an object of another store, an
    S3 bucket the service used before, is not this process's to reach)."""
    if bucket == store.bucket:
        store.delete(key)


def make_store(settings: Settings) -> Store:
    if settings.storage_url is not None:
        return S3Store(settings)
    key = settings.upload_signing_key
    return EmbeddedStore(
        settings.data_dir / "store",
        public_url=settings.public_url,
        signing_key=key.get_secret_value().encode() if key else None,
    )
