"""Erasures through the HTTP API (contract section 17), on both databases: every copy of
a subject's data inside the service goes, the feed tells followers, and the service
keeps no plain copy of the subjects."""

from __future__ import annotations

import re
import sqlite3
import uuid
from typing import Any

from sqlalchemy import event, inspect, select, text
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient

from headwater.runtime import Runtime
from headwater.subjects import runner
from headwater.subjects.models import Erasure
from tests.downstream.test_exports import ask, export, read, run_exports
from tests.factories import assert_problem, auth, create_credential, get_token
from tests.files.conftest import CSV_HEADER
from tests.subjects.conftest import SubjectTenant, customer, run_erasures

ADA, BOB = "ada@example.com", "bob@example.com"


def _runtime(tenant: SubjectTenant) -> Runtime:
    return tenant.client.app.state.runtime  # type: ignore[attr-defined,no-any-return]


def _emails(records: list[dict[str, Any]]) -> list[str]:
    return [r["data"].get("customer-email") for r in records]


def _ada_everywhere(tenant: SubjectTenant) -> dict[str, Any]:
    """Ada in pushes (two transactions), in a file's rows (one stored, one quarantined),
    and in a completed export; Bob beside her everywhere."""
    tenant.push([customer(1, ADA), customer(2, BOB)])
    tenant.push(customer(3, ADA))
    csv = CSV_HEADER + f"A-4,{ADA},4.5,4,true,2026-11-22T10:00:00Z\n"
    csv += f"A-5,{ADA},not-a-number,5,true,2026-11-22T10:00:00Z\n"
    csv += f"A-6,{BOB},6.5,6,true,2026-11-22T10:00:00Z\n"
    ada_file = tenant.upload(csv)
    bob_file = tenant.upload(CSV_HEADER + f"A-7,{BOB},7.5,7,true,2026-11-22T10:00:00Z\n")
    assert (ada_file["records_accepted"], ada_file["records_rejected"]) == (2, 1)
    export = ask(tenant, format="ndjson")
    run_exports(tenant.client)
    assert read(tenant, export["export_id"])["status"] == "completed"
    return {"ada_file": ada_file, "bob_file": bob_file, "export": export}


def test_an_erasure_removes_every_copy_and_counts_them(subject_tenant: SubjectTenant) -> None:
    made = _ada_everywhere(subject_tenant)
    ada_ids = {
        r["record_id"]
        for r in subject_tenant.all_records()
        if r["data"].get("customer-email") == ADA
    }
    assert len(ada_ids) == 3
    store = _runtime(subject_tenant).store
    ada_key = _object_key(subject_tenant, made["ada_file"]["transaction_id"])
    assert store.head(ada_key) is not None

    queued = subject_tenant.erase(ADA)
    assert queued["status"] == "queued" and queued["subject_count"] == 1
    assert queued["suppress"] is False and queued["completed_at"] is None
    # other tests' erasures may wait in the same queue (the console's, the isolation
    # matrix's): the worker runs them all, this one among them
    assert run_erasures(subject_tenant.client) >= 1
    done = subject_tenant.erasure(queued["erasure_id"])

    assert done["status"] == "completed" and done["completed_at"] is not None
    assert done["counts"] == {"records": 3, "quarantined_rows": 1, "files": 1, "exports": 1}
    # the whole dataset, not a sample: Bob's records only, and the count agrees
    remaining = subject_tenant.all_records()
    assert sorted(_emails(remaining)) == [BOB, BOB, BOB]
    page = subject_tenant.client.get(
        "/platform/v1/data",
        params={"client_id": subject_tenant.client_id, "dataset_id": "orders"},
        headers=subject_tenant.headers,
    ).json()
    assert page["total_entries"] == 3
    # the raw file of the transaction that held Ada's rows is gone, Bob's alone is kept
    assert store.head(ada_key) is None
    assert subject_tenant.transaction(made["ada_file"]["transaction_id"])["file_erased"] is True
    bob_key = _object_key(subject_tenant, made["bob_file"]["transaction_id"])
    assert store.head(bob_key) is not None
    assert subject_tenant.transaction(made["bob_file"]["transaction_id"])["file_erased"] is False
    # the quarantined row holding Ada is gone, the transaction keeps its counts
    rows = subject_tenant.client.get(
        f"/platform/v1/transactions/{made['ada_file']['transaction_id']}/quarantine",
        headers=subject_tenant.headers,
    ).json()
    assert rows["data"] == []
    assert subject_tenant.transaction(made["ada_file"]["transaction_id"])["records_accepted"] == 2
    # the export that held her records answers erased, with no download
    held = read(subject_tenant, made["export"]["export_id"])
    assert held["status"] == "erased" and held["download_url"] is None
    # the feed: Bob's records, and each of Ada's once more, erased, after them
    feed, _ = subject_tenant.follow()
    live = [r for r in feed if not r.get("erased")]
    assert sorted(_emails(live)) == [BOB, BOB, BOB]
    tombstones = [r for r in feed if r.get("erased")]
    assert {t["record_id"] for t in tombstones} == ada_ids
    assert all(set(t) == {"record_id", "erased"} for t in tombstones)
    # a new export holds Bob's records only
    for format in ("ndjson", "csv"):
        _, body = export(subject_tenant, format=format)
        assert ADA not in body.decode() and body.decode().count(BOB) == 3


