"""Activity log search (interface document 4.8; contract section 8)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from headwater.activity import service
from headwater.activity.schemas import ActivityEntryRead, ActivitySearch
from headwater.identity.deps import ActivitiesRead
from headwater.kit.pagination import Page
from headwater.web.deps import RuntimeDep, StrictRoute

router = APIRouter(prefix="/app/v1", tags=["activity"], route_class=StrictRoute)


@router.post("/activities/search", response_model=Page[ActivityEntryRead])
async def search(body: ActivitySearch, runtime: RuntimeDep, caller: ActivitiesRead) -> Response:
    """Search the company's activity log. Filter members `resource_type`, `resource_id`,
    `author_id` and `action` match a value or `{"$in": [...]}`; `timestamp` takes `$gt`,
    `$gte`, `$lt`, `$lte`. Unknown members or operators answer 400."""
    return Response(
        await service.search_async(runtime.db, company_id=caller.actor.company_id, query=body),
        media_type="application/json",
    )
