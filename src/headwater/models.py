"""Imports every domain's tables so that Base.metadata is whole (migrations, tests)."""

from __future__ import annotations


def load_all() -> None:
    import headwater.identity.models  # noqa: F401
