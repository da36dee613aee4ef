"""Token endpoint and token verification throughput (issue 2's benchmark).

Starts Headwater as the README documents for production (PostgreSQL, one API process
per core) and drives it with wrk at concurrency 32:

  (a) POST /oauth/token                      requests/s (argon2id check + RS256 signing)
  (b) GET /platform/v1/whoami with a token   requests/s (verification, no database)
  (c) GET /healthz, no token                 requests/s (same middleware stack, no auth)

and prints b/c: the share of unauthenticated throughput kept once every request carries a
token to verify. Target: b/c >= 0.85.

    uv run python bench/auth.py [--seconds 20] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os

import httpx

from bench.common import (
    OPERATOR,
    SECRET,
    bench_database,
    production_server,
    report,
    request_script,
    run_wrk,
    server_env,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()

    with bench_database("headwater_bench_auth") as database_url:
        env = server_env(database_url)
        with production_server(env, args.workers) as url:
            body = {"client_id": OPERATOR, "client_secret": SECRET, "audience": "headwater-api"}
            token = httpx.post(url + "/oauth/token", json=body).json()["access_token"]
            for _ in range(args.workers * 4):  # every worker holds the keys before timing
                assert (
                    httpx.get(
                        url + "/platform/v1/whoami", headers={"Authorization": f"Bearer {token}"}
                    ).status_code
                    == 200
                )
            common = {"seconds": args.seconds, "connections": args.connections}
            bearer = {"Authorization": f"Bearer {token}"}
            token_request = request_script(
                method="POST", body=json.dumps(body), headers={"Content-Type": "application/json"}
            )
            results = {
                "a_token": run_wrk(url + "/oauth/token", script=token_request, **common),
                "b_verified": run_wrk(
                    url + "/platform/v1/whoami", script=request_script(headers=bearer), **common
                ),
                "c_unauthenticated": run_wrk(url + "/healthz", **common),
            }
    print(
        f"workers={args.workers} connections={args.connections} seconds={args.seconds} "
        f"database=postgresql cores={os.cpu_count()}"
    )
    labels = {
        "a_token": "(a) POST /oauth/token",
        "b_verified": "(b) GET /platform/v1/whoami (Bearer)",
        "c_unauthenticated": "(c) GET /healthz (no auth)",
    }
    for key, result in results.items():
        print(report(labels[key], result))
    ratio = (
        results["b_verified"].requests_per_second / results["c_unauthenticated"].requests_per_second
    )
    print(f"b/c = {ratio:.3f}  (target >= 0.85: {'met' if ratio >= 0.85 else 'NOT met'})")
    if any(r.non_2xx for r in results.values()):
        raise SystemExit("some requests failed; the figures above are not valid")


if __name__ == "__main__":
    main()
