"""Fuzzing every operation of the service's own /openapi.json with schemathesis, over real
HTTP against a real server on PostgreSQL, with valid tokens.

Each operation gets FUZZ_EXAMPLES generated requests in each mode (default 12, bounded
for CI; `HEADWATER_FUZZ_EXAMPLES=200 pytest tests/reliability/test_fuzz.py` for a long run):
positive (requests the description allows) and negative (requests it forbids), the
latter where something forbidden can be sent at all (`_negatable`).
Checks: no 5xx; the status code is one the description documents; the content type
and the body match the documented response; and a request the description forbids is
refused with a 4xx (`negative_data_rejection`: what found `page_size=19.0`,
`drop_unknown_fields: 0`, unknown members and NUL characters taken).

Not checked: `positive_data_acceptance`, because some refusals cannot be written in a
JSON Schema and are documented in words instead: a reference to a resource that does
not exist (400 `unknown_reference`), step ids unique within a template, a dataset schema
that is not valid draft-06, query parameters the operation does not take (OpenAPI cannot
close a query), and integers past 64 bits or U+0000 inside free-form objects.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from tests.factories import fresh_pg_database
from tests.http_server import ServerProcess
from tests.ingestion.conftest import DataTenant
from tests.reliability.conftest import operator_headers, server_env

# every test here starts server processes (run in scripts/test's second step)
pytestmark = pytest.mark.http

FUZZ_EXAMPLES = int(os.environ.get("HEADWATER_FUZZ_EXAMPLES", "12"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("fuzz")
    unlimited = {
        "HEADWATER_RATE_LIMIT_PER_SECOND": "100000",
        "HEADWATER_RATE_LIMIT_BURST": "100000",
    }
    with fresh_pg_database("hw_fuzz") as (_name, url):
        server = ServerProcess(server_env(data, url, **unlimited), log=data / "server.log")
        try:
            yield _fuzz_tenant(server.start().url)
        finally:
            server.stop()


def _fuzz_tenant(url: str) -> dict[str, Any]:
    """The operator's headers, and a company with an ingestion client and a token that
    holds every company scope."""
    admin = operator_headers(url)
    with httpx.Client(base_url=url, timeout=30) as http:
        company = http.post("/admin/v1/companies", json={"name": "Fuzz"}, headers=admin)
        tenant = DataTenant(http, admin, company.json()["id"])  # type: ignore[arg-type]
        # not webhooks:manage: endpoints' URLs are resolved, and a fuzzer's names must not
        # leave the machine as DNS queries
        scopes = [
            "workflows:read",
            "workflows:write",
            "data:read",
            "data:write",
            "activities:read",
            "events:read",
        ]
        credential = http.post(
            f"/admin/v1/companies/{company.json()['id']}/credentials",
            json={"name": "fuzz", "scopes": scopes},
            headers=admin,
        ).json()
        token = http.post(
            "/oauth/token",
            json={
                "client_id": credential["client_id"],
                "client_secret": credential["client_secret"],
                "audience": "headwater-api",
            },
        ).json()["access_token"]
    return {
        "url": url,
        "admin": admin,
        "company": {"Authorization": f"Bearer {token}"},
        "client_id": tenant.client_id,
    }


def _operations(url: str) -> list[Any]:
    loaded = schemathesis.openapi.from_url(url + "/openapi.json")
    # the test sends valid tokens itself: a generated Authorization header (the bearer
    # scheme's) would be replaced by them, and a case marked negative for it alone would
    # then be a valid request expected to fail
    loaded.config.generation.update(with_security_parameters=False)
    return [result.ok() for result in loaded.get_all_operations()]


# A string parameter's constraint that no request can break where the parameter lies: a
# NUL cannot be sent in a URL's path or in a header. What else a schema may say of it.
NO_NUL = "^[^\\u0000]*$"
WORDS = {"description", "title", "examples", "example"}


def _negatable(operation: Any) -> bool:
    """Whether the description forbids anything that can be sent to the operation: a
    body, a query, or a path or header parameter with a constraint beyond a NUL-free
    string. Without, Hypothesis searched 1.4-2.3 s of CPU for a negative case before
    giving up (`Unsatisfiable`), for 7 of the 12 operations this leaves out."""
    raw = operation.definition.raw
    if "requestBody" in raw:
        return True
    for parameter in raw.get("parameters", []):
        if parameter.get("in") not in ("path", "header"):
            return True
        schema = parameter.get("schema", {})
        strings = schema.get("anyOf", [schema])
        for alternative in strings:
            if alternative.get("type") == "null" and len(strings) > 1:
                continue
            rest = set(alternative) - WORDS - {"type", "pattern"}
            if alternative.get("type") != "string" or rest:
                return True
            if alternative.get("pattern", NO_NUL) != NO_NUL:
                return True
    return False


def _fuzzer(
    operation: Any, headers: dict[str, str], counter: list[int], mode: GenerationMode
) -> Any:
    """A Hypothesis test of one operation; `counter` counts the requests it sends."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def fuzz(case: Any) -> None:
        counter[0] += 1
        case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)

    return fuzz


# Some 35 s on an idle machine, 230 s at load 8 (2026-11-27): past the suite's 120 s,
# which is there to catch a hang, not a long test on a busy machine.
@pytest.mark.timeout(900)
@pytest.mark.long
def test_every_operation_answers_as_documented(fuzz_target: dict[str, Any]) -> None:
    operations = _operations(fuzz_target["url"])
    assert len(operations) > 40  # the whole description, not a part of it
    failures: dict[str, str] = {}
    counter = [0]
    unsatisfiable = 0
    skipped: list[str] = []
    for operation in operations:
        path: str = operation.path
        headers = fuzz_target["admin"] if path.startswith("/admin/") else fuzz_target["company"]
        modes = [GenerationMode.POSITIVE]
        if _negatable(operation):
            modes.append(GenerationMode.NEGATIVE)
        else:
            skipped.append(f"{operation.method.upper()} {path}")
        for mode in modes:
            try:
                _fuzzer(operation, headers, counter, mode)()
            except Unsatisfiable:
                # nothing can be sent that the description forbids, though `_negatable`
                # saw a constraint: no negative case to try
                assert mode is GenerationMode.NEGATIVE, operation.path
                unsatisfiable += 1
            except Exception as exc:  # every operation runs; failures are reported together
                failures[f"{operation.method.upper()} {path} ({mode.value})"] = str(exc)[:2000]
    print(
        f"fuzzed {len(operations)} operations with {counter[0]} generated requests; "
        f"nothing to negate in {skipped}, found so in {unsatisfiable} more"
    )
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
    # most operations had negative cases
    assert len(skipped) + unsatisfiable < len(operations) / 4
    assert counter[0] >= len(operations) * 3
