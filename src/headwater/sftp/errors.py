"""SFTP account errors."""

from __future__ import annotations

from headwater.errors import BadRequest, Conflict, NotFound


class AccountNotFound(NotFound):
    code = "sftp_account_not_found"
    title = "SFTP account not found"


class AccountExists(Conflict):
    code = "sftp_account_exists"
    title = "SFTP account exists"


class InvalidAccount(BadRequest):
    code = "invalid_sftp_account"
    title = "Invalid SFTP account"


class HeldFileGone(NotFound):
    """A file held under a temporary name was renamed to its final name, but another
    session had moved or removed it meanwhile."""

    code = "sftp_held_file_gone"
    title = "Held file gone"
