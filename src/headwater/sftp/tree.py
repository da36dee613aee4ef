"""What an SFTP session sees and may do (`Tree`, asyncssh's SFTP server): the
account's clients and datasets as directories, uploads that become file transactions
on close, files held under a temporary name until renamed, and receipts.

A channel, not a pipeline: an upload is streamed to the file store, and on its close
one use case, `sftp.uploads.accept_upload`, opens its transaction (`channel: "sftp"`,
`processing`, through `files.service.accept_stored`), queues its job and records the
account's receipt in one unit of work; the worker then processes it exactly as an
uploaded file. The close is answered only after both are durable.

Paths are virtual: nothing of the server's file system is ever reached. A path is
split into at most four parts (`/<client>/<dataset>/<name>` or
`.../receipts/<receipt>`); any `..` that would climb above `/` is refused.
"""

from __future__ import annotations

import re
import stat
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncssh
import structlog
from asyncssh.constants import ACE4_APPEND_DATA, ACE4_WRITE_DATA, FXF_APPEND, FXF_WRITE

from headwater.files import parsers
from headwater.files.stores import Writer
from headwater.identity.tokens import Principal
from headwater.ingestion import api as ingestion
from headwater.sftp import held as held_files
from headwater.sftp import metrics, uploads
from headwater.sftp import service as accounts
from headwater.sftp.errors import HeldFileGone
from headwater.sftp.hub import Hub
from headwater.sftp.models import SftpHeldFile
from headwater.sftp.service import Login

log = structlog.get_logger("headwater.sftp")

HELD_SUFFIXES = (".part", ".tmp", ".filepart")
RECEIPTS = "receipts"
WRITE_PIECE = 1024 * 1024  # bytes held before they are handed to the store
TOO_MANY_FILES = "too many open files"
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_RECEIPT = re.compile(r"^(?P<name>.+)\.(?P<id>[0-9a-f-]{36})\.json$")


def is_held(name: str) -> bool:
    """A temporary name: kept until renamed to a supported one."""
    return name.startswith(".") or name.lower().endswith(HELD_SUFFIXES)


def _denied(message: str) -> asyncssh.SFTPPermissionDenied:
    return asyncssh.SFTPPermissionDenied(message)


def _supported(name: str) -> str:
    """The format a name says; PERMISSION_DENIED naming the supported ones if none."""
    kind = parsers.content_type_of(name)
    if kind is None:
        raise _denied(f"{name!r} is not a supported file: use {parsers.SUPPORTED_NAMES}")
    return kind


def split(path: bytes) -> list[str]:
    """A client's path as parts under `/`; PERMISSION_DENIED if it leaves the tree."""
    try:
        text = path.decode("utf-8")
    except UnicodeDecodeError:
        raise _denied("paths must be UTF-8") from None
    parts: list[str] = []
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise _denied("the path leaves your tree")
            parts.pop()
            continue
        if _CONTROL.search(part):
            raise asyncssh.SFTPFailure("a name may not hold a control character")
        parts.append(part)
    return parts


def _dir_attrs() -> asyncssh.SFTPAttrs:
    now = int(time.time())
    return asyncssh.SFTPAttrs(
        type=2, size=0, permissions=stat.S_IFDIR | 0o755, uid=0, gid=0, atime=now, mtime=now
    )


def _file_attrs(
    size: int, *, writable: bool = False, mtime: float | None = None
) -> asyncssh.SFTPAttrs:
    when = int(mtime if mtime is not None else time.time())
    mode = 0o644 if writable else 0o444
    return asyncssh.SFTPAttrs(
        type=1, size=size, permissions=stat.S_IFREG | mode, uid=0, gid=0, atime=when, mtime=when
    )


@dataclass
class Held:
    """A stored file on its way to a transaction, or held under a temporary name."""

    file_id: uuid.UUID
    key: str
    size: int
    etag: str
    at: float


def _held(row: SftpHeldFile) -> Held:
    return Held(row.file_id, row.object_key, row.size, row.etag, row.held_at.timestamp())


def _place(parts: list[str]) -> held_files.Place:
    return held_files.Place(parts[0], parts[1], parts[2])


