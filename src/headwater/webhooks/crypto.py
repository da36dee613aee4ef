"""Endpoint secrets: made, kept encrypted at rest, and used to sign (Standard Webhooks).

A secret is `whsec_` + base64 of 32 random bytes. It is stored sealed with AES-256-GCM
under a key derived (HKDF-SHA256) from HEADWATER_WEBHOOK_SECRET_KEY, else from the
signing-key passphrase, else from a random key made once at
`$HEADWATER_DATA_DIR/webhook_secret_key` (mode 0600; instances on several machines must
then share HEADWATER_WEBHOOK_SECRET_KEY). The endpoint's id is the cipher's associated
data, so a sealed secret copied to another endpoint's row does not open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import uuid
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PREFIX = "whsec_"
SECRET_BYTES = 32
_SEALED = "v1."


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


def key_file_material(data_dir: Path) -> bytes:
    """The key made once under the data directory (embedded set-ups)."""
    path = data_dir / "webhook_secret_key"
    if not path.exists():
        # written whole under another name, then linked into place: processes starting
        # together all read the one key that won
        data_dir.mkdir(parents=True, exist_ok=True)
        draft = data_dir / f".webhook_secret_key.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(base64.b64encode(secrets.token_bytes(32)))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_bytes().strip()


class SecretBox:
    """Seals and opens endpoint secrets with one key."""

    def __init__(self, material: bytes) -> None:
        key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"headwater webhook secrets"
        ).derive(material)
        self._aead = AESGCM(key)

    def seal(self, endpoint_id: uuid.UUID, secret: str) -> str:
        nonce = secrets.token_bytes(12)
        sealed = self._aead.encrypt(nonce, secret.encode(), endpoint_id.bytes)
        return _SEALED + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, endpoint_id: uuid.UUID, sealed: str) -> str:
        raw = base64.urlsafe_b64decode(sealed.removeprefix(_SEALED))
        return self._aead.decrypt(raw[:12], raw[12:], endpoint_id.bytes).decode()
