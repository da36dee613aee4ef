"""Credential ids and secrets: generation, argon2id hashing, timing-safe checks."""

from __future__ import annotations

import secrets
from functools import lru_cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

# OWASP's argon2id recommendation (19 MiB, 2 passes). Secrets are 256-bit random, so the
# slow hash protects a leaked table, not a weak password.
_hasher = PasswordHasher(time_cost=2, memory_cost=19456, parallelism=1)

_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def new_client_id() -> str:
    return "hw_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return _hasher.hash(secret)


@lru_cache(maxsize=1)
def _dummy_hash() -> str:
    return _hasher.hash(secrets.token_urlsafe(32))


def verify_secret(secret_hash: str | None, secret: str) -> bool:
    """Check `secret` against `secret_hash`; with no hash, spend the same time and fail.

    An unknown client id and a wrong secret must be indistinguishable, also by timing.
    """
    try:
        return _hasher.verify(secret_hash or _dummy_hash(), secret) and secret_hash is not None
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False
