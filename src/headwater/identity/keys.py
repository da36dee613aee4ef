"""Signing keys: generation and storage form, and a cache of verification keys by `kid`.

PyJWT, cryptography and structlog are imported where they are used: an operator command
that makes no key and verifies no token (`headwater companies create`) starts without
them (about 0.15-0.25 s of CPU)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jwt
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

ALGORITHM = "RS256"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638 JWK thumbprint: a stable `kid` derived from the public key."""
    members = {k: jwk[k] for k in ("e", "kty", "n")}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return _b64(hashlib.sha256(canonical).digest())


def generate_rsa_key(passphrase: str | None) -> tuple[str, str, dict[str, Any]]:
    """A new RSA-2048 key: (kid, private PEM, public JWK)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    numbers = private.public_key().public_numbers()
    jwk: dict[str, Any] = {
        "kty": "RSA",
        "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
        "e": _b64(numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")),
    }
    kid = _thumbprint(jwk)
    jwk.update({"kid": kid, "use": "sig", "alg": ALGORITHM})
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase.encode())
        if passphrase
        else serialization.NoEncryption()
    )
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ).decode()
    return kid, pem, jwk


@lru_cache(maxsize=16)
def load_private_key(pem: str, passphrase: str | None) -> PrivateKeyTypes:
    from cryptography.hazmat.primitives import serialization

    password = passphrase.encode() if passphrase else None
    return serialization.load_pem_private_key(pem.encode(), password=password)


def public_keys(jwks: Mapping[str, Any], algorithms: list[str]) -> dict[str, jwt.PyJWK]:
    """The signing keys of a JWKS document, by `kid`, skipping ones we cannot use."""
    import jwt

    keys: dict[str, jwt.PyJWK] = {}
    for jwk in jwks.get("keys", []):
        if not isinstance(jwk, dict) or "kid" not in jwk or jwk.get("use", "sig") != "sig":
            continue
        algorithm = jwk.get("alg") or {"RSA": "RS256", "EC": "ES256"}.get(jwk.get("kty", ""))
        if algorithm not in algorithms:
            continue
        try:
            keys[str(jwk["kid"])] = jwt.PyJWK(jwk, algorithm=algorithm)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
    return keys


KeyLoader = Callable[[], Awaitable[dict[str, "jwt.PyJWK"]]]


class KeyCache:
    """Verification keys by `kid`, held in memory so that verifying needs no I/O.

    The keys are reloaded when older than `max_age`, and when a token names a `kid` we do
    not hold, at most once every `min_refresh` seconds, so that a stream of forged `kid`s
    cannot turn into a stream of database or JWKS requests.
    """

    def __init__(self, load: KeyLoader, *, min_refresh: float, max_age: float) -> None:
        self._load = load
        self._min_refresh = min_refresh
        self._max_age = max_age
        self._keys: dict[str, jwt.PyJWK] = {}
        self._loaded_at = float("-inf")
        self.generation = 0  # bumped whenever the set of keys changes
        self._lock = asyncio.Lock()

    async def get(self, kid: str) -> jwt.PyJWK | None:
        age = time.monotonic() - self._loaded_at
        key = self._keys.get(kid)
        if key is not None:
            if age >= self._max_age:
                await self.refresh(if_older_than=self._max_age)
                key = self._keys.get(kid)
            return key
        if age >= self._min_refresh:
            await self.refresh(if_older_than=self._min_refresh)
        return self._keys.get(kid)

    async def refresh(self, *, if_older_than: float = 0.0) -> None:
        """Reload the keys; on failure keep the ones held and log why."""
        async with self._lock:
            if time.monotonic() - self._loaded_at < if_older_than:
                return  # another request refreshed while we waited
            try:
                self._replace(await self._load())
            except Exception as exc:  # a key source is remote: any failure is survivable
                import structlog

                structlog.get_logger("headwater.keys").warning(
                    "verification keys not refreshed", error=type(exc).__name__
                )
            finally:
                # A failed load counts too, so an unreachable source is not hammered.
                self._loaded_at = time.monotonic()

    def remember(self, jwk: Mapping[str, Any]) -> None:
        """Hold a key this process has just signed with, before any refresh would find it."""
        if jwk["kid"] not in self._keys:
            self._replace({**self._keys, **public_keys({"keys": [jwk]}, [ALGORITHM])})

    def prime(self, keys: dict[str, jwt.PyJWK]) -> None:
        self._replace(keys)
        self._loaded_at = time.monotonic()

    def _replace(self, keys: dict[str, jwt.PyJWK]) -> None:
        if keys.keys() != self._keys.keys():
            self.generation += 1
        self._keys = keys