def _object_key(tenant: SubjectTenant, transaction_id: str) -> str:
    from headwater.files.models import FileUpload

    with _runtime(tenant).db.read_session() as session:
        key = session.scalar(
            select(FileUpload.object_key).where(
                FileUpload.transaction_id == uuid.UUID(transaction_id)
            )
        )
    assert key is not None
    return str(key)


def test_the_erasure_writes_one_event_and_one_activity_entry_with_counts_only(
    subject_tenant: SubjectTenant, client: TestClient, admin: dict[str, str]
) -> None:
    subject_tenant.push(customer(1, ADA))
    done = subject_tenant.erased(ADA)
    reader = create_credential(
        client, admin, subject_tenant.company_id, scopes=["events:read", "activities:read"]
    )
    headers = auth(get_token(client, reader["client_id"], reader["client_secret"]))
    events = client.get("/platform/v1/events", headers=headers).json()["data"]
    erased = [e for e in events if e["type"] == "erasure.completed"]
    assert len(erased) == 1
    assert erased[0]["data"]["erasure_id"] == done["erasure_id"]
    assert erased[0]["data"]["counts"]["records"] == 1
    entries = client.post(
        "/app/v1/activities/search",
        json={"filter": {"resource_type": "erasure"}},
        headers=headers,
    ).json()["data"]
    assert len(entries) == 1 and entries[0]["after"]["counts"] == done["counts"]
    assert ADA not in str(events) + str(entries)


def test_no_plain_subject_is_kept_in_any_table_or_log(
    subject_tenant: SubjectTenant, capsys: Any
) -> None:
    """The erasure and its suppression keep HMACs only: after the erasure, no column of
    any table holds the subject as given."""
    secret = f"zelda-{uuid.uuid4().hex[:8]}@example.com"
    subject_tenant.push(customer(1, secret))
    subject_tenant.erased(secret, suppress=True)
    subject_tenant.push(customer(2, secret))  # suppressed: not stored either
    db = _runtime(subject_tenant).db
    with db.read_connection() as connection:
        tables = inspect(connection).get_table_names()
        for table in tables:
            quoted = connection.dialect.identifier_preparer.quote(table)
            if connection.dialect.name == "postgresql":  # every column, as text, in place
                found = connection.scalar(
                    text(f"SELECT count(*) FROM {quoted} AS t WHERE t::text LIKE :p"),
                    {"p": f"%{secret}%"},
                )
                assert found == 0, table
            else:
                rows = connection.execute(text(f"SELECT * FROM {quoted}")).all()
                assert secret not in str(rows), table
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err


