"""The console (contract 18) as one router under `/console`, and its static files."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.staticfiles import StaticFiles

from headwater.console.deps import HERE
from headwater.console.pages import (
    activity,
    channels,
    datasets,
    operators,
    records,
    signing,
    traffic,
    webhooks,
)

router = APIRouter(include_in_schema=False)
for area in (signing, traffic, datasets, webhooks, records, activity, operators, channels):
    router.include_router(area.router)

static = StaticFiles(directory=HERE / "static")
