"""A small site behind a shared Guard, for ``uvicorn --workers N tests.guard_app:app``.

The Redis URL, quota and brake name come from the environment, since uvicorn
imports this module afresh in every worker process. Each answer names the
worker's process id, so a test can tell that several workers served it;
``/pid`` answers the same off the quota, to see which workers are up.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from crawlpace.guard import Guard


async def search(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"pid={os.getpid()}")


app = Guard(Starlette(routes=[Route("/search", search), Route("/pid", search)]),
            quota=float(os.environ["GUARD_QUOTA"]), stages=(), costly="/search",
            store=os.environ["GUARD_STORE"], name=os.environ.get("GUARD_NAME", "guard"))
