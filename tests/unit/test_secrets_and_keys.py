"""Secret hashing, the verification key cache and the key files, without the database."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jwt
import pytest

from headwater.files import stores
from headwater.identity import keys as keyring
from headwater.identity import secrets
from headwater.kit import keyfile


@pytest.mark.usefixtures("real_secret_hashing")
def test_secrets_are_stored_as_argon2id_at_owasps_cost_and_verify() -> None:
    hashed = secrets.hash_secret("s3cret")
    assert hashed.startswith("$argon2id$v=19$m=19456,t=2,p=1$")  # 19 MiB, two passes
    assert "s3cret" not in hashed
    assert secrets.verify_secret(hashed, "s3cret")
    assert not secrets.verify_secret(hashed, "s3cret ")
    assert not secrets.verify_secret("not a hash", "s3cret")


def test_unknown_id_costs_one_full_hash_check_like_a_wrong_secret(
    real_secret_hashing: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timing parity: both paths run exactly one argon2 verification of a real hash."""
    real = secrets._hasher
    checked: list[str] = []

    class Spy:
        def hash(self, password: str) -> str:
            return real.hash(password)

        def verify(self, hash_: str, password: str) -> bool:
            checked.append(hash_)
            return real.verify(hash_, password)

    monkeypatch.setattr(secrets, "_hasher", Spy())
    stored = secrets.hash_secret("right")
    assert not secrets.verify_secret(stored, "wrong")
    assert not secrets.verify_secret(None, "wrong")
    assert len(checked) == 2
    assert checked[0] == stored
    params = [h.split("$")[3] for h in checked]
    assert params == ["m=19456,t=2,p=1"] * 2  # the same, real cost on both paths


def test_secrets_and_ids_are_random_and_long() -> None:
    assert len({secrets.new_secret() for _ in range(100)}) == 100
    assert len(secrets.new_secret()) >= 43  # 256 bits
    assert secrets.new_client_id().startswith("hw_")


def test_generated_key_round_trips_with_passphrase() -> None:
    kid, pem, jwk = keyring.generate_rsa_key("pass")
    assert "ENCRYPTED" in pem
    private = keyring.load_private_key(pem, "pass")
    token = jwt.encode({"a": 1}, private, algorithm="RS256", headers={"kid": kid})  # type: ignore[arg-type]
    key = keyring.public_keys({"keys": [jwk]}, ["RS256"])[kid]
    assert jwt.decode(token, key.key, algorithms=["RS256"]) == {"a": 1}
    assert "d" not in jwk and jwk["kid"] == kid


def test_public_keys_skips_unusable_entries() -> None:
    _, _, jwk = keyring.generate_rsa_key(None)
    document = {
        "keys": [
            jwk,
            {"kty": "RSA"},
            {"kid": "enc", "use": "enc", **jwk},
            {"kid": "hs", "kty": "oct", "k": "c2VjcmV0", "alg": "HS256"},
            "x",
        ]
    }
    assert list(keyring.public_keys(document, ["RS256"])) == [jwk["kid"]]


def test_key_cache_refreshes_unknown_kids_at_most_once_per_interval() -> None:
    _, _, jwk = keyring.generate_rsa_key(None)
    loads: list[int] = []

    async def load() -> dict[str, Any]:
        loads.append(1)
        return keyring.public_keys({"keys": [jwk]}, ["RS256"])

    async def scenario() -> None:
        cache = keyring.KeyCache(load, min_refresh=3600, max_age=7200)
        assert await cache.get(jwk["kid"]) is not None  # first use loads
        results = await asyncio.gather(*(cache.get(f"unknown-{i}") for i in range(50)))
        assert results == [None] * 50
        assert len(loads) == 1

    asyncio.run(scenario())


def test_key_cache_keeps_keys_when_a_refresh_fails() -> None:
    _, _, jwk = keyring.generate_rsa_key(None)
    fail = [False]

    async def load() -> dict[str, Any]:
        if fail[0]:
            raise OSError("source down")
        return keyring.public_keys({"keys": [jwk]}, ["RS256"])

    async def scenario() -> None:
        cache = keyring.KeyCache(load, min_refresh=0, max_age=0.0001)
        assert await cache.get(jwk["kid"]) is not None
        fail[0] = True
        await asyncio.sleep(0.001)
        assert await cache.get(jwk["kid"]) is not None  # stale but kept

    asyncio.run(scenario())


def test_migrations_head_constant_is_alembics_head() -> None:
    """`migrations.HEAD` lets commands skip Alembic when the database is current: it must
    name the newest revision."""
    from alembic.script import ScriptDirectory

    from headwater import migrations
    from headwater.config import Settings

    script = ScriptDirectory.from_config(migrations.alembic_config(Settings()))
    assert script.get_heads() == [migrations.HEAD]


def test_processes_making_a_key_file_together_all_read_the_one_that_won(
    tmp_path: Path,
) -> None:
    """One maker is held while it writes; another makes its key meanwhile and wins. The
    held one reads the winner's whole key, and no draft is left behind."""
    path = tmp_path / "signing.key"
    writing, won = threading.Event(), threading.Event()

    def slow() -> bytes:
        writing.set()
        assert won.wait(10)
        return b"A" * 32

    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(keyfile.load_or_make, path, slow)
        assert writing.wait(10)
        assert keyfile.load_or_make(path, lambda: b"B" * 32) == b"B" * 32
        won.set()
        assert held.result() == b"B" * 32
    assert [p.name for p in tmp_path.iterdir()] == ["signing.key"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_store_signing_key_file_that_is_not_a_whole_key_is_refused(tmp_path: Path) -> None:
    """A key file an earlier release left empty (its maker died before writing) would
    sign uploads with an empty key: the embedded store refuses to start with it."""
    (tmp_path / "signing.key").write_bytes(b"")
    with pytest.raises(RuntimeError, match="holds 0 bytes, not a 32-byte key"):
        stores.EmbeddedStore(tmp_path, public_url="http://127.0.0.1", signing_key=None)
    made = stores.EmbeddedStore(tmp_path / "fresh", public_url="http://x", signing_key=None)
    assert len((tmp_path / "fresh" / "signing.key").read_bytes()) == stores.KEY_BYTES
    assert made.signature(key="k", expires=1, content_type="text/csv", max_bytes=1)
