"""The content every simulated site serves: a robots.txt and a web of small pages.

Pages are numbered from 1 to ``pages``. Page *n* links to the next ``links``
pages (*n* + 1, *n* + 2, ...) that exist, and the home page ``/`` links to the
first ones, so a crawler starting from the home page can discover every page
by following links. A site may also have ``private`` pages, ``/private/1`` and
on, which its robots.txt disallows: they link nowhere and nothing links to
them, so a crawler meets them only in a URL list. Everything is a pure function of the numbers, so two runs
of a farm serve the same site.
"""

from __future__ import annotations

import math
import re

from ._asgi import Receive, Scope, Send, respond

__all__ = ["PRIVATE_PREFIX", "PageApp", "index_html", "page_html", "page_links", "robots_txt"]

#: The path under which a site's private pages lie, disallowed by its robots.txt.
PRIVATE_PREFIX = "/private/"

_PAGE = re.compile(r"/page/([1-9][0-9]{0,9})")
_PRIVATE = re.compile(r"/private/([1-9][0-9]{0,9})")
_HTML = "text/html; charset=utf-8"


def robots_txt(crawl_delay: float | None = None, *, private: bool = False) -> str:
    """A robots.txt that allows everything (but :data:`PRIVATE_PREFIX` with ``private``), asking for
    ``crawl_delay`` seconds between requests if given."""
    lines = ["User-agent: *", *([f"Disallow: {PRIVATE_PREFIX}"] if private else []), "Allow: /"]
    if crawl_delay is not None:
        if not (math.isfinite(crawl_delay) and crawl_delay > 0):
            raise ValueError(f"crawl_delay must be a positive finite number, got {crawl_delay!r}")
        lines.append(f"Crawl-delay: {crawl_delay:g}")
    return "\n".join(lines) + "\n"


def page_links(number: int, pages: int, links: int) -> list[int]:
    """The pages that page ``number`` links to: the next ``links`` ones, up to ``pages``."""
    return list(range(number + 1, min(number + links, pages) + 1))


def _document(title: str, paragraph: str, targets: list[int]) -> str:
    items = "".join(f'<li><a href="/page/{target}">Page {target}</a></li>' for target in targets)
    return (f"<!doctype html>\n<html><head><title>{title}</title></head>"
            f"<body><h1>{title}</h1><p>{paragraph}</p><ul>{items}</ul></body></html>\n")


def index_html(pages: int, links: int) -> str:
    """The home page, linking to the first ``links`` pages."""
    return _document("Home", f"A simulated site of {pages} pages.", page_links(0, pages, links))


def page_html(number: int, pages: int, links: int) -> str:
    """Page ``number`` of ``pages``, linking to the next ``links`` pages."""
    return _document(f"Page {number}", f"This is page {number} of {pages}.",
                     page_links(number, pages, links))


class PageApp:
    """An ASGI application serving a site's content with no limits at all.

    ``/robots.txt``, ``/``, ``/page/1`` to ``/page/{pages}`` and
    ``/private/1`` to ``/private/{private}`` answer 200; every other path
    answers 404.

    Args:
        pages: the number of pages.
        links: the links on each page.
        crawl_delay: the ``Crawl-delay`` written in robots.txt, if any.
        private: the number of private pages, which robots.txt disallows.
    """

    def __init__(self, pages: int, links: int, crawl_delay: float | None = None, *, private: int = 0) -> None:
        if pages < 1 or links < 0 or private < 0:
            raise ValueError(f"pages must be >= 1, links and private >= 0, got pages={pages!r}, "
                             f"links={links!r}, private={private!r}")
        self.pages = pages
        self.links = links
        self.private = private
        self.robots = robots_txt(crawl_delay, private=private > 0).encode("ascii")
        self._index = index_html(pages, links).encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one ``http`` request."""
        path = str(scope.get("path", ""))
        if path == "/robots.txt":
            await respond(send, 200, self.robots)
            return
        if path == "/":
            await respond(send, 200, self._index, content_type=_HTML)
            return
        match = _PAGE.fullmatch(path)
        number = int(match.group(1)) if match else 0
        secret = _PRIVATE.fullmatch(path)
        hidden = int(secret.group(1)) if secret else 0
        if 1 <= number <= self.pages:
            await respond(send, 200, page_html(number, self.pages, self.links).encode("utf-8"),
                          content_type=_HTML)
        elif 1 <= hidden <= self.private:
            await respond(send, 200, _document(f"Private {hidden}", "robots.txt disallows this page.", [])
                          .encode("utf-8"), content_type=_HTML)
        else:
            await respond(send, 404, f"No page at {path[:200]}\n".encode())
