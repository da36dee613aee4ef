"""The verified-token cache never outlives a token's time window or its key."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import jwt
import pytest

from headwater.errors import InvalidToken
from headwater.identity import keys as keyring
from headwater.identity import tokens
from headwater.identity.tokens import TokenVerifier, sign_token


def _setup() -> tuple[TokenVerifier, keyring.KeyCache, Any, str, dict[str, Any]]:
    kid, pem, jwk = keyring.generate_rsa_key(None)
    private = keyring.load_private_key(pem, None)
    held = {"keys": [jwk]}

    async def load() -> dict[str, jwt.PyJWK]:
        return keyring.public_keys(held, ["RS256"])

    cache = keyring.KeyCache(load, min_refresh=0, max_age=3600)
    verifier = TokenVerifier(
        keys=cache, issuer="iss", audience="aud", algorithms=["RS256"], claim_map={}, leeway=60
    )
    return verifier, cache, private, kid, held


def _token(private: Any, kid: str, lifetime: int = 600) -> str:
    return sign_token(
        private_key=private,
        kid=kid,
        algorithm="RS256",
        issuer="iss",
        audience="aud",
        subject="s",
        scopes=["data:read"],
        company_id=None,
        client_ids=[],
        author_id=uuid.uuid4(),
        lifetime=lifetime,
    )


def test_cached_token_expires_at_exp_plus_leeway(monkeypatch: pytest.MonkeyPatch) -> None:
    verifier, _, private, kid, _ = _setup()
    token = _token(private, kid, lifetime=120)
    assert asyncio.run(verifier.verify(token)).subject == "s"
    start = time.time()
    monkeypatch.setattr(tokens.time, "time", lambda: start + 120 + 59)
    assert asyncio.run(verifier.verify(token)).subject == "s"  # inside the leeway
    monkeypatch.setattr(tokens.time, "time", lambda: start + 120 + 61)
    monkeypatch.setattr(jwt.api_jwt, "datetime", _frozen_datetime(start + 181))
    with pytest.raises(InvalidToken, match="expired"):
        asyncio.run(verifier.verify(token))


def test_removed_key_invalidates_cached_tokens() -> None:
    verifier, cache, private, kid, held = _setup()
    token = _token(private, kid)
    assert asyncio.run(verifier.verify(token))
    _, _, other = keyring.generate_rsa_key(None)
    held["keys"] = [other]
    asyncio.run(cache.refresh())
    with pytest.raises(InvalidToken, match="unknown key"):
        asyncio.run(verifier.verify(token))


def test_only_valid_tokens_enter_the_cache() -> None:
    verifier, _, private, kid, _ = _setup()
    for _ in range(3):
        with pytest.raises(InvalidToken):
            asyncio.run(verifier.verify(_token(private, kid) + "x"))
    assert verifier._verified == {}


def _frozen_datetime(at: float) -> Any:
    from datetime import UTC, datetime

    class Frozen(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return datetime.fromtimestamp(at, tz or UTC)

    return Frozen
