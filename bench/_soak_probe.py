"""The soak's probe: ``python bench/_soak_probe.py PROBE_FILE crawlpace-arguments...``.

Runs the ``crawlpace`` command line with a few recorders added, each writing
one line per event to ``PROBE_FILE`` (buffered in a file, never held in
memory: the soak measures the process's memory too):

* ``a SCOPE KIND SERVER_TIME WALL_TIME WHAT``: an admission (a permit made).
  ``KIND`` is ``redis`` (the acquire script admitted it; ``SERVER_TIME`` is the
  server's clock, the one the script spaces sends by), ``allot`` (a slot of the
  worker's allotment) or ``local`` (another store: the fallback while Redis was
  away; ``SERVER_TIME`` is then the wall clock); ``WHAT`` is ``robots`` for a
  robots.txt fetch, else ``page``;
* ``t WALL_TIME TASKS``: the asyncio tasks alive in the process, at most every
  10 s (sampled on admissions);
* ``r HOST WALL_TIME``: with ``crawlpace sim``, a request's arrival at a
  ``crawldelay`` site, as the site timed it (its first bytes read), on the
  wall clock.

Redis's ``TIME`` and Python's ``time.time()`` read the same clock on one
machine, so admissions and arrivals can be set side by side. Not a test and
not part of the library: the soak's instrument only.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import sys
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
TASK_EVERY = 10.0


def install(out: IO[str]) -> None:
    """Wrap the shared store's admissions and the crawl-delay sites' arrivals to write to ``out``."""
    from crawlpace._throttle._permit import Permit
    from crawlpace.sim._rates import CrawlDelaySite
    from crawlpace.stores.redis._allot import Allotments
    from crawlpace.stores.redis._redis_lease import RedisLease

    allotted: list[Any] = [None]
    next_tasks = [0.0]
    made = Permit.__init__
    admit = Allotments.admit
    handle = CrawlDelaySite.handle
    offset = time.time() - time.monotonic()

    def probed_permit(self: Any, releaser: Any, lease: Any, request: object) -> None:
        made(self, releaser, lease, request)
        wall = time.time()
        url = str(getattr(request, "url", request))
        what = "robots" if url.split("?", 1)[0].endswith("/robots.txt") else "page"
        if isinstance(lease, RedisLease):
            kind, at = ("allot" if lease is allotted[0] else "redis"), lease.server_granted_at
        else:
            kind, at = "local", wall
        for name, _use in lease.demands:
            out.write(f"a {name} {kind} {at!r} {wall!r} {what}\n")
        if wall >= next_tasks[0]:
            next_tasks[0] = wall + TASK_EVERY
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to count
                out.write(f"t {wall!r} {len(asyncio.all_tasks())}\n")

    def probed_admit(self: Any, demand: Any) -> Any:
        lease = admit(self, demand)
        allotted[0] = lease
        return lease

    async def probed_handle(self: Any, scope: Any, receive: Any, send: Any, now: float) -> None:
        host = (scope.get("server") or ("?", 0))[0]
        out.write(f"r {host} {now + offset!r}\n")
        await handle(self, scope, receive, send, now)

    Permit.__init__ = probed_permit  # type: ignore[method-assign]
    Allotments.admit = probed_admit  # type: ignore[method-assign]
    CrawlDelaySite.handle = probed_handle  # type: ignore[method-assign]


def main() -> int:
    sys.path.insert(0, str(ROOT / "src"))
    path, argv = sys.argv[1], sys.argv[2:]
    out = open(path, "w", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115 (closed at exit)
    atexit.register(out.close)
    install(out)
    from crawlpace.cli import main as crawlpace

    try:
        return crawlpace(argv)
    finally:
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
