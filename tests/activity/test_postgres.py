"""PostgreSQL specifics: per-company locking of the chain, and index plans for search."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, text
from sqlalchemy.exc import OperationalError

from headwater import migrations
from headwater.activity import chain
from headwater.activity import service as activity
from headwater.activity.models import ActivityEntry
from headwater.activity.schemas import ActivitySearch
from headwater.config import Settings
from headwater.db import Database
from headwater.identity.models import Company
from headwater.kit.clock import utcnow_ms
from tests.factories import database, fresh_pg_database
from tests.tenants import Tenant, record_entry


@pytest.fixture(scope="module")
def pg(settings: Settings, backend: str, client: Any) -> Iterator[Database]:
    """The test PostgreSQL database, migrated (by the app `client` starts)."""
    if backend != "postgresql":
        pytest.skip("row locks and query plans are PostgreSQL's")
    db = Database(settings, role="api")
    yield db
    db.dispose()


def test_writes_for_different_companies_do_not_wait(
    pg: Database, tenant: Tenant, other_tenant: Tenant
) -> None:
    with pg.unit_of_work() as holder:
        record_entry(holder, tenant)  # holds tenant's chain head until it commits
        with pg.unit_of_work() as other:
            other.execute(text("SET LOCAL lock_timeout = '2s'"))
            record_entry(other, other_tenant)
            other.commit()  # another company: no wait
        with pg.unit_of_work() as same, pytest.raises(OperationalError, match="lock timeout"):
            same.execute(text("SET LOCAL lock_timeout = '200ms'"))
            record_entry(same, tenant)  # the same company: waits for the holder
        holder.commit()
    for t in (tenant, other_tenant):
        with pg.unit_of_work() as session:
            assert activity.verify(session, company_id=uuid.UUID(t.company_id)).finding is None


def test_concurrent_writes_to_one_company_keep_one_chain(
    tenant: Tenant, settings: Settings
) -> None:
    """On both backends: parallel requests append one after another, never fork the chain."""
    errors: list[str] = []

    def write(i: int) -> None:
        response = tenant.client.post(
            "/app/v1/workflow_categories", json={"name": f"c{i}"}, headers=tenant.headers
        )
        if response.status_code != 201:
            errors.append(response.text)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with database(settings) as db, db.unit_of_work() as session:
        result = activity.verify(session, company_id=uuid.UUID(tenant.company_id))
    assert result.finding is None and result.head.count == 16


SHAPES: dict[str, dict[str, Any]] = {
    "newest first": {},
    "resource_id": {"filter": {"resource_id": "RESOURCE"}},
    "author_id + range": {
        "filter": {
            "author_id": "AUTHOR",
            "timestamp": {"$gte": "2026-01-01T00:00:00Z", "$lt": "2026-06-01T00:00:00Z"},
        }
    },
    "type + action + range": {
        "filter": {
            "resource_type": "workflow",
            "action": "update",
            "timestamp": {"$gt": "2026-01-01T00:00:00Z"},
        }
    },
    "action": {"filter": {"action": "delete"}},
    "resource_type in": {"filter": {"resource_type": {"$in": ["workflow", "dataset"]}}},
}


@contextmanager
def _own_database(settings: Settings, prefix: str) -> Iterator[Database]:
    """A migrated PostgreSQL database of its own: the plans checked here follow the
    statistics, which the session database's other tests' companies and entries change."""
    with fresh_pg_database(prefix) as (_, url):
        own = settings.model_copy(update={"database_url": url})
        migrations.upgrade(own)
        db = Database(own, role="api")
        try:
            yield db
        finally:
            db.dispose()


def _crowd(db: Database, *, small_companies: int = 0) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """60,000 entries over 30 companies (chain hashes are not the point here), and
    `small_companies` more with one entry each."""
    companies = [uuid.uuid4() for _ in range(30)]
    small = [uuid.uuid4() for _ in range(small_companies)]
    authors = [uuid.uuid4() for _ in range(20)]
    resources = [uuid.uuid4() for _ in range(500)]
    start = utcnow_ms() - timedelta(days=300)
    types = ["workflow", "workflow_task", "workflow_category", "dataset"]
    actions = ["create", "update", "update", "delete"]

    def entry(i: int, company: uuid.UUID, seq: int, author: uuid.UUID) -> dict[str, Any]:
        return {
            "id": uuid.uuid4(),
            "company_id": company,
            "seq": seq,
            "resource_type": types[i % 4],
            "resource_id": resources[i % 500],
            "author_id": author,
            "action": actions[(i // 4) % 4],
            "before": None,
            "after": {"i": i},
            "timestamp": start + timedelta(minutes=7 * i),
            "prev_hash": chain.GENESIS,
            "hash": chain.GENESIS,
        }

    with db.unit_of_work() as session:
        session.execute(
            insert(Company),
            [{"id": c, "name": "bulk", "created_at": start} for c in companies + small],
        )
        rows = [entry(i, companies[i % 30], i // 30 + 1, authors[i % 20]) for i in range(60_000)]
        rows += [entry(i, company, 1, uuid.uuid4()) for i, company in enumerate(small)]
        for offset in range(0, len(rows), 10_000):
            session.execute(insert(ActivityEntry), rows[offset : offset + 10_000])
        session.commit()
        # statistics of every row, not of a random sample of 30,000 (the default target):
        # with a sample, the plans the tests check varied from run to run
        session.execute(text("SET LOCAL default_statistics_target = 1000"))
        session.execute(text("ANALYZE activity_entries"))
        session.commit()
    # vacuumed, as autovacuum keeps a table on any server run as docs/operations.md says
    # (this machine's runs without it): an index-only scan is costed by the pages the
    # visibility map marks, and with none marked it cost what a scan of the company's time
    # index filtered by author does, which a plan made once chose beside 3,000 small
    # companies (where one company's estimate falls to a row)
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM activity_entries"))
    return companies[0], authors[0], resources[0]


@pytest.fixture(scope="module")
def crowd_pg(pg: Database, settings: Settings) -> Iterator[Database]:
    with _own_database(settings, "hw_crowd") as db:
        yield db


@pytest.fixture(scope="module")
def crowded(crowd_pg: Database) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    return _crowd(crowd_pg)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_filtered_searches_use_indexes(crowd_pg: Database, crowded: Any, shape: str) -> None:
    company, author, resource = crowded
    body = json.loads(
        json.dumps(SHAPES[shape])
        .replace('"RESOURCE"', f'"{resource}"')
        .replace('"AUTHOR"', f'"{author}"')
    )
    statements = activity.search_statements(
        company_id=company, query=ActivitySearch.model_validate(body)
    )
    with crowd_pg.unit_of_work() as session:
        for query in (statements.page, statements.count):
            query = query.params(statements.params)
            sql = str(
                query.compile(
                    dialect=session.get_bind().dialect, compile_kwargs={"literal_binds": True}
                )
            )
            plan = "\n".join(session.execute(text("EXPLAIN " + sql)).scalars())
            assert "Seq Scan on activity_entries" not in plan, plan
            assert "activity_entries" in plan


def test_searches_on_the_event_loop_answer_what_a_read_session_answers(
    crowd_pg: Database, crowded: Any
) -> None:
    """Issue 24: on PostgreSQL the API runs a search on the event loop, from statements
    compiled to text; every shape, page and sort answers the same bytes as `search` in a
    read session (the path SQLite and `$in` filters take), totals included."""
    company, author, resource = crowded
    bodies = [
        json.loads(
            json.dumps(shape)
            .replace('"RESOURCE"', f'"{resource}"')
            .replace('"AUTHOR"', f'"{author}"')
        )
        for shape in SHAPES.values()
    ]
    bodies += [
        {"page": 3, "page_size": 7, "sort_by": "action", "sort_direction": "asc"},
        {"page": 99_999, "page_size": 100},  # past the end: no rows, the total still
        {"filter": {"author_id": str(author)}, "page": 2, "page_size": 50},
    ]

    async def on_loop() -> list[list[bytes]]:
        # six rounds: psycopg prepares a statement on its fifth run, and from then on the
        # shapes with an index of their own run a plan made once for any values
        try:
            return [
                [
                    await activity.search_async(
                        crowd_pg, company_id=company, query=ActivitySearch.model_validate(body)
                    )
                    for body in bodies
                ]
                for _ in range(6)
            ]
        finally:
            await crowd_pg.close_loop_reads()

    rounds = asyncio.run(on_loop())
    with crowd_pg.read_session() as session:
        expected = [
            activity.search(session, company_id=company, query=ActivitySearch.model_validate(b))
            for b in bodies
        ]
    assert all(answers == expected for answers in rounds)
    answers = rounds[-1]
    # counted totals (the crowded companies have no chain head: unfiltered totals are 0)
    filtered = [json.loads(a) for a, b in zip(answers, bodies, strict=True) if "filter" in b]
    assert all(page["total_entries"] > 0 and page["data"] for page in filtered)
    assert json.loads(answers[-2])["data"] == []


def test_concurrent_searches_on_the_loop_open_at_most_loop_readers_connections(
    crowd_pg: Database, crowded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    company = crowded[0]
    opened: list[Any] = []
    connect = crowd_pg.connect_async

    async def counted(**options: Any) -> Any:
        opened.append(await connect(**options))
        return opened[-1]

    monkeypatch.setattr(crowd_pg, "connect_async", counted)
    query = ActivitySearch.model_validate({"filter": {"action": "delete"}})

    async def many() -> list[bytes]:
        try:
            return await asyncio.gather(
                *(
                    activity.search_async(crowd_pg, company_id=company, query=query)
                    for _ in range(40)
                )
            )
        finally:
            await crowd_pg.close_loop_reads()

    answers = asyncio.run(many())
    assert len(set(answers)) == 1 and json.loads(answers[0])["total_entries"] > 0
    assert 1 <= len(opened) <= crowd_pg.shares.loop_reads


def test_every_shape_planned_once_has_an_index_of_its_own() -> None:
    """A shape runs a plan made once for any values only if an index holds the company,
    exactly its members and then the sort order: then that index is its best plan,
    whatever the values. The member sets are read from the model's indexes."""
    assert {
        frozenset(),
        frozenset({"resource_id"}),
        frozenset({"author_id"}),
        frozenset({"action"}),
        frozenset({"resource_type", "action"}),
    } == activity._OWN_INDEX
    shape = activity._shape
    for body, once in [
        ({}, True),
        ({"filter": {"resource_id": str(uuid.uuid4())}}, True),
        ({"filter": {"action": "update", "resource_type": "workflow"}}, True),
        (
            {
                "filter": {
                    "author_id": str(uuid.uuid4()),
                    "timestamp": {"$gt": "2026-01-01T00:00:00Z"},
                }
            },
            True,
        ),
        ({"sort_by": "action"}, False),  # sorted by another column: a sort whose cost varies
        ({"filter": {"resource_type": "workflow"}}, False),  # no index of its own
        ({"filter": {"author_id": str(uuid.uuid4()), "action": "create"}}, False),
    ]:
        query = ActivitySearch.model_validate(body)
        assert activity._plan_once(shape(uuid.uuid4(), query)[0]) is once, body


