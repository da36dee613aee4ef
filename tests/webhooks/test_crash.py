"""Crashes: a worker killed (SIGKILL) in the middle of a delivery delivers it after a
restart; a process killed between a change and its commit leaves neither the change nor
its event, and after the commit both (contract section 13)."""

from __future__ import annotations

import os
import textwrap
import time

import pytest
from starlette.testclient import TestClient

from headwater.config import Settings
from tests import preloaded
from tests.http_server import ServerProcess
from tests.webhooks.conftest import HookTenant, worker_env
from tests.webhooks.receiver import Receiver


@pytest.mark.http
def test_a_worker_killed_mid_delivery_delivers_after_restart(
    hooks: HookTenant, receiver: Receiver, settings: Settings, make_client: object
) -> None:
    """The receiver holds the first request (3 s); the worker is killed while it waits.
    A new worker takes the delivery when its lease (timeout + 15 s) ends."""
    from tests.webhooks.conftest import DELIVERING

    assert callable(make_client)
    creator = hooks.using(make_client(**DELIVERING | {"worker_enabled": False}))
    endpoint = creator.endpoint(receiver.at("/held", delay=3), ["transaction.completed"])
    worker = ServerProcess(
        worker_env(settings),
        log=settings.data_dir / "webhook-worker.log",
        command="worker",
    )
    worker.start()
    try:
        hooks.push(1)
        (first,) = receiver.wait_for("/held", 1, timeout=30)
        worker.kill()
        receiver.behaviours["/held"].delay = 0
        # nothing recorded: the attempt never finished
        (delivery,) = hooks.deliveries(endpoint["id"])
        assert delivery["status"] == "pending" and delivery["attempts"] == []
        worker.start()
        second = receiver.wait_for("/held", 2, timeout=40)[1]
        assert second.headers["webhook-id"] == first.headers["webhook-id"]
        (delivery,) = hooks.wait_deliveries(
            endpoint["id"], lambda f: bool(f) and f[0]["status"] == "delivered"
        )
        assert [a["status_code"] for a in delivery["attempts"]] == [200]
    finally:
        worker.stop()


CHANGE = textwrap.dedent(
    """
    import os, signal, sys, uuid
    from headwater.config import Settings
    from headwater.db import Database
    from headwater.kit.actor import Actor
    from headwater.workflows import service
    from headwater.workflows.schemas import WorkflowUpdate
    from headwater.models import load_all

    load_all()

    settings = Settings(data_dir=sys.argv[1], database_url=sys.argv[2] or None)
    db = Database(settings)
    actor = Actor(uuid.UUID(sys.argv[3]), uuid.UUID(sys.argv[4]))
    with db.unit_of_work() as session:
        service.update_workflow(
            session,
            actor=actor,
            workflow_id=uuid.UUID(sys.argv[5]),
            changes=WorkflowUpdate(status="active"),
        )
        if sys.argv[6] == "before-commit":
            os.kill(os.getpid(), signal.SIGKILL)
    if sys.argv[6] == "after-commit":
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize(("when", "changed"), [("before-commit", False), ("after-commit", True)])
def test_a_change_and_its_event_are_both_kept_or_neither(
    hooks: HookTenant, settings: Settings, when: str, changed: bool
) -> None:
    headers = hooks.headers
    client: TestClient = hooks.client
    workflow = hooks.workflow()
    _, cursor = hooks.follow()
    process = preloaded.run_script(
        CHANGE,
        str(settings.data_dir),
        settings.database_url or "",
        hooks.company_id,
        hooks.credential["author_id"],
        workflow["id"],
        when,
        env=dict(os.environ),
        timeout=60,
    )
    assert process.returncode == -9, process.stderr
    time.sleep(0.1)
    status = client.get(f"/app/v1/workflows/{workflow['id']}", headers=headers).json()["status"]
    events, _ = hooks.follow(cursor)
    assert status == ("active" if changed else "draft")
    assert [e["type"] for e in events] == (["workflow.status_changed"] if changed else [])
