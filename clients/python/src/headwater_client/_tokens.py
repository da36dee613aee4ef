"""The cached access token and when to renew it: state only, no I/O; each client guards
it with its own lock so that one renewal serves every thread or task waiting for it."""

from __future__ import annotations

import time

from headwater_client.models import Token

# Renew this long before `expires_in` runs out (a tenth of the lifetime for short-lived
# tokens), so that a token never expires between being read here and reaching the service.
DEFAULT_MARGIN_SECONDS = 60.0


class TokenCache:
    def __init__(self, margin: float | None = None) -> None:
        self._margin = margin
        self._token: Token | None = None
        self._renew_at = 0.0

    def current(self) -> Token | None:
        """The cached token while it is not yet due for renewal."""
        token = self._token
        if token is not None and time.monotonic() < self._renew_at:
            return token
        return None

    def store(self, token: Token, *, requested_at: float) -> Token:
        """Keep `token`, asked for at `requested_at` (monotonic), until shortly before it
        expires."""
        lifetime = float(token.expires_in)
        margin = self._margin if self._margin is not None else DEFAULT_MARGIN_SECONDS
        margin = min(margin, lifetime * 0.1) if self._margin is None else min(margin, lifetime)
        self._token = token
        self._renew_at = requested_at + lifetime - margin
        return token

    def discard(self, access_token: str) -> None:
        """Forget the token the service refused, unless another caller already renewed it."""
        if self._token is not None and self._token.access_token == access_token:
            self._token = None
