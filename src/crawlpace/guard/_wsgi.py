"""The guard as WSGI middleware (Flask, Django under WSGI, any PEP 3333 application).

The decisions are :class:`~crawlpace.guard._core.GuardCore`'s, the same as the
ASGI middleware's: the WSGI side only turns the environ into an ASGI-shaped
scope and the verdict into a response. The core runs on one event loop in a
background thread of the process (DNS checks and Redis calls are
asynchronous); each request thread waits for its verdict there, so every
thread of a worker shares one brake, one connection and one DNS cache.

With a shared store, Redis is reached when the middleware is built: a wrong
URL, port or password stops the worker at start-up. Build it in each worker
(gunicorn's default; not with ``--preload``), since the loop thread does not
survive a fork.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine, Iterable
from http import HTTPStatus
from typing import Any, TypeVar

from ._core import GuardCore, Scope

__all__ = ["GuardWSGI"]

T = TypeVar("T")
StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
_RATE_NAMES = frozenset({"ratelimit", "ratelimit-policy"})


class _LoopThread:
    """An event loop running in a daemon thread; coroutines are handed to it and waited for."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="crawlpace-guard", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._loop.close()


def scope_of(environ: dict[str, Any]) -> Scope:
    """An ASGI-shaped scope for the guard: method, path, headers and client address of a WSGI request."""
    headers: list[tuple[bytes, bytes]] = []
    for name, value in environ.items():
        if name.startswith("HTTP_"):
            header_name = name[5:].replace("_", "-").lower()
            headers.append((header_name.encode("latin-1"), str(value).encode("latin-1")))
    raw_path = str(environ.get("PATH_INFO", "")).encode("latin-1")
    port = str(environ.get("REMOTE_PORT", "") or "0")
    remote = environ.get("REMOTE_ADDR")
    return {"type": "http", "method": environ.get("REQUEST_METHOD", "GET"),
            "path": raw_path.decode("utf-8", "replace"), "raw_path": raw_path,
            "query_string": str(environ.get("QUERY_STRING", "")).encode("latin-1"), "headers": headers,
            "client": (str(remote), int(port) if port.isdigit() else 0) if remote else None}


class GuardWSGI:
    """WSGI middleware with the same behaviour as :class:`~crawlpace.guard.Guard`.

    Args:
        app: the WSGI application to protect.
        **options: the keyword arguments of :class:`~crawlpace.guard.Guard`
            (``quota``, ``costly``, ``store``...). A ``costly`` or ``key``
            callable receives the ASGI-shaped scope of :func:`scope_of`.

    Raises:
        ValueError: for a bad option, as :class:`~crawlpace.guard.Guard` does.
        StoreUnreachable: when a shared store cannot be reached at start-up.
    """

    def __init__(self, app: WSGIApp, **options: Any) -> None:
        self.app = app
        self.core = GuardCore(**options)
        self._runner = _LoopThread()
        if self.core.shared:
            try:
                self._runner.run(self.core.start())
            except BaseException:
                self._runner.stop()
                raise

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Handle one WSGI request."""
        verdict = self._runner.run(self.core.verdict(scope_of(environ)))
        if verdict.status == 0:
            if not verdict.headers:
                return self.app(environ, start_response)
            extra = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in verdict.headers]

            def start_with_headers(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                if not any(name.lower() in _RATE_NAMES for name, _ in headers):
                    headers = [*headers, *extra]
                return start_response(status, headers, exc_info)

            return self.app(environ, start_with_headers)
        headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in verdict.headers]
        start_response(f"{verdict.status} {HTTPStatus(verdict.status).phrase}", headers)
        return [verdict.body]

    def status(self) -> dict[str, Any]:
        """The JSON-ready report :meth:`status_app` serves (see :meth:`crawlpace.guard.Guard.status`)."""
        return self._runner.run(self.core.status())

    def status_app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """A WSGI app answering the guard's status as JSON; mount it where only you can reach it."""
        body = json.dumps(self.status(), sort_keys=True).encode("utf-8")
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                  ("Cache-Control", "no-store")])
        return [body]

    def close(self) -> None:
        """Close the shared store's connections and stop the loop thread."""
        try:
            self._runner.run(self.core.aclose())
        finally:
            self._runner.stop()
