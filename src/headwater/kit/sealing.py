"""Sealing secrets at rest: AES-256-GCM under a key derived (HKDF-SHA256) per purpose
from one material, HEADWATER_WEBHOOK_SECRET_KEY, else the signing-key passphrase, else a
random key made once at `$HEADWATER_DATA_DIR/webhook_secret_key` (mode 0600; instances
on several machines must then share HEADWATER_WEBHOOK_SECRET_KEY).

Webhook endpoint secrets and the companies' hash keys are sealed so. Every process that
opens the database (`db.Database`) names where its material comes from (`provide`); a
box is made from it the first time one is asked for (`box`).
"""

from __future__ import annotations

import base64
import secrets
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from headwater.kit import keyfile

_SEALED = "v1."
WEBHOOK_SECRETS = b"headwater webhook secrets"
HASH_KEYS = b"headwater hash keys"


def key_file_material(data_dir: Path) -> bytes:
    """The key made once under the data directory (embedded set-ups)."""
    path = data_dir / "webhook_secret_key"
    return keyfile.load_or_make(path, lambda: base64.b64encode(secrets.token_bytes(32))).strip()


class SecretBox:
    """Seals and opens secrets of one purpose with one key; the owner's id is the
    cipher's associated data, so a sealed secret copied to another row does not open."""

    def __init__(self, material: bytes, purpose: bytes = WEBHOOK_SECRETS) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(material)
        self._aead = AESGCM(key)

    def seal(self, endpoint_id: uuid.UUID, secret: str) -> str:
        nonce = secrets.token_bytes(12)
        sealed = self._aead.encrypt(nonce, secret.encode(), endpoint_id.bytes)
        return _SEALED + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, endpoint_id: uuid.UUID, sealed: str) -> str:
        raw = base64.urlsafe_b64decode(sealed.removeprefix(_SEALED))
        return self._aead.decrypt(raw[:12], raw[12:], endpoint_id.bytes).decode()


def material(*, secret_key: str | None, passphrase: str | None, data_dir: Path) -> bytes:
    """The sealing material: the secret key, else the passphrase, else the key file."""
    if secret_key is not None:
        return secret_key.encode()
    if passphrase:
        return passphrase.encode()
    return key_file_material(data_dir)


_provider: Callable[[], bytes] | None = None
_boxes: dict[bytes, SecretBox] = {}
_lock = threading.Lock()


def provide(provider: Callable[[], bytes]) -> None:
    """Where this process's material comes from (read when a box is first asked for)."""
    global _provider
    with _lock:
        _provider = provider
        _boxes.clear()


def box(purpose: bytes) -> SecretBox:
    """The box of a purpose, made from the material provided."""
    with _lock:
        found = _boxes.get(purpose)
        if found is None:
            if _provider is None:
                raise RuntimeError("no sealing material provided (open a db.Database first)")
            found = _boxes[purpose] = SecretBox(_provider(), purpose)
        return found
