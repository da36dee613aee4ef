"""Imports every domain's tables so that Base.metadata is whole (migrations, tests)."""

from __future__ import annotations


def load_all() -> None:
    import headwater.activity.models
    import headwater.console.models
    import headwater.events.models
    import headwater.exports.models
    import headwater.files.models
    import headwater.identity.models
    import headwater.inbox.models
    import headwater.ingestion.models
    import headwater.scheduler
    import headwater.sftp.models
    import headwater.subjects.models
    import headwater.webhooks.models
    import headwater.workflows.models  # noqa: F401
