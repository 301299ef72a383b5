"""A small site behind a shared Guard, for ``uvicorn --workers N tests.guard_app:app``.

The Redis URL, quota and brake name come from the environment, since uvicorn
imports this module afresh in every worker process. Each answer names the
worker's process id in an ``x-worker`` header, refusals from the guard
included, so a test can tell that several workers served it; ``/pid``
answers the id off the quota, to see which workers are up.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crawlpace.guard import Guard


async def search(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"pid={os.getpid()}")


def name_the_worker(inner: ASGIApp) -> ASGIApp:
    """Add this process's id to every answer's headers, the guard's 429s as well."""
    worker = str(os.getpid()).encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-worker", worker)]}
            await send(message)

        await inner(scope, receive, tagged)

    return app


app = name_the_worker(Guard(Starlette(routes=[Route("/search", search), Route("/pid", search)]),
            quota=float(os.environ["GUARD_QUOTA"]), stages=(), costly="/search",
            store=os.environ["GUARD_STORE"], name=os.environ.get("GUARD_NAME", "guard")))