def _generic_plan(
    pg: Database,
    sql: str,
    params: dict[str, Any],
    *,
    setup: Sequence[str] = (),
    analyze: bool = False,
) -> str:
    """The plan a generic loop-read connection makes once for any values of a psycopg
    statement (`%(name)s` parameters), shown for `params` (PREPARE, EXPLAIN EXECUTE),
    after the `setup` statements."""
    names: list[str] = []

    def number(found: re.Match[str]) -> str:
        if found.group(1) not in names:
            names.append(found.group(1))
        return f"${names.index(found.group(1)) + 1}"

    numbered = re.sub(r"%\((\w+)\)s", number, sql).replace("%%", "%")

    async def explain() -> str:
        connection = await pg.connect_async(for_reads=True, generic=True)
        try:
            for statement in setup:
                await connection.execute(statement)
            await connection.execute("PREPARE shape AS " + numbered)
            values = []
            for name in names:
                quoted = await connection.execute(
                    "SELECT quote_literal(%s::text)", (str(params[name]),)
                )
                values.append((await quoted.fetchone())[0])
            explain = "EXPLAIN (ANALYZE) " if analyze else "EXPLAIN "
            plan = await connection.execute(f"{explain}EXECUTE shape({', '.join(values)})")
            return "\n".join(row[0] for row in await plan.fetchall())
        finally:
            await connection.close()

    return asyncio.run(explain())