def test_a_suppressed_subject_is_not_stored_on_any_channel_until_lifted(
    subject_tenant: SubjectTenant,
) -> None:
    done = subject_tenant.erased(ADA, suppress=True)
    assert done["suppress"] is True
    pushed = subject_tenant.push([customer(1, ADA), customer(2, BOB)]).json()
    assert pushed["records_accepted"] == 1
    transaction = subject_tenant.transaction(pushed["transaction_id"])
    assert transaction["records_suppressed"] == 1
    csv = CSV_HEADER + f"A-3,{ADA},3.5,3,true,2026-11-22T10:00:00Z\n"
    csv += f"A-4,{BOB},4.5,4,true,2026-11-22T10:00:00Z\n"
    uploaded = subject_tenant.upload(csv)
    assert (uploaded["records_accepted"], uploaded["records_suppressed"]) == (1, 1)
    assert sorted(_emails(subject_tenant.all_records())) == [BOB, BOB]

    listed = subject_tenant.client.get("/platform/v1/suppressions", headers=subject_tenant.eraser)
    assert listed.status_code == 200
    [suppression] = listed.json()["data"]
    assert suppression["erasure_id"] == done["erasure_id"]
    assert ADA not in listed.text
    lifted = subject_tenant.client.delete(
        f"/platform/v1/suppressions/{suppression['suppression_id']}", headers=subject_tenant.eraser
    )
    assert lifted.status_code == 204
    again = subject_tenant.client.delete(
        f"/platform/v1/suppressions/{suppression['suppression_id']}", headers=subject_tenant.eraser
    )
    assert_problem(again, 404, "suppression_not_found")
    assert subject_tenant.push(customer(5, ADA)).json()["records_accepted"] == 1


def test_a_dataset_that_hashes_its_subject_key_is_erased_by_the_plain_subject(
    subject_tenant: SubjectTenant,
) -> None:
    response = subject_tenant.client.put(
        f"/admin/v1/clients/{subject_tenant.client_id}/datasets/orders/transforms",
        json={"steps": [{"op": "hash", "path": "/customer-email", "lowercase": True}]},
        headers=subject_tenant.admin,
    )
    assert response.status_code == 200, response.text
    subject_tenant.push([customer(1, "Ada@Example.com"), customer(2, BOB)])
    stored = _emails(subject_tenant.all_records())
    assert ADA not in stored and len(stored[0]) == 64  # hashed as stored
    done = subject_tenant.erased(ADA)
    assert done["counts"]["records"] == 1
    assert len(subject_tenant.all_records()) == 1


def test_an_erasure_covers_only_its_scope_and_datasets_with_a_subject_key(
    subject_tenant: SubjectTenant, other_subject_tenant: SubjectTenant
) -> None:
    subject_tenant.push(customer(1, ADA))
    other_subject_tenant.push(customer(1, ADA))
    done = subject_tenant.erased(ADA, client_id=subject_tenant.client_id, dataset_id="orders")
    assert done["counts"]["records"] == 1
    assert subject_tenant.all_records() == []
    assert _emails(other_subject_tenant.all_records()) == [ADA]  # another company's
    # another company's erasure is not found
    subject_tenant.erasure(str(uuid.uuid4()), status=404)
    response = other_subject_tenant.client.get(
        f"/platform/v1/erasures/{done['erasure_id']}", headers=other_subject_tenant.eraser
    )
    assert_problem(response, 404, "erasure_not_found")
    listed = subject_tenant.client.get("/platform/v1/erasures", headers=subject_tenant.eraser)
    assert [e["erasure_id"] for e in listed.json()["data"]] == [done["erasure_id"]]


def test_bad_erasure_requests_are_refused_and_store_nothing(
    subject_tenant: SubjectTenant, other_subject_tenant: SubjectTenant
) -> None:
    assert_problem(
        subject_tenant.client.post(
            "/platform/v1/erasures", json={"subjects": []}, headers=subject_tenant.eraser
        ),
        400,
    )
    too_many = [f"s{i}" for i in range(1001)]
    assert_problem(
        subject_tenant.client.post(
            "/platform/v1/erasures", json={"subjects": too_many}, headers=subject_tenant.eraser
        ),
        400,
    )
    no_client = subject_tenant.client.post(
        "/platform/v1/erasures",
        json={"subjects": [ADA], "dataset_id": "orders"},
        headers=subject_tenant.eraser,
    )
    assert "client_id" in assert_problem(no_client, 400)["detail"] + no_client.text
    theirs = subject_tenant.client.post(
        "/platform/v1/erasures",
        json={"subjects": [ADA], "client_id": other_subject_tenant.client_id},
        headers=subject_tenant.eraser,
    )
    assert_problem(theirs, 403)
    missing = subject_tenant.client.post(
        "/platform/v1/erasures",
        json={"subjects": [ADA], "client_id": subject_tenant.client_id, "dataset_id": "nope"},
        headers=subject_tenant.eraser,
    )
    assert_problem(missing, 404)
    # a token without data:erase
    refused = subject_tenant.client.post(
        "/platform/v1/erasures", json={"subjects": [ADA]}, headers=subject_tenant.headers
    )
    assert refused.status_code == 403
    listed = subject_tenant.client.get("/platform/v1/erasures", headers=subject_tenant.eraser)
    assert listed.json()["data"] == []


