"""File ingestion errors. Upload refusals answer 403 with a reason, as a store would."""

from __future__ import annotations

from headwater.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    PayloadTooLarge,
    Unauthorized,
    UnsupportedMediaType,
)


class UnsupportedFileType(UnsupportedMediaType):
    code = "unsupported_file_type"

    def __init__(self, given: str) -> None:
        super().__init__(
            f"Files may be text/csv, application/json or application/x-ndjson, not {given!r}."
        )


class UploadRefused(Forbidden):
    """A PUT the signed URL does not allow: tampered, expired, wrong type or used."""

    code = "upload_refused"
    title = "Upload refused"


class FileTooLarge(PayloadTooLarge):
    code = "file_too_large"
    title = "File too large"


class NothingToResubmit(Conflict):
    code = "nothing_to_resubmit"
    title = "Nothing to re-submit"


class BadNotificationSecret(Unauthorized):
    code = "invalid_notification_secret"
    title = "Invalid notification secret"


class NotQuarantined(BadRequest):
    """A correction for a line that is not an open quarantined row of the transaction."""

    code = "not_quarantined"
    title = "Row not quarantined"