@pytest.mark.parametrize(
    ("shape", "index"),
    [
        ("newest first", "ix_activity_company_time"),
        ("resource_id", "ix_activity_company_resource"),
        ("author_id + range", "ix_activity_company_author"),
        ("type + action + range", "ix_activity_company_type_action"),
        ("action", "ix_activity_company_action"),
    ],
)
def test_a_plan_made_once_for_any_values_reads_the_shapes_own_index(
    crowd_pg: Database, crowded: Any, shape: str, index: str
) -> None:
    """Issue 24: the plan PostgreSQL makes once for a shape with an index of its own
    finds the page's places in that index alone, every condition in the index."""
    company, author, resource = crowded
    body = json.loads(
        json.dumps(SHAPES[shape])
        .replace('"RESOURCE"', f'"{resource}"')
        .replace('"AUTHOR"', f'"{author}"')
    )
    found, params = activity._shape(company, ActivitySearch.model_validate(body))
    assert activity._plan_once(found)
    plan = _generic_plan(crowd_pg, activity._as_text(found)[0], params)
    assert f"Index Only Scan Backward using {index} on activity_entries" in plan, plan
    assert "Seq Scan on activity_entries" not in plan and "Filter" not in plan, plan
    # the page's 20 rows are looked up by key; a merge or hash join would read every
    # entry the filter matches, which the plan cannot rule out, not knowing the page size
    assert "Nested Loop" in plan and " Join" not in plan, plan


