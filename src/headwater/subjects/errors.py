"""Data subjects' errors."""

from __future__ import annotations

from headwater.errors import NotFound


class ErasureNotFound(NotFound):
    code = "erasure_not_found"
    title = "Erasure not found"


class SuppressionNotFound(NotFound):
    code = "suppression_not_found"
    title = "Suppression not found"