class _Upload:
    """A file being written: streamed to the store, ingested (or held) on close."""

    def __init__(self, parts: list[str], *, file_id: uuid.UUID, key: str, writer: Writer) -> None:
        self.parts = parts  # client, dataset, name
        self.client_id, self.dataset_id, self.name = parts
        self.file_id = file_id
        self.key = key
        self.writer = writer
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.size = 0
        self.failed: str | None = None


def _write_piece(writer: Writer, piece: bytes) -> None:
    writer.write(piece)
    writer.rest()


class _Receipt:
    def __init__(self, body: bytes) -> None:
        self.body = body


class Tree(asyncssh.SFTPServer):
    """What one session sees and may do."""

    def __init__(self, chan: asyncssh.SSHServerChannel[bytes], hub: Hub) -> None:
        super().__init__(chan)
        self.hub = hub
        self.account: Login = chan.get_connection().get_extra_info("login")
        self.caller: Principal = self.account.principal()
        self.handles = 0  # files open in this session

    def _take_handle(self) -> None:
        if self.handles >= self.hub.settings.sftp_max_handles:
            raise asyncssh.SFTPFailure(TOO_MANY_FILES)
        self.handles += 1

    # --- what exists ----------------------------------------------------------------------

    def _usable(self) -> ingestion.UsableTree:
        with self.hub.db.read_session() as session:
            return ingestion.usable_tree(session, self.caller)

    async def _tree(self) -> ingestion.UsableTree:
        """client → its datasets, as this account may use them, and the company's clients
        it may not use."""
        return await self.hub.run(self._usable)

    def _receipts(
        self, client_id: str, dataset_id: str, only: str | None = None
    ) -> dict[str, bytes]:
        with self.hub.db.read_session() as session:
            return accounts.receipts(
                session,
                self.account,
                self.caller,
                client_id=client_id,
                dataset_id=dataset_id,
                days=self.hub.settings.sftp_receipt_days,
                only=only,
            )

    async def _kind(self, parts: list[str]) -> tuple[str, Any]:
        """What a path names, and what it holds: ("root", None), ("client", its datasets),
        ("dataset"|"receipts", None), ("receipt", its bytes), ("held", Held)."""
        depth = len(parts)
        if depth == 0:
            return "root", None
        usable = await self._tree()
        tree = usable.clients
        if parts[0] in usable.withheld:
            raise _denied(f"this account may not use client {parts[0]}")
        if parts[0] not in tree:  # another company's client looks like no client at all
            raise asyncssh.SFTPNoSuchFile(f"no client directory {parts[0]}")
        if depth == 1:
            return "client", tree[parts[0]]
        if parts[1] not in tree[parts[0]]:
            raise asyncssh.SFTPNoSuchFile(f"no dataset {parts[0]}/{parts[1]}")
        if depth == 2:
            return "dataset", None
        if depth == 3 and parts[2] == RECEIPTS:
            return "receipts", None
        if depth == 3:
            held = await self.hub.run(self._find_held, _place(parts))
            if held is None:
                raise asyncssh.SFTPNoSuchFile(f"no file {parts[2]}")
            return "held", held
        if depth == 4 and parts[2] == RECEIPTS:
            body = (await self.hub.run(self._receipts, parts[0], parts[1], parts[3])).get(parts[3])
            if body is None:
                raise asyncssh.SFTPNoSuchFile(f"no receipt {parts[3]}")
            return "receipt", body
        raise asyncssh.SFTPNoSuchFile("no such path")

    def _find_held(self, place: held_files.Place) -> Held | None:
        with self.hub.db.read_session() as session:
            found = held_files.find(session, self.account, place)
            return None if found is None else _held(found)

    def _held_names(self, client_id: str, dataset_id: str) -> list[tuple[str, Held]]:
        with self.hub.db.read_session() as session:
            return [
                (row.name, _held(row))
                for row in held_files.listing(session, self.account, client_id, dataset_id)
            ]

    def _hold(self, place: held_files.Place, stored: Held) -> list[str]:
        with self.hub.db.unit_of_work() as session:
            row = held_files.entry(
                self.account,
                place,
                file_id=stored.file_id,
                key=stored.key,
                size=stored.size,
                etag=stored.etag,
            )
            return held_files.hold(
                session, self.account, place, stored=row, max_held=self.hub.settings.sftp_max_held
            )

    def _move_held(self, old: held_files.Place, new: held_files.Place) -> list[str]:
        with self.hub.db.unit_of_work() as session:
            return held_files.move(
                session, self.account, old, new, max_held=self.hub.settings.sftp_max_held
            )

    def _remove_held(self, place: held_files.Place) -> list[str]:
        with self.hub.db.unit_of_work() as session:
            found = held_files.release(session, self.account, place)
            return [] if found is None else [found.object_key]

    async def _forget(self, keys: list[str]) -> None:
        """Stored bytes no entry refers to any more (after the commit that let go)."""
        for key in keys:
            await self.hub.run(self.hub.store.delete, key)

    # --- reading the tree -------------------------------------------------------------------

    async def realpath(self, path: bytes) -> bytes:
        return ("/" + "/".join(split(path))).encode()

    async def stat(self, path: bytes) -> asyncssh.SFTPAttrs:
        kind, found = await self._kind(split(path))
        if kind == "receipt":
            return _file_attrs(len(found))
        if kind == "held":
            return _file_attrs(found.size, writable=True, mtime=found.at)
        return _dir_attrs()

    lstat = stat

    async def scandir(self, path: bytes) -> AsyncIterator[asyncssh.SFTPName]:
        parts = split(path)
        kind, found = await self._kind(parts)
        for dot in (b".", b".."):
            yield asyncssh.SFTPName(dot, attrs=_dir_attrs())
        names: list[tuple[str, asyncssh.SFTPAttrs]] = []
        if kind == "root":
            names = [(client, _dir_attrs()) for client in (await self._tree()).clients]
        elif kind == "client":
            names = [(dataset, _dir_attrs()) for dataset in found]
        elif kind == "dataset":
            names = [(RECEIPTS, _dir_attrs())]
            for name, held in await self.hub.run(self._held_names, parts[0], parts[1]):
                names.append((name, _file_attrs(held.size, writable=True, mtime=held.at)))
        elif kind == "receipts":
            receipts = await self.hub.run(self._receipts, parts[0], parts[1])
            names = [(n, _file_attrs(len(body))) for n, body in sorted(receipts.items())]
        else:
            raise asyncssh.SFTPNoSuchFile("not a directory")
        for name, attrs in names:
            yield asyncssh.SFTPName(name.encode(), attrs=attrs)

    # --- files ------------------------------------------------------------------------------

    async def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        parts = split(path)
        if pflags & (FXF_WRITE | FXF_APPEND):
            self._take_handle()
            try:
                return await self._create(parts)
            except BaseException:
                self.handles -= 1
                raise
        kind, found = await self._kind(parts)
        if kind == "receipt":
            self._take_handle()
            return _Receipt(found)
        if kind == "held":
            raise _denied("a file being uploaded cannot be read")
        raise asyncssh.SFTPFailure("not a file")

    async def open56(
        self, path: bytes, desired_access: int, flags: int, attrs: asyncssh.SFTPAttrs
    ) -> object:
        pflags = FXF_WRITE if desired_access & (ACE4_WRITE_DATA | ACE4_APPEND_DATA) else 0
        return await self.open(path, pflags, attrs)

    async def _create(self, parts: list[str]) -> _Upload:
        if len(parts) != 3 or parts[2] == RECEIPTS:
            raise _denied(
                "files are uploaded to /<client_id>/<dataset_id>/<name>; "
                "nothing else can be written"
            )
        name = parts[2]
        if not is_held(name):
            _supported(name)
        if len(name.encode()) > 255:
            raise _denied("the name is longer than 255 bytes")
        try:
            await self._kind(parts[:2])
        except asyncssh.SFTPNoSuchFile as exc:
            raise _denied(f"you may not upload there: {exc.reason}") from None
        file_id = uuid.uuid4()
        key = self.hub.store.object_key(company_id=self.account.company_id, file_id=file_id)
        writer = await self.hub.run(self.hub.store.incoming_file, key)
        await self.hub.run(writer.rest)  # an idle handle holds no file descriptor
        return _Upload(parts, file_id=file_id, key=key, writer=writer)

    async def read(self, file_obj: object, offset: int, size: int) -> bytes:
        if not isinstance(file_obj, _Receipt):
            raise _denied("this file cannot be read")
        return file_obj.body[offset : offset + size]

    async def write(self, file_obj: object, offset: int, data: bytes) -> int:
        if not isinstance(file_obj, _Upload):
            raise _denied("this file cannot be written")
        upload = file_obj
        if upload.failed is not None:
            raise asyncssh.SFTPFailure(upload.failed)
        if offset != upload.size:
            upload.failed = "writes must follow each other (no seek, no gap)"
            raise asyncssh.SFTPFailure(upload.failed)
        if upload.size + len(data) > self.hub.settings.max_file_bytes:
            upload.failed = f"file too large: the limit is {self.hub.settings.max_file_bytes} bytes"
            raise asyncssh.SFTPFailure(upload.failed)
        upload.pending.append(data)
        upload.pending_bytes += len(data)
        upload.size += len(data)
        if upload.pending_bytes >= WRITE_PIECE:
            await self._flush(upload)
        return len(data)

    async def _flush(self, upload: _Upload) -> None:
        piece = b"".join(upload.pending)
        upload.pending, upload.pending_bytes = [], 0
        await self.hub.run(_write_piece, upload.writer, piece)
        metrics.BYTES.inc(len(piece))

    def _ending(self) -> bool:
        """Whether the session is going away (asyncssh closes files left open then): an
        upload that was not closed by its client is dropped, never ingested."""
        channel = self.channel
        return bool(
            channel.is_closing()
            or getattr(channel, "_recv_state", "open") != "open"
            or self.connection.is_closed()
        )

    async def close(self, file_obj: object) -> None:
        if isinstance(file_obj, _Upload | _Receipt):
            self.handles -= 1
        if not isinstance(file_obj, _Upload):
            return
        upload = file_obj
        if upload.failed is not None or self._ending():
            await self.hub.run(upload.writer.discard)
            if upload.failed is None:
                log.info("sftp upload dropped before its close", name=upload.name)
                return
            raise asyncssh.SFTPFailure(upload.failed)
        try:
            if upload.pending:
                await self._flush(upload)
            await self.hub.run(upload.writer.commit)
        except Exception as exc:
            await self.hub.run(upload.writer.discard)
            log.error("sftp upload not stored", name=upload.name, error=str(exc))
            raise asyncssh.SFTPFailure("the file could not be stored; send it again") from None
        stored = Held(upload.file_id, upload.key, upload.size, upload.writer.etag, time.time())
        if is_held(upload.name):
            try:
                replaced = await self.hub.run(self._hold, _place(upload.parts), stored)
            except BaseException as exc:
                await self.hub.run(self.hub.store.delete, stored.key)
                if isinstance(exc, held_files.TooManyHeld):
                    raise asyncssh.SFTPFailure(str(exc)) from None
                raise
            await self._forget(replaced)
            return
        await self._ingest(upload.client_id, upload.dataset_id, upload.name, stored)

    async def _ingest(
        self,
        client_id: str,
        dataset_id: str,
        name: str,
        stored: Held,
        *,
        renamed: held_files.Place | None = None,
    ) -> None:
        """The stored file becomes a transaction and a queued job (one unit of work, which
        also lets go of the held file it was `renamed` from)."""
        kind = _supported(name)
        try:
            transaction_id = await self.hub.run(
                self._accept, client_id, dataset_id, name, kind, stored, renamed
            )
        except Exception as exc:
            if renamed is None:  # a held file keeps its bytes: it can be renamed again
                await self.hub.run(self.hub.store.delete, stored.key)
            if isinstance(exc, ingestion.DatasetNotFound):
                raise _denied(str(exc)) from None
            if isinstance(exc, asyncssh.SFTPError):  # renamed by another session meanwhile
                raise
            log.error("sftp upload not ingested", name=name, error=str(exc).splitlines()[0])
            raise asyncssh.SFTPFailure("the file could not be ingested; send it again") from None
        metrics.FILES.inc()
        log.info(
            "sftp file received",
            username=self.account.username,
            transaction_id=str(transaction_id),
            client_id=client_id,
            dataset_id=dataset_id,
            size=stored.size,
        )

    def _accept(
        self,
        client_id: str,
        dataset_id: str,
        name: str,
        kind: str,
        stored: Held,
        renamed: held_files.Place | None,
    ) -> uuid.UUID:
        with self.hub.db.unit_of_work() as session:
            try:
                return uploads.accept_upload(
                    session,
                    self.account,
                    store=self.hub.store,
                    client_id=client_id,
                    dataset_id=dataset_id,
                    name=name,
                    content_type=kind,
                    file_id=stored.file_id,
                    key=stored.key,
                    size=stored.size,
                    etag=stored.etag,
                    renamed=renamed,
                )
            except HeldFileGone as exc:  # renamed by another session meanwhile
                raise asyncssh.SFTPNoSuchFile(str(exc)) from None

    async def fstat(self, file_obj: object) -> asyncssh.SFTPAttrs:
        if isinstance(file_obj, _Receipt):
            return _file_attrs(len(file_obj.body))
        if isinstance(file_obj, _Upload):
            return _file_attrs(file_obj.size, writable=True)
        return _dir_attrs()

    # --- changes ----------------------------------------------------------------------------

    async def rename(self, oldpath: bytes, newpath: bytes) -> None:
        old, new = split(oldpath), split(newpath)
        if len(old) != 3 or len(new) != 3 or old[:2] != new[:2]:
            raise _denied("files are renamed only within their dataset's directory")
        await self._kind(old[:2])  # the directory is one this account may use
        held = await self.hub.run(self._find_held, _place(old))
        if held is None:
            raise asyncssh.SFTPNoSuchFile(f"no file {old[2]} being uploaded")
        if is_held(new[2]):
            try:
                replaced = await self.hub.run(self._move_held, _place(old), _place(new))
            except held_files.TooManyHeld as exc:
                raise asyncssh.SFTPFailure(str(exc)) from None
            await self._forget(replaced)
            return
        _supported(new[2])
        await self._ingest(new[0], new[1], new[2], held, renamed=_place(old))

    posix_rename = rename

    async def remove(self, path: bytes) -> None:
        parts = split(path)
        kind, _ = await self._kind(parts)
        if kind == "receipt":
            match = _RECEIPT.match(parts[3])
            assert match is not None
            await self.hub.run(self._remove_receipt, uuid.UUID(match["id"]))
            return
        if kind == "held":
            await self._forget(await self.hub.run(self._remove_held, _place(parts)))
            return
        raise _denied("only receipts and files being uploaded can be removed")

    def _remove_receipt(self, transaction_id: uuid.UUID) -> None:
        with self.hub.db.unit_of_work() as session:
            accounts.remove_receipt(session, self.account, transaction_id)

    async def mkdir(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> None:
        raise _denied("directories cannot be made: the tree is your clients and datasets")

    async def rmdir(self, path: bytes) -> None:
        raise _denied("directories cannot be removed")

    async def symlink(self, oldpath: bytes, newpath: bytes) -> None:
        raise _denied("links cannot be made")

    async def link(self, oldpath: bytes, newpath: bytes) -> None:
        raise _denied("links cannot be made")

    async def readlink(self, path: bytes) -> bytes:
        raise _denied("there are no links")

    async def setstat(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> None:
        await self._kind(split(path))  # times and permissions: accepted, nothing changes

    async def lsetstat(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> None:
        await self.setstat(path, attrs)

    async def fsetstat(self, file_obj: object, attrs: asyncssh.SFTPAttrs) -> None:
        return None

    # --- what the host must not show ----------------------------------------------------------

    def _space(self) -> asyncssh.SFTPVFSAttrs:
        """The account's view of space: room for one file of the largest size, never the
        host's file systems (which would tell what exists on it)."""
        blocks = self.hub.settings.max_file_bytes // 4096
        return asyncssh.SFTPVFSAttrs(
            bsize=4096, frsize=4096, blocks=blocks, bfree=blocks, bavail=blocks,
            files=0, ffree=0, favail=0, fsid=0, flag=0, namemax=255,
        )  # fmt: skip

    async def statvfs(self, path: bytes) -> asyncssh.SFTPVFSAttrs:
        await self._kind(split(path))  # a path outside the tree does not exist
        return self._space()

    async def fstatvfs(self, file_obj: object) -> asyncssh.SFTPVFSAttrs:
        return self._space()

    async def fsync(self, file_obj: object) -> None:
        """`fsync@openssh.com`: accepted; an upload is durable once its close is answered."""
        return None

    async def lock(self, file_obj: object, offset: int, length: int, flags: int) -> None:
        raise asyncssh.SFTPOpUnsupported("byte-range locks are not supported")

    async def unlock(self, file_obj: object, offset: int, length: int) -> None:
        raise asyncssh.SFTPOpUnsupported("byte-range locks are not supported")
