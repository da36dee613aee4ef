"""Prometheus metrics of the SMTP server and the replies (the API's /metrics shows them)."""

from __future__ import annotations

from prometheus_client import Counter

MESSAGES = Counter("headwater_email_messages_total", "Messages accepted (250 after DATA).")
REFUSED = Counter(
    "headwater_email_refused_total",
    "Messages refused, by reason (recipient: unknown inbox or sender not allowed; "
    "no_attachment: nothing of a supported type).",
    ["reason"],
)
ATTACHMENTS = Counter("headwater_email_attachments_total", "Attachments that became transactions.")
REPLIES = Counter("headwater_email_replies_total", "Replies, by outcome.", ["outcome"])
