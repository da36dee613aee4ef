"""When to send a request again, and after how long: decisions only, no I/O, shared by
the sync and the async client."""

from __future__ import annotations

import email.utils
import logging
import random
import time
from dataclasses import dataclass

import httpx

from headwater_client.errors import ConnectionFailed

log = logging.getLogger("headwater_client")

RETRY_STATUSES = frozenset({429, 502, 503, 504})

# Errors after which the request may not have reached the service, or its answer was
# lost; a bad URL or a refused TLS certificate is not among them.
RETRY_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: the n-th retry waits a random time between
    0 and `min(backoff_max, backoff_base * 2**n)` seconds, or what `Retry-After` asks
    (plus up to `backoff_base` of jitter) when the service sent one. A `Retry-After`
    longer than `max_retry_after` is not waited for: the error is raised instead."""

    max_retries: int = 5
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    max_retry_after: float = 120.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float | None:
        """Seconds to wait before retry `attempt + 1`, or None when it is time to give up."""
        if attempt >= self.max_retries:
            return None
        hinted = parse_retry_after(retry_after)
        if hinted is not None:
            if hinted > self.max_retry_after:
                return None
            return hinted + random.uniform(0, self.backoff_base)  # noqa: S311 (jitter)
        ceiling = min(self.backoff_max, self.backoff_base * 2**attempt)
        return random.uniform(0, ceiling)  # noqa: S311 (jitter)


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` as seconds from now: delta-seconds or an HTTP date (RFC 9110)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True, slots=True)
class Again:
    """Send the request again after `delay` seconds; with a new token if `refresh`."""

    delay: float
    refresh: bool = False


class Attempts:
    """The attempts of one logical request: what to do after each answer or error."""

    def __init__(self, policy: RetryPolicy, label: str, *, authenticated: bool) -> None:
        self.policy = policy
        self.label = label
        self.authenticated = authenticated
        self.retries = 0
        self.refreshed = False

    def after_error(self, exc: httpx.TransportError) -> float:
        """The delay before trying again after a transport error; raises when out of tries."""
        delay = self.policy.delay(self.retries) if isinstance(exc, RETRY_ERRORS) else None
        if delay is None:
            raise ConnectionFailed(f"{self.label}: {type(exc).__name__}: {exc}") from exc
        self._note(delay, type(exc).__name__)
        return delay

    def after_response(self, response: httpx.Response) -> Again | None:
        """`Again` to retry, None to hand the answer (success or error) to the caller."""
        status = response.status_code
        if status == 401 and self.authenticated and not self.refreshed:
            # The token may have been revoked or its key rotated: one new token, one retry.
            self.refreshed = True
            log.info("%s: 401, retrying once with a new token", self.label)
            return Again(0.0, refresh=True)
        if status not in RETRY_STATUSES:
            return None
        delay = self.policy.delay(self.retries, response.headers.get("retry-after"))
        if delay is None:
            return None
        self._note(delay, str(status))
        return Again(delay)

    def _note(self, delay: float, reason: str) -> None:
        self.retries += 1
        log.info(
            "%s: %s, retry %d of %d in %.2f s",
            self.label,
            reason,
            self.retries,
            self.policy.max_retries,
            delay,
        )
