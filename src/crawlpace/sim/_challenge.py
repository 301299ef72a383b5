"""The ``challenge`` profile: a site that answers too many requests with a 200 challenge page.

Sites behind a bot shield often do not say 429 when a crawler goes too fast:
they serve a "checking your browser" page with status 200 (Cloudflare marks
it with ``cf-mitigated: challenge``). A crawler that counts that as success
climbs on into the wall. This profile refuses like ``ratelimit`` (a token
bucket of ``rate`` per second holding ``burst``) but with such a page; the
site's statistics count each one as a refusal, not as goodput.
"""

from __future__ import annotations

from typing import Unpack

from ._asgi import Receive, Scope, Send, respond
from ._params import Param
from ._rates import _BURST, _RATE, _BucketSite
from ._site import CHALLENGE_KEY, SiteOptions

__all__ = ["CHALLENGE_PAGE", "ChallengeSite"]

#: The body of every challenge answer; a block rule such as ``verify you are human:200`` finds it.
CHALLENGE_PAGE = (b"<!doctype html>\n<html><head><title>Just a moment...</title></head><body>"
                  b"<h1>Checking your browser</h1><p>Verify you are human to continue.</p>"
                  b"</body></html>\n")


class ChallengeSite(_BucketSite):
    """A token bucket whose refusals are 200 challenge pages instead of 429s.

    Args:
        rate: tokens per second; also the capacity.
        burst: the bucket size.
        header: mark each challenge with ``cf-mitigated: challenge``; without
            it only the page's text tells it apart.
        **options: see :class:`~crawlpace.sim.Site`.
    """

    profile = "challenge"
    _HEADER = Param("header", "boolean", "send cf-mitigated: challenge with each challenge page", True)
    PARAMS = (_RATE, _BURST, _HEADER)

    def __init__(self, *, rate: float, burst: int = 1, header: bool = True,
                 **options: Unpack[SiteOptions]) -> None:
        self.header = self._HEADER.flag(header)
        super().__init__(rate=rate, burst=burst, **options)

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Serve the page if a token is left, else a 200 challenge page."""
        if self.bucket.take(now) > 0:
            scope[CHALLENGE_KEY] = True
            headers = [(b"cf-mitigated", b"challenge")] if self.header else []
            await respond(send, 200, CHALLENGE_PAGE, content_type="text/html; charset=utf-8",
                          headers=headers)
        else:
            await self.content(scope, receive, send)
