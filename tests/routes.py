"""Every route an app serves, as (method, path template): FastAPI keeps an included
router's routes behind one entry of `app.routes`, so the list is walked through them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from starlette.routing import Mount


def every_route(app: Any) -> list[tuple[str, str]]:
    return sorted(set(_walk(app.routes)))


def _walk(routes: Iterable[Any]) -> Iterator[tuple[str, str]]:
    for route in routes:
        if isinstance(route, Mount):
            continue
        candidates = getattr(route, "effective_candidates", None)
        if candidates is not None:  # an included router
            yield from _walk(candidates())
            continue
        for method in getattr(route, "methods", None) or ():
            if method != "HEAD":
                yield method, route.path
