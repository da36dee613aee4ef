"""Prometheus metrics of the record feed (the API's /metrics shows them)."""

from __future__ import annotations

from prometheus_client import Counter

FEED_PAGES = Counter(
    "headwater_feed_pages_total",
    "Record feed pages answered: with records, or empty (after any wait).",
    ["kind"],
)
FEED_RECORDS = Counter("headwater_feed_records_total", "Records answered by the record feed.")
