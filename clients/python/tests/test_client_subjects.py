"""Erasing data subjects through the client and `headwater-client`, against a real
server whose worker runs the erasures: erase and wait, list, suppressions list and
lift."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_client_cli import json_lines, run

from conftest import Tenant
from headwater_client import Client, ErasureFailed, InvalidRequest

pytestmark = pytest.mark.http


@pytest.fixture
def subjects(server: str) -> Tenant:
    return Tenant(server, subject_key="/note")


def _notes(hw: Client, tenant: Tenant) -> list[str]:
    return sorted(r.data["note"] for r in hw.list_records(tenant.client_id, tenant.dataset_id))


def test_erase_waits_for_every_copy_and_suppresses(subjects: Tenant) -> None:
    with subjects.client() as hw:
        hw.push(
            subjects.client_id,
            subjects.dataset_id,
            [
                {"order_id": "A", "amount": 1, "note": "ada"},
                {"order_id": "B", "amount": 2, "note": "bob"},
            ],
        )
        seen: list[str] = []
        done = hw.erase(["ada"], suppress=True, wait=True, progress=lambda e: seen.append(e.status))
        assert done.status == "completed" and seen[-1] == "completed"
        assert done.counts is not None and done.counts.records == 1
        assert _notes(hw, subjects) == ["bob"]
        later = hw.push(
            subjects.client_id, subjects.dataset_id, [{"order_id": "C", "amount": 3, "note": "ada"}]
        )
        transaction = hw.get_transaction(later.transaction_ids[0])
        assert (transaction.records_accepted, transaction.records_suppressed) == (0, 1)
        assert [e.erasure_id for e in hw.list_erasures()] == [done.erasure_id]
        [suppression] = list(hw.list_suppressions())
        assert suppression.erasure_id == done.erasure_id
        hw.lift_suppression(suppression.suppression_id)
        assert list(hw.list_suppressions()) == []
        with pytest.raises(InvalidRequest):
            hw.create_erasure([])
        with pytest.raises(ValueError, match="no subjects"):
            hw.erase([])
        assert ErasureFailed.__mro__[1].__name__ == "HeadwaterError"


def test_the_async_client_lists_erasures(subjects: Tenant) -> None:
    async def main() -> list[str]:
        async with subjects.async_client() as hw:
            made = await hw.create_erasure(["nobody"])
            return [made.erasure_id] + [e.erasure_id async for e in hw.list_erasures()]

    made, *listed = asyncio.run(main())
    assert listed == [made]


def test_the_cli_erases_lists_and_lifts(subjects: Tenant) -> None:
    env = subjects.env()
    with subjects.client() as hw:
        hw.push(
            subjects.client_id, subjects.dataset_id, [{"order_id": "A", "amount": 1, "note": "ada"}]
        )
    erased = run(env, "erase", "ada", "--suppress", "--wait", "--json")
    assert erased.returncode == 0, erased.stderr
    done = json.loads(erased.stdout)
    assert done["status"] == "completed" and done["counts"]["records"] == 1
    listed = run(env, "erasures", "list", "--json")
    assert [e["erasure_id"] for e in json_lines(listed.stdout)] == [done["erasure_id"]]
    shown = run(env, "erasures", "show", done["erasure_id"], "--json")
    assert json.loads(shown.stdout)["counts"] == done["counts"]
    [suppression] = json_lines(run(env, "suppressions", "list", "--json").stdout)
    lifted = run(env, "suppressions", "lift", suppression["suppression_id"])
    assert lifted.returncode == 0 and "lifted" in lifted.stderr
    assert json_lines(run(env, "suppressions", "list", "--json").stdout) == []
    nothing = run(env, "erase")
    assert nothing.returncode != 0 and "subject" in nothing.stderr