def test_a_subject_key_must_be_a_json_pointer(subject_tenant: SubjectTenant) -> None:
    response = subject_tenant.client.put(
        f"/admin/v1/clients/{subject_tenant.client_id}/datasets/orders/options",
        json={"options": {"subject_key": "email"}},
        headers=subject_tenant.admin,
    )
    problem = assert_problem(response, 400)
    assert "subject_key" in str(problem)


def _apply(mirror: dict[str, Any], page: list[dict[str, Any]]) -> None:
    for entry in page:
        if entry.get("erased"):
            mirror.pop(entry["record_id"], None)
        else:
            mirror[entry["record_id"]] = entry["data"]


def test_a_follower_that_mirrors_the_feed_ends_with_exactly_the_records_that_exist(
    subject_tenant: SubjectTenant,
) -> None:
    """A mirror that applies the feed (records in, erased out), read in small pages while
    pushes and erasures go on between its reads, holds exactly what the dataset holds."""
    mirror: dict[str, Any] = {}
    cursor: str | None = None

    def catch_up() -> None:
        nonlocal cursor
        while True:
            params = {"limit": 2} | ({"after": cursor} if cursor else {})
            page = subject_tenant.changes(**params)
            _apply(mirror, page["data"])
            cursor = page["next_cursor"]
            if not page["data"]:
                return

    people = [f"p{i}@example.com" for i in range(5)]
    for round_ in range(4):
        subject_tenant.push([customer(10 * round_ + i, p) for i, p in enumerate(people)])
        # half-way through what is there: a page or two, then an erasure
        for _ in range(2):
            params = {"limit": 2} | ({"after": cursor} if cursor else {})
            page = subject_tenant.changes(**params)
            _apply(mirror, page["data"])
            cursor = page["next_cursor"]
        subject_tenant.erased(people[round_])
    subject_tenant.push(customer(99, people[0]))  # stored again after its erasure
    catch_up()
    existing = {r["record_id"]: r["data"] for r in subject_tenant.all_records()}
    assert mirror == existing
    assert len(existing) == 4 * 5 - (4 + 3 + 2 + 1) + 1
    # a follower from the start agrees too, and never sees an erased record's data
    fresh: dict[str, Any] = {}
    feed, _ = subject_tenant.follow(limit=3)
    _apply(fresh, feed)
    assert fresh == existing
    erased_ids = {e["record_id"] for e in feed if e.get("erased")}
    assert not erased_ids & set(existing)


def test_quarantined_lines_that_are_not_json_are_matched_by_their_cells(
    subject_tenant: SubjectTenant,
) -> None:
    """A line that could not be read is kept as its text: a subject that is a whole JSON
    string in it (or a CSV cell of it) is found; a subject inside a longer value is not."""
    body = (
        f'{{"order_id": "A-1", "amount": 1, "customer-email": "{ADA}"}}\n'
        f'{{"order_id": "A-2", "customer-email": "{ADA}", "amount": \n'
        f'{{"order_id": "A-3", "amount": "x", "customer-email": "not-{ADA}"}}\n'
    )
    uploaded = subject_tenant.upload(
        body, content_type="application/x-ndjson", file_name="o.ndjson"
    )
    assert uploaded["records_rejected"] == 2, uploaded
    done = subject_tenant.erased(ADA)
    assert (done["counts"]["records"], done["counts"]["quarantined_rows"]) == (1, 1)
    rows = subject_tenant.client.get(
        f"/platform/v1/transactions/{uploaded['transaction_id']}/quarantine",
        headers=subject_tenant.headers,
    ).json()["data"]
    assert [row["line"] for row in rows] == [3]


