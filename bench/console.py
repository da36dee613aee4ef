"""The console's pages at scale (issue 39): every page's server time, p95, on PostgreSQL.

Loads one company with 1,000,000 records (1,000 pushes of 1,000 through the API, which
keeps the records' count), 100,000 more transactions spread over the last 7 days (copies
of a pushed one, by SQL: the overview's charts read them), and 10,000,000 chained
activity entries over 10 companies, the measured one among them (COPY, as
`bench.activity` loads them). Then, signed in as a browser is, it GETs each page
`--requests` times on one keep-alive connection, and beside it, in alternating rounds
(A B A B), the API's JSON read of the same data: the bare service doing the same job,
and GET /healthz, the floor of any request. The time is the client's, on loopback:
server time plus well under a millisecond.

Target: every page's p95 under 300 ms.

    uv run python -m bench.console [--records 1000000] [--transactions 100000]
                                   [--entries 10000000] [--requests 40] [--rounds 2]
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import uuid
from typing import Any

import httpx
import psycopg

from bench.activity import load_activity
from bench.common import OPERATOR, SECRET, bench_database, production_server, server_env, token

SCHEMA = {
    "type": "object",
    "required": ["order_id", "amount"],
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number"},
        "customer-email": {"type": "string"},
    },
}
COMPANY_SCOPES = ["data:read", "data:write", "webhooks:manage", "activities:read", "data:erase"]
TARGET_MS = 300.0


def _post(http: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    response = http.post(path, json=body, headers=headers)
    assert response.status_code in (200, 201, 202), response.text
    return response.json()


def load(url: str, database_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The company, its records and transactions, the activity entries; what to read."""
    admin = {"Authorization": "Bearer " + token(url, OPERATOR, SECRET)}
    with httpx.Client(base_url=url, timeout=120) as http:
        companies = [
            uuid.UUID(_post(http, "/admin/v1/companies", {"name": f"bench {i}"}, admin)["id"])
            for i in range(10)
        ]
        company = companies[0]
        # the entries first: they take the chains' first places (the dataset's
        # registration and the rest of the set-up follow them in company 0's chain)
        seconds_entries = load_activity(database_url, companies, args.entries)
        _post(
            http, f"/admin/v1/companies/{company}/clients", {"client_id": "crm", "name": "C"}, admin
        )
        _post(
            http,
            "/admin/v1/clients/crm/datasets",
            {"dataset_id": "orders", "schema": SCHEMA},
            admin,
        )
        credential = _post(
            http,
            f"/admin/v1/companies/{company}/credentials",
            {"name": "bench", "scopes": COMPANY_SCOPES},
            admin,
        )
        bearer = {
            "Authorization": "Bearer "
            + token(url, credential["client_id"], credential["client_secret"])
        }
        began = time.perf_counter()
        batch = 1000
        last: dict[str, Any] = {}
        for n in range(args.records // batch):
            records = [
                {"order_id": f"A-{n}-{i}", "amount": i, "customer-email": f"c{i}@example.com"}
                for i in range(batch)
            ]
            last = _post(
                http,
                "/platform/v1/data/json",
                {"client_id": "crm", "dataset_id": "orders", "data": records},
                bearer,
            )
        rejected = http.post(
            "/platform/v1/data/json",
            json={"client_id": "crm", "dataset_id": "orders", "data": {"order_id": "x"}},
            headers=bearer,
        ).json()
        pushed = time.perf_counter() - began
        hook = _post(
            http,
            "/platform/v1/webhook_endpoints",
            {"url": "https://192.88.99.1/never", "event_types": ["*"]},
            bearer,
        )
        http.patch(
            f"/platform/v1/webhook_endpoints/{hook['id']}",
            json={"status": "disabled"},
            headers=bearer,
        )
    began = time.perf_counter()
    with psycopg.connect(database_url) as conn:
        columns = [
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'transactions' "
                "AND column_name NOT IN ('id', 'created_at', 'feed_pos')"
            )
        ]
        listed = ", ".join(columns)
        # the names come from the catalog, the values are bound
        conn.execute(
            f"INSERT INTO transactions (id, created_at, {listed}) "  # noqa: S608
            f"SELECT gen_random_uuid(), now() - random() * interval '7 days', {listed} "
            "FROM transactions, generate_series(1, %s) "
            "WHERE id IN (%s, %s)",
            (args.transactions // 2, last["transaction_id"], rejected["transaction_id"]),
        )
        conn.commit()
    copied = time.perf_counter() - began
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
    print(
        f"loaded {args.records:,} records in {pushed:.0f} s (pushes of 1,000), "
        f"{args.transactions:,} more transactions in {copied:.1f} s, "
        f"{args.entries:,} activity entries in {seconds_entries:.0f} s"
    )
    return {
        "company": str(company),
        "credential": credential,
        "bearer": bearer,
        "transaction": last["transaction_id"],
        "hook": hook["id"],
    }


def signed_in(url: str, credential: dict[str, str]) -> httpx.Client:
    """A client holding a console session, as a browser would after the sign-in form."""
    http = httpx.Client(base_url=url, timeout=60)
    form = http.get("/console/sign-in")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf
    done = http.post(
        "/console/sign-in",
        data={
            "csrf": csrf.group(1),
            "client_id": credential["client_id"],
            "client_secret": credential["client_secret"],
            "next": "/console",
        },
    )
    assert done.status_code == 303, done.text
    return http


def p95(
    http: httpx.Client, path: str, requests: int, headers: dict[str, str] | None = None
) -> float:
    times = []
    for _ in range(requests):
        began = time.perf_counter()
        response = http.get(path, headers=headers)
        times.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
    return statistics.quantiles(times, n=20)[18]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--transactions", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=10_000_000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with bench_database("headwater_bench_console") as database_url:
        env = server_env(
            database_url, HEADWATER_WORKER_ENABLED="false", HEADWATER_LOG_LEVEL="WARNING"
        )
        with production_server(env, workers=1) as url:
            made = load(url, database_url, args)
            api = httpx.Client(base_url=url, timeout=60)
            user = signed_in(url, made["credential"])
            operator = signed_in(url, {"client_id": OPERATOR, "client_secret": SECRET})
            t, hook, company = made["transaction"], made["hook"], made["company"]
            # (page, its client, the API read of the same data or None)
            pages: list[tuple[str, httpx.Client, str | None]] = [
                ("/console", user, None),
                ("/console/transactions", user, "/platform/v1/transactions"),
                (
                    "/console/transactions?status=rejected",
                    user,
                    "/platform/v1/transactions?status=rejected",
                ),
                (f"/console/transactions/{t}", user, f"/platform/v1/transactions/{t}"),
                ("/console/datasets", user, "/platform/v1/datasets"),
                (
                    "/console/datasets/crm/orders",
                    user,
                    "/platform/v1/datasets/orders?client_id=crm",
                ),
                (
                    "/console/datasets/crm/orders/records",
                    user,
                    "/platform/v1/data?client_id=crm&dataset_id=orders",
                ),
                ("/console/webhooks", user, "/platform/v1/webhook_endpoints"),
                (
                    f"/console/webhooks/{hook}",
                    user,
                    f"/platform/v1/webhook_endpoints/{hook}/deliveries",
                ),
                ("/console/exports", user, "/platform/v1/exports"),
                ("/console/activity", user, None),
                ("/console/activity?resource_type=workflow&action=update", user, None),
                ("/console/erasures", user, "/platform/v1/erasures"),
                ("/console/companies", operator, None),
                (f"/console/companies/{company}", operator, None),
                ("/console/clients/crm/datasets/orders", operator, None),
            ]
            found: dict[str, list[tuple[float, float | None]]] = {path: [] for path, _, _ in pages}
            floor: list[float] = []
            for _ in range(args.rounds):
                floor.append(p95(api, "/healthz", args.requests))
                for path, client, twin in pages:
                    page_ms = p95(client, path, args.requests)
                    twin_ms = p95(api, twin, args.requests, made["bearer"]) if twin else None
                    found[path].append((page_ms, twin_ms))
            user.close()
            operator.close()
            api.close()
    print(f"\nGET /healthz p95: {statistics.median(floor):.1f} ms (the floor of a request)")
    print(f"{'page':64} {'p95 ms':>8} {'API p95 ms':>11}  (median of {args.rounds} rounds)")
    worst = 0.0
    for path, results in found.items():
        page_ms = statistics.median(r[0] for r in results)
        twins = [r[1] for r in results if r[1] is not None]
        twin = f"{statistics.median(twins):11.1f}" if twins else f"{'-':>11}"
        worst = max(worst, page_ms)
        print(f"{path[:64]:64} {page_ms:8.1f} {twin}")
    verdict = "met" if worst < TARGET_MS else "NOT met"
    print(f"\nslowest page p95 {worst:.1f} ms; target under {TARGET_MS:.0f} ms: {verdict}")


if __name__ == "__main__":
    main()
