"""The errors of exports and their downloads."""

from __future__ import annotations

from headwater.errors import BadRequest, Forbidden, Gone, NotFound


class ExportNotFound(NotFound):
    code = "export_not_found"
    title = "Export not found"


class ExportExpired(Gone):
    code = "export_expired"
    title = "Export expired"


class InvalidExport(BadRequest):
    code = "invalid_export"
    title = "Invalid export"


class DownloadRefused(Forbidden):
    """A GET the signed download URL does not allow: tampered or expired."""

    code = "download_refused"
    title = "Download refused"