def test_the_author_shape_keeps_its_index_beside_many_small_companies(
    pg: Database, settings: Settings
) -> None:
    """The same check as above for the author shape, with 3,000 companies of one entry
    beside the 30 crowded ones: the estimate for one company falls to a row, and the plan
    made once still reads the author index (an index-only scan), not the company's whole
    time range filtered by author. It did not on a table never vacuumed (`_crowd`)."""
    with _own_database(settings, "hw_small") as db:
        company, author, _ = _crowd(db, small_companies=3000)
        body = json.loads(
            json.dumps(SHAPES["author_id + range"]).replace('"AUTHOR"', f'"{author}"')
        )
        found, params = activity._shape(company, ActivitySearch.model_validate(body))
        plan = _generic_plan(db, activity._as_text(found)[0], params)
    assert "Index Only Scan Backward using ix_activity_company_author" in plan, plan


def test_loop_reads_planned_once_are_never_compiled_to_machine_code(
    crowd_pg: Database, crowded: Any
) -> None:
    """A plan made once guesses a large cost (it does not know the page size), and with
    JIT on, PostgreSQL compiled such a page's plan on every run: 5.3 ms of CPU for a
    0.1 ms read at 200,000 entries a company. Here every cost passes the JIT threshold."""
    found, params = activity._shape(crowded[0], ActivitySearch.model_validate({}))
    sql = activity._as_text(found)[0]
    plan = _generic_plan(crowd_pg, sql, params, setup=["SET jit_above_cost = 0"], analyze=True)
    assert "Index Only Scan" in plan and "JIT" not in plan, plan
    # the same with JIT allowed, where this PostgreSQL has it: compiled
    allowed = _generic_plan(
        crowd_pg, sql, params, setup=["SET jit_above_cost = 0", "SET jit = on"], analyze=True
    )
    if "JIT" not in allowed:
        pytest.skip("this PostgreSQL has no JIT")