def test_a_preview_says_when_a_subject_is_suppressed(subject_tenant: SubjectTenant) -> None:
    subject_tenant.erased(ADA, suppress=True)
    response = subject_tenant.client.post(
        f"/admin/v1/clients/{subject_tenant.client_id}/datasets/orders/transforms/preview",
        json={"records": [customer(1, ADA), customer(2, BOB)]},
        headers=subject_tenant.admin,
    )
    assert response.status_code == 200, response.text
    assert [r["outcome"] for r in response.json()["results"]] == ["suppressed", "stored"]


def test_a_token_limited_to_one_client_erases_and_suppresses_within_it(
    subject_tenant: SubjectTenant, client: TestClient, admin: dict[str, str]
) -> None:
    """Two clients of one company hold Ada; a token that may use only the first erases
    and suppresses her there, and the second client's records are left as they were."""
    from tests.factories import create_ingestion_client
    from tests.ingestion.conftest import register_dataset

    second = create_ingestion_client(client, admin, subject_tenant.company_id)
    register_dataset(client, admin, second, options={"subject_key": "/customer-email"})
    subject_tenant.push(customer(1, ADA))
    assert subject_tenant.push(customer(2, ADA), client_id=second).status_code == 200
    limited = create_credential(
        client,
        admin,
        subject_tenant.company_id,
        scopes=["data:erase"],
        client_ids=[subject_tenant.client_id],
    )
    headers = auth(get_token(client, limited["client_id"], limited["client_secret"]))
    made = client.post(
        "/platform/v1/erasures", json={"subjects": [ADA], "suppress": True}, headers=headers
    )
    assert made.status_code == 202, made.text
    run_erasures(client)
    done = client.get(f"/platform/v1/erasures/{made.json()['erasure_id']}", headers=headers)
    assert done.status_code == 200 and done.json()["counts"]["records"] == 1
    assert subject_tenant.all_records() == []
    theirs = client.get(
        "/platform/v1/data",
        params={"client_id": second, "dataset_id": "orders"},
        headers=subject_tenant.headers,
    ).json()["data"]
    assert [r["data"]["customer-email"] for r in theirs] == [ADA]
    # suppressed in the first client only
    again = subject_tenant.push(customer(3, ADA), client_id=second).json()
    assert again["records_accepted"] == 1
    assert subject_tenant.push(customer(4, ADA)).json()["records_accepted"] == 0
    listed = client.get("/platform/v1/erasures", headers=headers).json()["data"]
    assert [e["erasure_id"] for e in listed] == [made.json()["erasure_id"]]


def _plans_of_removals(tenant: SubjectTenant, table: str, *subjects: str) -> list[str]:
    """Erase `subjects`; the plan of each `DELETE FROM table` the erasure ran."""
    db = _runtime(tenant).db
    removals: list[tuple[str, Any]] = []

    def seen(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if statement.lstrip().startswith(f"DELETE FROM {table}"):
            removals.append((statement, params))

    event.listen(db.engine, "before_cursor_execute", seen)
    try:
        tenant.erased(*subjects)
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)
    plans = []
    with db.engine.connect() as connection:
        raw = connection.connection.dbapi_connection
        assert raw is not None
        cursor = raw.cursor()
        postgresql = connection.dialect.name == "postgresql"
        for statement, params in removals:
            explain = "EXPLAIN " if postgresql else "EXPLAIN QUERY PLAN "
            cursor.execute(explain + statement, params)
            plans.append("\n".join(str(row[-1]) for row in cursor.fetchall()))
        connection.rollback()
    assert plans
    return plans


