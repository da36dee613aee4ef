"""Inbox errors."""

from __future__ import annotations

from headwater.errors import BadRequest, NotFound


class InboxNotFound(NotFound):
    code = "inbox_not_found"
    title = "Inbox not found"


class InvalidInbox(BadRequest):
    code = "invalid_inbox"
    title = "Invalid inbox"
