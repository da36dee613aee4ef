"""Endpoint secrets: made, kept encrypted at rest, and used to sign (Standard Webhooks).

A secret is `whsec_` + base64 of 32 random bytes. It is stored sealed
(`kit.sealing.SecretBox`, purpose `WEBHOOK_SECRETS`), the endpoint's id the cipher's
associated data.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from headwater.kit.sealing import SecretBox

__all__ = ["PREFIX", "SecretBox", "new_secret", "secret_key_bytes", "signature"]

PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key_bytes(secret: str) -> bytes:
    """The HMAC key of a `whsec_` secret: the base64-decoded bytes after the prefix."""
    return base64.b64decode(secret.removeprefix(PREFIX))


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()
