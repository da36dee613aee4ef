"""Health, readiness, metrics and the self-hosted interactive docs page."""

from __future__ import annotations

from pathlib import Path

import structlog
import swagger_ui_bundle
from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from headwater.deps import RuntimeDep
from headwater.errors import ServiceUnavailable, is_unreachable
from headwater.ops import metrics as prom

log = structlog.get_logger("headwater.ops")

router = APIRouter(tags=["operations"])

SWAGGER_DIR = Path(swagger_ui_bundle.swagger_ui_path)
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
async def readyz(runtime: RuntimeDep) -> dict[str, object]:
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
    "/metrics", summary="Prometheus metrics", responses={200: {"content": {"text/plain": {}}}}
)
async def metrics() -> Response:
    body, content_type = prom.render()
    return Response(body, media_type=content_type)


@router.get("/docs", include_in_schema=False)
async def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="Headwater API",
        swagger_js_url="/docs/assets/swagger-ui-bundle.js",
        swagger_css_url="/docs/assets/swagger-ui.css",
        swagger_favicon_url="/docs/assets/favicon-32x32.png",
    )
