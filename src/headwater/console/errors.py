"""The console's own refusals; every other error is the domains' (`headwater.errors`),
shown as a page by `deps.ConsoleRoute`."""

from __future__ import annotations

from headwater.errors import BadRequest, Forbidden


class BadForm(BadRequest):
    code = "bad_form"
    title = "Bad form"


class CsrfRefused(Forbidden):
    code = "csrf_refused"
    title = "Form refused"
