"""Health, readiness, metrics and the self-hosted interactive docs page."""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Annotated, Protocol

import fastapi_offline
import structlog
from fastapi import APIRouter, Depends, Header
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from headwater.errors import ServiceUnavailable, Unauthorized, is_unreachable
from headwater.ops import metrics as prom
from headwater.web.deps import Services, StrictRoute, get_runtime


class _Pingable(Protocol):
    def ping(self) -> None: ...


class OpsServices(Services, Protocol):
    """The running service's parts that the health checks use."""

    store: _Pingable


OpsRuntime = Annotated[OpsServices, Depends(get_runtime)]

log = structlog.get_logger("headwater.ops")


class MetricsTokenRequired(Unauthorized):
    code = "metrics_token_required"

    def __init__(self) -> None:
        super().__init__(
            "/metrics needs `Authorization: Bearer <HEADWATER_METRICS_TOKEN>`.",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )


router = APIRouter(tags=["operations"], route_class=StrictRoute)

# Swagger UI 5 (it reads OpenAPI 3.1, which FastAPI writes), served from the assets the
# fastapi-offline package bundles: the docs page needs no internet access.
SWAGGER_DIR = Path(fastapi_offline.__file__).parent / "static"
docs_assets = StaticFiles(directory=SWAGGER_DIR)


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    """The process answers. Touches nothing else."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness",
    responses={503: {"description": "A dependency cannot be reached; `Retry-After` is set."}},
)
async def readyz(runtime: OpsRuntime) -> dict[str, object]:
    """Ready to serve: the database answers and the file store can be reached."""
    try:
        await run_in_threadpool(runtime.db.ping)
    except Exception as exc:
        if not is_unreachable(exc):
            raise
        raise ServiceUnavailable(
            "The database cannot be reached.",
            headers={"Retry-After": "5"},
            extra={"checks": {"database": "unreachable", "storage": "unknown"}},
        ) from None
    try:
        await run_in_threadpool(runtime.store.ping)
    except Exception as exc:
        log.warning("file store unreachable", error=str(exc).splitlines()[0])
        raise ServiceUnavailable(
            "The file store cannot be reached.",
            headers={"Retry-After": "5"},
            extra={"checks": {"database": "ok", "storage": "unreachable"}},
        ) from None
    return {"status": "ready", "checks": {"database": "ok", "storage": "ok"}}


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    responses={
        200: {"content": {"text/plain": {}}},
        401: {
            "description": "`HEADWATER_METRICS_TOKEN` is set and the request does not carry "
            "it as `Authorization: Bearer <token>`."
        },
    },
)
async def metrics(
    runtime: OpsRuntime,
    authorization: Annotated[
        str | None,
        Header(description="`Bearer <HEADWATER_METRICS_TOKEN>`, when that is set."),
    ] = None,
) -> Response:
    """Prometheus text format. Open when `HEADWATER_METRICS_TOKEN` is unset (then serve it
    on an internal address only); with it set, only to that bearer token."""
    expected = runtime.settings.metrics_token
    if expected is not None:
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), expected.get_secret_value().encode()):
            raise MetricsTokenRequired()
    body, content_type = prom.render()
    return Response(body, media_type=content_type)


@router.get("/docs", include_in_schema=False)
async def docs() -> HTMLResponse:
    """The interactive reference: Swagger UI 5 over /openapi.json, from local assets."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="Headwater API",
        swagger_js_url="/docs/assets/swagger-ui-bundle.js",
        swagger_css_url="/docs/assets/swagger-ui.css",
        swagger_favicon_url="/docs/assets/favicon.png",
        swagger_ui_parameters={"defaultModelsExpandDepth": 0, "tryItOutEnabled": False},
    )
