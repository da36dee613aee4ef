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
