"""Tamper evidence: rows altered, deleted or reordered in the database are found."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Uuid, bindparam, select, text

from headwater.activity import chain
from headwater.activity import service as activity
from headwater.activity.models import ActivityEntry
from headwater.db import Database
from tests.factories import run_cli
from tests.tenants import Tenant


@pytest.fixture
def chained(tenant: Tenant) -> uuid.UUID:
    """A company with six entries."""
    for name in ("a", "b", "c"):
        category = tenant.category(name)
        tenant.client.patch(
            f"/app/v1/workflow_categories/{category['id']}",
            json={"description": "changed"},
            headers=tenant.headers,
        )
    return uuid.UUID(tenant.company_id)


def _verify(db: Database, company: uuid.UUID, checkpoint: chain.Head | None = None) -> Any:
    with db.unit_of_work() as session:
        return activity.verify(session, company_id=company, checkpoint=checkpoint)


def _sql(db: Database, sql: str, **params: Any) -> None:
    """Raw SQL, with uuids bound as the Uuid column type stores them on each backend."""
    statement = text(sql).bindparams(
        *(
            bindparam(name, type_=Uuid)
            for name, value in params.items()
            if isinstance(value, uuid.UUID)
        )
    )
    with db.unit_of_work() as session:
        session.execute(statement, params)
        session.commit()


def _where(seq: int) -> str:
    return f"company_id = :company AND seq = {seq}"


def test_an_intact_chain_verifies(db: Database, chained: uuid.UUID) -> None:
    result = _verify(db, chained)
    assert result.finding is None
    assert result.head.count == 6


def test_altered_content_is_found(db: Database, chained: uuid.UUID, backend: str) -> None:
    tampered = '{"name": "forged"}'
    _sql(
        db,
        f"UPDATE activity_entries SET after = :after WHERE {_where(3)}",
        after=tampered,
        company=chained,
    )
    finding = _verify(db, chained).finding
    assert (finding.kind, finding.seq) == ("altered", 3)


def test_altered_author_or_timestamp_is_found(db: Database, chained: uuid.UUID) -> None:
    _sql(
        db,
        f"UPDATE activity_entries SET author_id = :author WHERE {_where(2)}",
        author=uuid.uuid4(),
        company=chained,
    )
    finding = _verify(db, chained).finding
    assert (finding.kind, finding.seq) == ("altered", 2)


def test_a_deleted_entry_is_found(db: Database, chained: uuid.UUID) -> None:
    _sql(db, f"DELETE FROM activity_entries WHERE {_where(4)}", company=chained)
    finding = _verify(db, chained).finding
    assert (finding.kind, finding.seq) == ("missing", 4)


def test_deleted_newest_entries_are_found_by_the_head_row(db: Database, chained: uuid.UUID) -> None:
    _sql(
        db, "DELETE FROM activity_entries WHERE company_id = :company AND seq >= 5", company=chained
    )
    finding = _verify(db, chained).finding
    assert (finding.kind, finding.seq) == ("missing", 5)


def test_reordered_entries_are_found(db: Database, chained: uuid.UUID) -> None:
    _sql(db, f"UPDATE activity_entries SET seq = -1 WHERE {_where(2)}", company=chained)
    _sql(db, f"UPDATE activity_entries SET seq = 2 WHERE {_where(3)}", company=chained)
    _sql(db, f"UPDATE activity_entries SET seq = 3 WHERE {_where(-1)}", company=chained)
    finding = _verify(db, chained).finding
    assert (finding.kind, finding.seq) == ("reordered", 2)


def test_truncation_with_a_forged_head_is_found_by_the_checkpoint(
    db: Database, chained: uuid.UUID
) -> None:
    with db.unit_of_work() as session:
        head = activity.checkpoints(session, company_id=chained)[0]
        checkpoint = chain.Head(head.count, head.hash)
        previous = session.scalar(
            select(ActivityEntry.hash).where(
                ActivityEntry.company_id == chained, ActivityEntry.seq == 5
            )
        )
    _sql(
        db, "DELETE FROM activity_entries WHERE company_id = :company AND seq = 6", company=chained
    )
    _sql(
        db,
        "UPDATE activity_heads SET count = 5, hash = :h WHERE company_id = :company",
        h=previous,
        company=chained,
    )
    assert _verify(db, chained).finding is None  # consistent inside the database...
    finding = _verify(db, chained, checkpoint).finding  # ...but not with what was kept outside
    assert (finding.kind, finding.seq) == ("missing", 6)


def test_rewritten_history_is_found_by_the_checkpoint(db: Database, chained: uuid.UUID) -> None:
    with db.unit_of_work() as session:
        head = activity.checkpoints(session, company_id=chained)[0]
        checkpoint = chain.Head(head.count, head.hash)
    _rewrite_chain(db, chained, seq=1, after={"name": "rewritten"})
    assert _verify(db, chained).finding is None
    finding = _verify(db, chained, checkpoint).finding
    assert (finding.kind, finding.seq) == ("altered", 6)


def _rewrite_chain(db: Database, company: uuid.UUID, *, seq: int, after: Any) -> None:
    """What an attacker with write access would do: change an entry and rehash after it."""
    from headwater.activity.models import ActivityEntry, ActivityHead

    with db.unit_of_work() as session:
        rows = (
            session.query(ActivityEntry)
            .filter_by(company_id=company)
            .order_by(ActivityEntry.seq)
            .all()
        )
        prev = chain.GENESIS
        for row in rows:
            if row.seq == seq:
                row.after = after
            row.prev_hash = prev
            row.hash = chain.link(prev, activity.chain_fields(row))
            prev = row.hash
        session.get(ActivityHead, company).hash = prev  # type: ignore[union-attr]
        session.commit()


def test_the_chain_grows_past_a_checkpoint(
    db: Database, chained: uuid.UUID, tenant: Tenant
) -> None:
    with db.unit_of_work() as session:
        head = activity.checkpoints(session, company_id=chained)[0]
        checkpoint = chain.Head(head.count, head.hash)
    tenant.category("later")
    result = _verify(db, chained, checkpoint)
    assert result.finding is None and result.head.count == 7


def test_companies_have_separate_chains(
    db: Database, chained: uuid.UUID, other_tenant: Tenant
) -> None:
    other_tenant.category("x")
    _sql(db, f"UPDATE activity_entries SET action = 'delete' WHERE {_where(1)}", company=chained)
    assert _verify(db, uuid.UUID(other_tenant.company_id)).finding is None
    assert _verify(db, chained).finding.kind == "altered"


def test_cli_checkpoint_and_verify(
    chained: uuid.UUID, base_settings: dict[str, Any], db: Database, tmp_path: Path
) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "activity",
            *args,
            data_dir=base_settings["data_dir"],
            database_url=base_settings["database_url"],
        )

    done = run("checkpoint", "--company-id", str(chained))
    assert done.returncode == 0, done.stderr
    heads = json.loads(done.stdout)
    assert heads == [{"company_id": str(chained), "count": 6, "hash": heads[0]["hash"]}]
    saved = tmp_path / "checkpoint.json"
    saved.write_text(done.stdout)
    ok = run("verify", "--checkpoint", str(saved))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"ok       {chained}  6 entries" in ok.stdout
    _sql(db, f"DELETE FROM activity_entries WHERE {_where(2)}", company=chained)
    broken = run("verify", "--checkpoint", str(saved))
    assert broken.returncode == 1
    assert "BROKEN" in broken.stdout and "missing at entry 2" in broken.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("[{]")
    assert run("verify", "--checkpoint", str(bad)).returncode == 2