def test_loop_reads_of_both_kinds_share_loop_readers_connections(
    crowd_pg: Database, crowded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Searches planned once and searches planned for their values, at once: each kind
    of connection plans as it says, and both together stay within their share."""
    company = crowded[0]
    opened: list[tuple[bool, Any]] = []
    most: list[int] = [0]  # connections open at once, at most
    connect = crowd_pg.connect_async

    async def counted(**options: Any) -> Any:
        opened.append((options.get("generic", False), await connect(**options)))
        most[0] = max(most[0], sum(1 for _, c in opened if not c.closed))
        return opened[-1][1]

    monkeypatch.setattr(crowd_pg, "connect_async", counted)
    once = ActivitySearch.model_validate({"filter": {"action": "delete"}})
    planned = ActivitySearch.model_validate({"filter": {"resource_type": "workflow"}})

    async def many() -> tuple[list[bytes], list[tuple[bool, str]]]:
        try:
            answers = await asyncio.gather(
                *(
                    activity.search_async(crowd_pg, company_id=company, query=q)
                    for _ in range(20)
                    for q in (once, planned)
                )
            )
            modes = []
            for generic, connection in opened:
                if not connection.closed:
                    found = await (await connection.execute("SHOW plan_cache_mode")).fetchone()
                    modes.append((generic, found[0]))
            return answers, modes
        finally:
            await crowd_pg.close_loop_reads()

    answers, modes = asyncio.run(many())
    assert len(set(answers[0::2])) == 1 and len(set(answers[1::2])) == 1
    assert {generic for generic, _ in opened} == {True, False}
    assert sum(1 for _, c in opened if not c.closed) == 0  # close_loop_reads closed them all
    assert modes and all(
        mode == ("force_generic_plan" if generic else "force_custom_plan")
        for generic, mode in modes
    )
    assert 2 <= most[0] <= crowd_pg.shares.loop_reads


def test_a_loop_read_connection_that_fails_to_open_gives_back_its_place(
    crowd_pg: Database, crowded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Searches whose connection cannot be opened fail with the engine's error (the API's
    503) and take no place of their share with them: afterwards searches succeed, and
    a search of the other kind finds room beside an idle connection instead of closing
    it, which it would do were the failed attempts still counted."""
    company = crowded[0]
    failures = [crowd_pg.shares.loop_reads * 2]  # attempts left to fail, more than there are places
    opened: list[tuple[bool, Any]] = []
    connect = crowd_pg.connect_async

    async def flaky(**options: Any) -> Any:
        if failures[0] > 0:
            failures[0] -= 1
            raise OperationalError("connect", {}, Exception("connection refused"))
        opened.append((options.get("generic", False), await connect(**options)))
        return opened[-1][1]

    monkeypatch.setattr(crowd_pg, "connect_async", flaky)
    once = ActivitySearch.model_validate({"filter": {"action": "delete"}})
    planned = ActivitySearch.model_validate({"filter": {"resource_type": "workflow"}})

    async def run() -> tuple[list[Any], bytes, bytes, bool]:
        try:
            refused = await asyncio.gather(
                *(
                    activity.search_async(crowd_pg, company_id=company, query=once)
                    for _ in range(crowd_pg.shares.loop_reads * 2)
                ),
                return_exceptions=True,
            )
            first = await activity.search_async(crowd_pg, company_id=company, query=planned)
            second = await activity.search_async(crowd_pg, company_id=company, query=once)
            return refused, first, second, opened[0][1].closed
        finally:
            await crowd_pg.close_loop_reads()

    refused, first, second, custom_closed = asyncio.run(run())
    assert len(refused) == crowd_pg.shares.loop_reads * 2
    assert all(isinstance(error, OperationalError) for error in refused)
    assert json.loads(first)["total_entries"] > 0 and json.loads(second)["total_entries"] > 0
    assert [generic for generic, _ in opened] == [False, True]
    assert not custom_closed  # the failed attempts left the count at 0: room for both
