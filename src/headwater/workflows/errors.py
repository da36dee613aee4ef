"""Workflow errors."""

from __future__ import annotations

from headwater.errors import BadRequest, Conflict, NotFound


class CategoryNotFound(NotFound):
    code = "workflow_category_not_found"


class TemplateNotFound(NotFound):
    code = "workflow_template_not_found"


class WorkflowNotFound(NotFound):
    code = "workflow_not_found"


class TaskNotFound(NotFound):
    code = "workflow_task_not_found"


class UnknownReference(BadRequest):
    """A body names a resource the company does not have."""

    code = "unknown_reference"

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(
            detail, errors=[{"location": "body", "field": f"/{field}", "message": detail}]
        )


class InUse(Conflict):
    code = "resource_in_use"


class IllegalTransition(Conflict):
    code = "illegal_status_transition"

    def __init__(self, current: str, wanted: str, allowed: list[str]) -> None:
        options = ", ".join(allowed) or "none (final state)"
        super().__init__(
            f"A workflow cannot go from {current} to {wanted}; from {current} it can go to "
            f"{options}.",
            extra={"from": current, "to": wanted, "allowed": allowed},
        )


class NotifyAfterDue(BadRequest):
    code = "invalid_dates"

    def __init__(self) -> None:
        super().__init__(
            "notification_date must not be after due_date.",
            errors=[
                {
                    "location": "body",
                    "field": "/notification_date",
                    "message": "must not be after due_date",
                }
            ],
        )
