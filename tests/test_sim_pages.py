"""The content of simulated sites: robots.txt, pages and the links between them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from crawlpace import crawl_delay
from crawlpace.sim import PageApp
from crawlpace.sim._asgi import Message
from crawlpace.sim._pages import index_html, page_html, page_links, robots_txt


def test_robots_txt_allows_all_and_states_the_crawl_delay() -> None:
    assert crawl_delay(robots_txt(), "anybot") is None
    assert crawl_delay(robots_txt(0.5), "anybot") == 0.5
    assert "Crawl-delay: 2\n" in robots_txt(2.0)
    with pytest.raises(ValueError, match="crawl_delay"):
        robots_txt(0.0)


def test_links_go_to_the_next_pages_that_exist() -> None:
    assert page_links(1, 10, 3) == [2, 3, 4]
    assert page_links(9, 10, 3) == [10]
    assert page_links(10, 10, 3) == []
    assert page_links(0, 2, 5) == [1, 2]


def test_every_page_is_reachable_from_the_home_page() -> None:
    pages, links = 25, 2
    seen: set[int] = set()
    queue = [int(n) for n in re.findall(r'href="/page/(\d+)"', index_html(pages, links))]
    while queue:
        number = queue.pop()
        if number not in seen:
            seen.add(number)
            queue.extend(int(n) for n in re.findall(r'href="/page/(\d+)"', page_html(number, pages, links)))
    assert seen == set(range(1, pages + 1))


def test_pages_are_deterministic() -> None:
    assert page_html(7, 20, 3) == page_html(7, 20, 3)
    assert "<title>Page 7</title>" in page_html(7, 20, 3)


async def call(app: PageApp, path: str) -> tuple[int, dict[str, str], bytes]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": path, "headers": []}
    await app(scope, receive, send)
    start, body = sent
    headers = {name.decode(): value.decode() for name, value in start["headers"]}
    return start["status"], headers, body["body"]


async def test_page_app_routes() -> None:
    app = PageApp(pages=5, links=3, crawl_delay=1.5)
    status, headers, body = await call(app, "/robots.txt")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    assert b"Crawl-delay: 1.5" in body
    status, headers, body = await call(app, "/")
    assert status == 200
    assert headers["content-type"].startswith("text/html")
    assert b'href="/page/1"' in body
    status, headers, body = await call(app, "/page/5")
    assert status == 200
    assert headers["content-length"] == str(len(body))
    for path in ("/page/6", "/page/01", "/page/", "/elsewhere"):
        assert (await call(app, path))[0] == 404


def test_page_app_refuses_bad_sizes() -> None:
    with pytest.raises(ValueError, match="pages"):
        PageApp(pages=0, links=1)
