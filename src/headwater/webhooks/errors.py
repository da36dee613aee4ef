"""The errors of webhook endpoints and the event feed."""

from __future__ import annotations

from headwater.errors import BadRequest, Gone, NotFound


class EndpointNotFound(NotFound):
    code = "webhook_endpoint_not_found"
    title = "Webhook endpoint not found"


class InvalidWebhookURL(BadRequest):
    code = "invalid_webhook_url"
    title = "Webhook URL not allowed"


class CursorExpired(Gone):
    code = "cursor_expired"
    title = "Cursor expired"
