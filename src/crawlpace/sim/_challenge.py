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

#: The body of every challenge answer, shaped like Cloudflare's managed challenge ("Just a moment...":
#: its title, the noscript notice, the challenge options object and the script it loads, trimmed of
#: the inline style). crawlpace's default block rules find it by its markers, with or without the
#: ``cf-mitigated`` header; a user rule such as ``verify you are human:200`` finds it by its text.
CHALLENGE_PAGE = (
    b'<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>'
    b'<meta http-equiv="Content-Type" content="text/html; charset=UTF-8">'
    b'<meta http-equiv="X-UA-Compatible" content="IE=Edge">'
    b'<meta name="robots" content="noindex,nofollow">'
    b'<meta name="viewport" content="width=device-width,initial-scale=1"></head>'
    b'<body class="no-js"><div class="main-wrapper" role="main"><div class="main-content">'
    b'<h1 class="zone-name-title h1">Checking your browser</h1>'
    b'<h2 class="h2" id="challenge-running">Verify you are human by completing the action below.</h2>'
    b'<noscript><div class="h2"><span id="challenge-error-text">Enable JavaScript and cookies to '
    b'continue</span></div></noscript></div></div>'
    b"<script>(function(){window._cf_chl_opt={cvId: '3',cZone: 'localhost',cType: 'managed',"
    b"cRay: '0000000000000000',cH: 'sim'};var a=document.createElement('script');"
    b"a.src='/cdn-cgi/challenge-platform/h/g/orchestrate/chl_page/v1?ray=0000000000000000';"
    b"document.getElementsByTagName('head')[0].appendChild(a);}());</script></body></html>\n")


class ChallengeSite(_BucketSite):
    """A token bucket whose refusals are 200 challenge pages instead of 429s.

    Args:
        rate: tokens per second; also the capacity.
        burst: the bucket size.
        header: mark each challenge with ``cf-mitigated: challenge``; without
            it only the page's markers tell it apart (crawlpace's default
            block rules know them).
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
            headers = [(b"server", b"cloudflare"), (b"cache-control", b"private, max-age=0, no-store")]
            if self.header:
                headers.append((b"cf-mitigated", b"challenge"))
            await respond(send, 200, CHALLENGE_PAGE, content_type="text/html; charset=utf-8",
                          headers=headers)
        else:
            await self.content(scope, receive, send)
