"""Opaque feed cursors: `:`-joined parts in URL-safe base64 without padding."""

from __future__ import annotations

import base64
import binascii


def pack(*parts: object) -> str:
    raw = ":".join(str(part) for part in parts)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def unpack(cursor: str) -> list[str]:
    """A cursor's parts; [] for text that is not one (its caller says why, to whom)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return []
    return raw.split(":")


def number(part: str) -> int | None:
    """A part that is a position or a sequence number (digits, at most 18), else None."""
    return int(part) if part.isdigit() and len(part) <= 18 else None
