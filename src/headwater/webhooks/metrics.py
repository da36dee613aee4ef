"""Prometheus metrics of events and webhook deliveries (the API's /metrics shows them)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter(
    "headwater_events_total",
    "Events written, counted when the log gives them a position.",
    ["type"],
)
ATTEMPTS = Counter(
    "headwater_webhook_attempts_total",
    "Delivery attempts, by outcome (delivered; retry: failed, tried again later; failed: "
    "the last retry failed).",
    ["outcome"],
)
ATTEMPT_SECONDS = Histogram(
    "headwater_webhook_attempt_seconds",
    "How long an attempt took, from the connection to the receiver's status.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15),
)
OLDEST_PENDING = Gauge(
    "headwater_webhook_oldest_pending_seconds",
    "Age of the oldest event whose delivery is pending (0: none).",
    multiprocess_mode="max",
)
DISABLED = Counter(
    "headwater_webhook_endpoints_disabled_total", "Endpoints disabled after days of failures."
)
