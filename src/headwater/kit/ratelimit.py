"""Token-bucket rate limiting: in-process by default, shared through Redis when configured."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

log = structlog.get_logger("headwater.ratelimit")


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int
    retry_after: int

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers), as ASGI pairs."""
        headers = [
            (b"ratelimit-limit", str(self.limit).encode()),
            (b"ratelimit-remaining", str(self.remaining).encode()),
            (b"ratelimit-reset", str(self.reset_seconds).encode()),
        ]
        if not self.allowed:
            headers.append((b"retry-after", str(self.retry_after).encode()))
        return headers

    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.raw_headers()}


class RateLimiter(Protocol):
    async def hit(self, key: str) -> Decision: ...

    async def close(self) -> None: ...


def _decide(tokens: float, *, allowed: bool, rate: float, burst: int) -> Decision:
    return Decision(
        allowed=allowed,
        limit=burst,
        remaining=max(0, math.floor(tokens)),
        reset_seconds=math.ceil((burst - tokens) / rate),
        retry_after=0 if allowed else max(1, math.ceil((1 - tokens) / rate)),
    )


class MemoryRateLimiter:
    """Buckets held in this process: each key refills at `rate` tokens/s up to `burst`."""

    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    async def hit(self, key: str) -> Decision:
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            allowed = tokens >= 1.0
            if allowed:
                tokens -= 1.0
            if len(self._buckets) >= self.max_keys and key not in self._buckets:
                self._evict_full(now)
            self._buckets[key] = (tokens, now)
        return _decide(tokens, allowed=allowed, rate=self.rate, burst=self.burst)

    def _evict_full(self, now: float) -> None:
        """Forget buckets that have refilled: they hold no information."""
        full_after = self.burst / self.rate
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after}

    async def close(self) -> None:
        return None


# KEYS[1] bucket key; ARGV: rate, burst, now (seconds, from Redis TIME so every instance
# shares one clock). Returns {allowed, tokens * 1000}.
_REDIS_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {allowed, math.floor(tokens * 1000)}
"""


class RedisRateLimiter:
    """The same bucket kept in Redis, so that several API instances share one limit.

    If Redis cannot be reached the request is let through and a warning logged: losing
    the limiter must not take the API down with it.
    """

    def __init__(self, url: str, *, rate: float, burst: int, prefix: str = "hw:rl:") -> None:
        import redis.asyncio as aioredis

        self.rate = rate
        self.burst = burst
        self.prefix = prefix
        self._redis = aioredis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self._script = self._redis.register_script(_REDIS_BUCKET)

    async def hit(self, key: str) -> Decision:
        from redis.exceptions import RedisError

        try:
            allowed, milli_tokens = await self._script(
                keys=[self.prefix + key], args=[self.rate, self.burst]
            )
        except (RedisError, OSError) as exc:
            log.warning("rate limiter unavailable, request allowed", error=type(exc).__name__)
            return _decide(float(self.burst), allowed=True, rate=self.rate, burst=self.burst)
        return _decide(
            int(milli_tokens) / 1000, allowed=bool(allowed), rate=self.rate, burst=self.burst
        )

    async def close(self) -> None:
        await self._redis.aclose()


def make_rate_limiter(
    *, redis_url: str | None, rate: float, burst: int, prefix: str = "hw:rl:"
) -> RateLimiter:
    if redis_url:
        return RedisRateLimiter(redis_url, rate=rate, burst=burst, prefix=prefix)
    return MemoryRateLimiter(rate=rate, burst=burst)


class FailureLimit:
    """Failures counted per key (a client address) in a token bucket; a key whose bucket
    is empty is refused for `block_seconds` without any further work (no hash checked).
    The bucket is shared through Redis when the limiter is; the refusal is this process's."""

    MAX_BLOCKED = 100_000

    def __init__(self, limiter: RateLimiter, *, block_seconds: float = 60.0) -> None:
        self._limiter = limiter
        self._block = block_seconds
        self._blocked: dict[str, float] = {}

    @classmethod
    def per_minute(cls, failures: int, *, redis_url: str | None, prefix: str) -> FailureLimit:
        """`failures` a minute per key, counted in Redis when `redis_url` is set."""
        return cls(
            make_rate_limiter(
                redis_url=redis_url, rate=failures / 60, burst=failures, prefix=prefix
            )
        )

    def refused(self, key: str) -> bool:
        return self._blocked.get(key, 0.0) > time.monotonic()

    async def failed(self, key: str) -> None:
        decision = await self._limiter.hit(key)
        if decision.allowed:
            return
        now = time.monotonic()
        if len(self._blocked) >= self.MAX_BLOCKED:
            self._blocked = {k: until for k, until in self._blocked.items() if until > now}
        if len(self._blocked) < self.MAX_BLOCKED:
            self._blocked[key] = now + self._block

    async def close(self) -> None:
        await self._limiter.close()
