"""A company with a credential that may read and write workflows and read activity."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session
from starlette.testclient import TestClient

from headwater.activity import service as activity
from headwater.kit.actor import Actor
from tests.factories import auth, create_credential, get_token

ALL = ["workflows:read", "workflows:write", "activities:read"]


class Tenant:
    """A company, a credential of it, and the headers that act as that credential."""

    def __init__(self, client: TestClient, admin: dict[str, str], company_id: str) -> None:
        self.client = client
        self.company_id = company_id
        self.credential = create_credential(client, admin, company_id, scopes=ALL)
        self.author_id = self.credential["author_id"]
        self.headers = auth(
            get_token(client, self.credential["client_id"], self.credential["client_secret"])
        )

    @property
    def actor(self) -> Actor:
        return Actor(uuid.UUID(self.company_id), uuid.UUID(self.author_id))

    def post(self, path: str, body: Any, status: int = 201) -> dict[str, Any]:
        response = self.client.post(path, json=body, headers=self.headers)
        assert response.status_code == status, response.text
        return response.json()  # type: ignore[no-any-return]

    def category(self, name: str = "Onboarding", description: str = "New suppliers") -> Any:
        return self.post("/app/v1/workflow_categories", {"name": name, "description": description})

    def template(self, category_id: str | None = None, steps: int = 2) -> Any:
        category_id = category_id or self.category()["id"]
        return self.post(
            "/app/v1/workflow_templates",
            {
                "category_id": category_id,
                "name": "Supplier onboarding",
                "description": "Standard",
                "steps": [
                    {
                        "step_id": f"step_{i}-x",
                        "name": f"Step {i}",
                        "description": f"Do {i}",
                        "type": ["upload", "review", "approval"][i % 3],
                    }
                    for i in range(steps)
                ],
            },
        )

    def workflow(self, template_id: str | None = None, **extra: Any) -> Any:
        template_id = template_id or self.template()["id"]
        body = {
            "workflow_template_id": template_id,
            "name": "Onboard Globex",
            "description": "Q4",
            "due_date": "2026-12-31T17:00:00Z",
        } | extra
        return self.post("/app/v1/workflows", body)

    def search(self, body: dict[str, Any], status: int = 200) -> Any:
        return self.post("/app/v1/activities/search", body, status)


def record_entry(session: Session, tenant: Tenant) -> None:
    """One activity entry written through the service, in `session`'s transaction."""
    activity.record(
        session,
        actor=tenant.actor,
        action="create",
        resource_type="workflow",
        resource_id=uuid.uuid4(),
        before=None,
        after={"n": 1},
    )
