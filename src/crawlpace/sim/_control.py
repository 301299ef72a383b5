"""The farm's control endpoint: its figures as JSON, for scripts and dashboards.

``GET /stats`` answers with every site's statistics, ``GET /sites`` with the
list of sites and their URLs; anything else is 404.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ._asgi import Receive, Scope, Send, respond

__all__ = ["ControlApp"]

_JSON = "application/json"


class ControlApp:
    """An ASGI application publishing what a farm measured.

    Args:
        stats: returns the per-site statistics, as :meth:`Farm.stats` does.
        sites: returns the list of sites, as JSON-ready dicts.
    """

    def __init__(self, stats: Callable[[], dict[str, dict[str, Any]]],
                 sites: Callable[[], list[dict[str, Any]]]) -> None:
        self._routes: dict[str, Callable[[], Any]] = {"/stats": stats, "/sites": sites}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one ``http`` request."""
        if scope.get("type") != "http":
            return
        route = self._routes.get(str(scope.get("path", "")))
        if route is None:
            await respond(send, 404, b'{"error": "not found; try /stats or /sites"}\n', content_type=_JSON)
            return
        body = json.dumps(route(), indent=2, sort_keys=True, allow_nan=False) + "\n"
        await respond(send, 200, body.encode("utf-8"), content_type=_JSON,
                      headers=[(b"cache-control", b"no-store")])
