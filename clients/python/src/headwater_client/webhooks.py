"""Verifying Headwater's webhooks on the receiving side (the Standard Webhooks scheme).

    from headwater_client import webhooks

    event = webhooks.verify(secret, request.headers, request.body)

`verify` answers the event (a dict) when one of the `webhook-signature` signatures is
the HMAC-SHA256, keyed with the secret, of `<webhook-id>.<webhook-timestamp>.<body>`,
and the timestamp is within `tolerance` seconds of now; otherwise it raises
`WebhookVerificationFailed`. Deliveries are at least once: dedupe on `event["id"]`
(also the `webhook-id` header).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from headwater_client.errors import HeadwaterError

PREFIX = "whsec_"
DEFAULT_TOLERANCE = 300


class WebhookVerificationFailed(HeadwaterError):
    """The request is not a webhook signed with this secret, or it is too old or new."""


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    raise WebhookVerificationFailed(f"missing header {name}")


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The `v1,<base64>` signature of a body (as the service makes it)."""
    try:
        key = base64.b64decode(secret.removeprefix(PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise WebhookVerificationFailed("the secret is not a whsec_ secret") from None
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> dict[str, Any]:
    """The event, if the signature and the timestamp hold; else WebhookVerificationFailed.
    Pass the body exactly as received (bytes), before any JSON parsing."""
    raw = body.encode() if isinstance(body, str) else body
    message_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationFailed("webhook-timestamp is not a number") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise WebhookVerificationFailed("webhook-timestamp is too old or too new")
    expected = sign(secret, message_id, timestamp, raw).encode()
    for candidate in _header(headers, "webhook-signature").split():
        if hmac.compare_digest(candidate.encode(), expected):
            event = json.loads(raw)
            if not isinstance(event, dict):
                raise WebhookVerificationFailed("the body is not an event")
            return event
    raise WebhookVerificationFailed("no signature matches the secret")