def test_an_erasure_finds_its_records_by_the_subject_index_alone(
    subject_tenant: SubjectTenant,
) -> None:
    """The statement that removes a subject's records probes `ix_records_subject`, not
    the dataset's whole range of `ix_records_dataset_pk` (a planner without statistics
    may take either: both begin with the dataset), and deletes what it found by the
    records' key: without statistics, PostgreSQL took `seq` for a column of repeats and
    read the whole table to join it (0.5 s a batch in a million records)."""
    for start in range(0, 2000, 500):
        subject_tenant.push([customer(n, f"p{n}@example.com") for n in range(start, start + 500)])
    for plan in _plans_of_removals(subject_tenant, "records", "p7@example.com"):
        assert "ix_records_subject" in plan, plan
        assert not re.search(r"Seq Scan on records\b|SCAN records\b", plan), plan
        if "Index Cond" in plan:  # PostgreSQL: each found deleted by its whole key
            assert re.search(r"Index Cond: \(\(seq = .*\) AND \(company_id = ", plan), plan


def test_an_erasure_removes_quarantined_rows_by_their_whole_key(
    subject_tenant: SubjectTenant,
) -> None:
    """The rows an erasure found are deleted by `seq` and the company (the primary key on
    PostgreSQL), not by `seq` alone, which a planner without statistics answers with a
    read of the whole table when the rows are many."""
    csv = CSV_HEADER + "".join(
        f"Q-{n},q{n}@example.com,not-a-number,{n},true,2026-11-22T10:00:00Z\n" for n in range(50)
    )
    assert subject_tenant.upload(csv)["records_rejected"] == 50
    plans = _plans_of_removals(subject_tenant, "quarantined_rows", "q7@example.com")
    for plan in plans:
        assert not re.search(r"Seq Scan on quarantined_rows\b|SCAN quarantined_rows\b", plan)
        if "Index Cond" in plan:
            assert re.search(r"Index Cond: \(\(seq = .*\) AND \(company_id = ", plan), plan


def test_many_subjects_are_removed_a_few_digests_a_statement_across_batches(
    subject_tenant: SubjectTenant, monkeypatch: Any
) -> None:
    """Seven people of three records each, erased two digests a statement and two
    records a transaction (so a statement's digests are probed again in the next):
    every record of theirs goes, counted once, and nobody else's."""
    monkeypatch.setattr(runner, "RECORD_BATCH", 2)
    monkeypatch.setattr(runner.ingestion, "SUBJECT_PROBES", 2)
    people = [f"person{n}@example.com" for n in range(8)]
    subject_tenant.push([customer(10 * i + k, p) for i, p in enumerate(people) for k in range(3)])
    done = subject_tenant.erased(*people[:7])
    assert done["status"] == "completed", done
    assert done["counts"]["records"] == 21
    assert _emails(subject_tenant.all_records()) == [people[7]] * 3


def _another_writer_goes_on(runtime: Runtime, erasure_id: str) -> bool:
    """Whether a writer beside the erasure could write at once: SQLite's one write lock
    is free, and on PostgreSQL the erasure's own row is not locked."""
    if runtime.db.engine.dialect.name == "sqlite":
        other = sqlite3.connect(str(runtime.db.engine.url.database), timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.rollback()
            return True
        except sqlite3.OperationalError:  # "database is locked"
            return False
        finally:
            other.close()
    with runtime.db.engine.connect() as connection:
        try:
            connection.execute(
                select(Erasure.id)
                .where(Erasure.id == uuid.UUID(erasure_id))
                .with_for_update(nowait=True)
            )
        except OperationalError:  # lock_not_available
            return False
        finally:
            connection.rollback()
    return True


def test_an_erasure_rests_between_its_steps_with_no_write_held(
    subject_tenant: SubjectTenant, monkeypatch: Any
) -> None:
    """HEADWATER_ERASURE_DUTY paces an erasure: it rests between its steps so that other
    writers keep their speed, which they can only if the rest holds nothing (SQLite's
    write transaction holds its one write lock from its first statement)."""
    _ada_everywhere(subject_tenant)
    runtime = _runtime(subject_tenant)
    queued = subject_tenant.erase(ADA)
    free: list[bool] = []
    real = runner._Run.pace

    def pace(self: Any) -> None:
        free.append(_another_writer_goes_on(runtime, queued["erasure_id"]))
        real(self)

    monkeypatch.setattr(runner._Run, "pace", pace)
    run_erasures(subject_tenant.client)
    assert subject_tenant.erasure(queued["erasure_id"])["status"] == "completed"
    assert len(free) >= 4 and all(free), free  # records, rows, files, exports, the end
