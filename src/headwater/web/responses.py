"""Answer a model as JSON in one step.

FastAPI validates a route's return value against its response_model and then serializes
it; for a model we built ourselves that validation is repeated work (and, for sync
routes, one more thread hop). Routes keep `response_model` for the OpenAPI description
and return this.
"""

from __future__ import annotations

from pydantic import BaseModel
from starlette.responses import Response


def json_response(model: BaseModel, *, status_code: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status_code, media_type="application/json")
