"""create_app(): routers, error handlers, middleware, lifespan."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.requests import Request

from headwater import errors, worker
from headwater.activity import router as activity_router
from headwater.config import Settings, get_settings
from headwater.console import router as console_router
from headwater.exports import router as exports_router
from headwater.files import router as files_router
from headwater.files.stores import UPLOAD_PATH
from headwater.identity import router as identity_router
from headwater.identity import token_router
from headwater.identity.errors import OAuthError
from headwater.inbox import router as inbox_router
from headwater.ingestion import router as ingestion_router
from headwater.ingestion import transform_router
from headwater.kit import memory
from headwater.ops import router as ops_router
from headwater.ops.logs import configure_logging
from headwater.ops.middleware import BodyLimitMiddleware, ObservabilityMiddleware
from headwater.ops.openapi import build_openapi
from headwater.runtime import build_runtime, start
from headwater.sftp import router as sftp_router
from headwater.subjects import router as subjects_router
from headwater.web import problems
from headwater.webhooks import router as webhooks_router
from headwater.workflows import router as workflows_router

VERSION = "0.1.0"


async def _oauth_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OAuthError)
    return JSONResponse(
        {"error": exc.error, "error_description": exc.description},
        status_code=exc.status,
        headers={**exc.headers, **token_router.NO_STORE},
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(level=settings.log_level, json=settings.log_json)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = build_runtime(settings)
        app.state.runtime = runtime
        await run_in_threadpool(start, runtime)
        with memory.collecting_less():
            stop = asyncio.Event()
            tasks = [asyncio.create_task(worker.refresh_revocations_forever(runtime, stop))]
            tasks += runtime.listen(stop)
            if settings.worker_enabled:
                tasks += worker.start_jobs(runtime, stop, file_workers=settings.file_workers)
            try:
                yield
            finally:
                await worker.stop_jobs(runtime, stop, tasks)
                await runtime.close()

    app = FastAPI(
        title="Headwater API",
        version=VERSION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    if settings.embedded_idp_enabled:
        app.include_router(token_router.grants)
        app.include_router(token_router.router)
    # Routes are matched in order, one pattern after another: the hot paths (whoami,
    # the data API with push first, the activity search, the workflow API's lists) come
    # before the operator API. The activity search came after 80 patterns, and matching
    # them was 15% of its CPU time.
    app.include_router(identity_router.token_info)
    app.include_router(ingestion_router.router)
    app.include_router(activity_router.router)
    app.include_router(workflows_router.router)
    app.include_router(files_router.router)
    app.include_router(identity_router.router)
    app.include_router(ingestion_router.admin)
    app.include_router(transform_router.router)
    app.include_router(sftp_router.router)
    app.include_router(inbox_router.router)
    app.include_router(webhooks_router.router)
    app.include_router(exports_router.router)
    app.include_router(subjects_router.router)
    app.include_router(files_router.uploads)
    app.include_router(exports_router.downloads)
    app.include_router(files_router.hooks)
    app.include_router(ops_router.router)
    app.mount("/docs/assets", ops_router.docs_assets, name="docs-assets")
    app.include_router(console_router.router)
    app.mount("/console/static", console_router.static, name="console-static")

    app.add_exception_handler(OAuthError, _oauth_error)
    app.add_exception_handler(errors.DomainError, problems.handle_domain_error)
    app.add_exception_handler(HTTPException, problems.handle_http_exception)
    app.add_exception_handler(RequestValidationError, problems.handle_request_validation)
    app.add_exception_handler(SQLAlchemyError, problems.handle_unexpected)
    app.add_exception_handler(Exception, problems.handle_unexpected)

    app.add_middleware(
        BodyLimitMiddleware, max_bytes=settings.max_body_bytes, exempt=(UPLOAD_PATH,)
    )
    app.add_middleware(ObservabilityMiddleware)
    app.openapi = lambda: build_openapi(app, audience=settings.audience)  # type: ignore[method-assign]
    return app
