"""The guard cannot be talked past: allow-listed names need a confirmed address.

DNS is an injected fake resolver (no test touches the network); the requests
are hand-made ASGI scopes with spoofed user agents and forwarding headers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from crawlpace.guard import BotVerifier, ClientAddress, Guard, load_ranges
from crawlpace.guard._middleware import Scope

from .test_guard import Backend, FakeClock, call, http_scope

GOOGLE = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
REAL_GOOGLE_IP = "66.249.66.1"
SCRAPER_IP = "203.0.113.9"


class FakeResolver:
    """DNS from two tables, counting lookups; ``delay`` makes every lookup slow."""

    def __init__(self, ptr: dict[str, str], a: dict[str, list[str]], delay: float = 0.0) -> None:
        self.ptr, self.a, self.delay = ptr, a, delay
        self.lookups: Counter[str] = Counter()

    async def reverse(self, address: str) -> str | None:
        self.lookups["reverse"] += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.ptr.get(address)

    async def forward(self, host: str) -> Iterable[str]:
        self.lookups["forward"] += 1
        return self.a.get(host, [])


def google_dns(**kwargs: Any) -> FakeResolver:
    return FakeResolver(
        ptr={REAL_GOOGLE_IP: "crawl-66-249-66-1.googlebot.com.",
             # A scraper may set its own PTR record to anything, here a googlebot.com name...
             SCRAPER_IP: "crawl-66-249-66-1.googlebot.com",
             # ...or a name under a look-alike domain.
             "203.0.113.10": "crawl.googlebot.com.evil.example"},
        # ...but only Google decides what googlebot.com names resolve to.
        a={"crawl-66-249-66-1.googlebot.com": [REAL_GOOGLE_IP],
           "crawl.googlebot.com.evil.example": ["203.0.113.10"]},
        **kwargs)


def make_guard(backend: Backend, **kwargs: Any) -> Guard:
    kwargs.setdefault("resolver", google_dns())
    kwargs.setdefault("quota", 1)
    return Guard(backend, stages=(), clock=FakeClock(0.0), **kwargs)


async def statuses(app: Guard, scope: Scope, count: int) -> list[int]:
    return [(await call(app, dict(scope))).status for _ in range(count)]


async def test_a_confirmed_crawler_is_never_braked() -> None:
    resolver = google_dns()
    app = make_guard(Backend(), resolver=resolver)
    assert await statuses(app, http_scope(agent=GOOGLE, client=(REAL_GOOGLE_IP, 1)), 5) == [200] * 5
    assert app.stats()["keys"] == {}
    # One reverse and one forward lookup, then the answer is remembered.
    assert resolver.lookups == {"reverse": 1, "forward": 1}


@pytest.mark.parametrize("address", [SCRAPER_IP, "203.0.113.10", "203.0.113.11"])
async def test_a_copied_user_agent_is_counted_like_anyone(address: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    app = make_guard(Backend())
    with caplog.at_level(logging.INFO, "crawlpace.guard"):
        assert await statuses(app, http_scope(agent=GOOGLE, client=(address, 1)), 3) == [200, 429, 429]
    assert "not confirmed" in caplog.text
    assert sum(entry["used"] for entry in app.stats()["keys"].values()) == 1


async def test_the_owners_ranges_confirm_without_dns(tmp_path: Path) -> None:
    published = tmp_path / "googlebot.json"
    published.write_text(json.dumps({"creationTime": "2026-11-24", "prefixes": [
        {"ipv4Prefix": "66.249.64.0/19"}, {"ipv6Prefix": "2001:4860:4801::/48"}]}))
    resolver = FakeResolver({}, {})
    app = make_guard(Backend(), resolver=resolver, bot_ranges={"googlebot": published})
    assert await statuses(app, http_scope(agent=GOOGLE, client=("66.249.70.3", 1)), 3) == [200] * 3
    assert await statuses(app, http_scope(agent=GOOGLE, client=("2001:4860:4801::9", 1)), 2) == [200] * 2
    assert resolver.lookups == {}
    # Outside the ranges the DNS check still applies, and fails here.
    assert await statuses(app, http_scope(agent=GOOGLE, client=(SCRAPER_IP, 1)), 2) == [200, 429]


def test_ranges_files_in_text_and_errors_name_the_entry(tmp_path: Path) -> None:
    listed = tmp_path / "bots.txt"
    listed.write_text("# our partner's crawler\n192.0.2.0/24\n\n2001:db8::/32  # v6\n")
    assert [str(net) for net in load_ranges(listed)] == ["192.0.2.0/24", "2001:db8::/32"]
    listed.write_text("192.0.2.0/24\nnot-a-range\n")
    with pytest.raises(ValueError, match="'not-a-range' is not an IP address or CIDR range"):
        load_ranges(listed)


async def test_a_slow_dns_answer_is_a_failed_check() -> None:
    resolver = google_dns(delay=10.0)
    app = make_guard(Backend(), resolver=resolver, verify_timeout=0.05)
    scope = http_scope(agent=GOOGLE, client=(REAL_GOOGLE_IP, 1))
    assert await statuses(app, scope, 2) == [200, 429]
    # The failure is remembered for a while: no lookup per request.
    assert resolver.lookups == {"reverse": 1}


async def test_a_broken_resolver_is_a_failed_check_not_a_crash() -> None:
    class Broken(FakeResolver):
        async def reverse(self, address: str) -> str | None:
            raise RuntimeError("resolver exploded")

    app = make_guard(Backend(), resolver=Broken({}, {}))
    assert await statuses(app, http_scope(agent=GOOGLE, client=(REAL_GOOGLE_IP, 1)), 2) == [200, 429]


async def test_concurrent_requests_share_one_lookup() -> None:
    resolver = google_dns(delay=0.01)
    verifier = BotVerifier(["Googlebot"], resolver=resolver)
    verdicts = await asyncio.gather(*(verifier.verify("googlebot", REAL_GOOGLE_IP) for _ in range(20)))
    assert verdicts == [True] * 20
    assert resolver.lookups == {"reverse": 1, "forward": 1}


async def test_cached_verdicts_expire() -> None:
    now = [0.0]
    resolver = google_dns()
    verifier = BotVerifier(["Googlebot"], resolver=resolver, ttl=100.0, failure_ttl=10.0,
                           clock=lambda: now[0])
    assert await verifier.verify("googlebot", REAL_GOOGLE_IP)
    assert not await verifier.verify("googlebot", SCRAPER_IP)
    now[0] = 50.0
    assert await verifier.verify("googlebot", REAL_GOOGLE_IP)
    assert not await verifier.verify("googlebot", SCRAPER_IP)
    assert resolver.lookups["reverse"] == 3  # the failure was asked again, the success not
    now[0] = 150.0
    await verifier.verify("googlebot", REAL_GOOGLE_IP)
    assert resolver.lookups["reverse"] == 4


def test_a_name_that_can_never_be_confirmed_fails_at_start() -> None:
    with pytest.raises(ValueError, match="'ExampleBot' can never be confirmed"):
        Guard(Backend(), quota=1, allow=["Googlebot", "ExampleBot"])
    # With its domains or ranges given it is accepted.
    Guard(Backend(), quota=1, allow=["ExampleBot"], bot_domains={"examplebot": ["crawler.example.com"]})
    Guard(Backend(), quota=1, allow=["ExampleBot"], bot_ranges={"examplebot": ["192.0.2.0/24"]})


# --- client addresses behind proxies ----------------------------------------------------------------


def forwarded_scope(peer: str, header: bytes, value: str, agent: str = GOOGLE) -> Scope:
    scope = http_scope(agent=agent, client=(peer, 1))
    scope["headers"].append((header, value.encode("latin-1")))
    return scope


async def test_a_forwarding_header_from_an_untrusted_peer_is_ignored() -> None:
    # The scraper claims, in X-Forwarded-For, to be relaying for a real Googlebot address.
    app = make_guard(Backend(), trusted_proxies=["10.0.0.0/8"])
    scope = forwarded_scope(SCRAPER_IP, b"x-forwarded-for", REAL_GOOGLE_IP)
    assert await statuses(app, scope, 2) == [200, 429]


async def test_trusted_proxies_pass_the_real_client_address() -> None:
    app = make_guard(Backend(), trusted_proxies=["10.0.0.0/8"])
    via_proxy = forwarded_scope("10.1.2.3", b"x-forwarded-for", f"{REAL_GOOGLE_IP}, 10.9.9.9")
    assert await statuses(app, via_proxy, 3) == [200] * 3
    # A spoofed entry on the left is the client's own writing; the proxy appended the scraper's address.
    spoofed = forwarded_scope("10.1.2.3", b"x-forwarded-for", f"{REAL_GOOGLE_IP}, {SCRAPER_IP}")
    assert await statuses(app, spoofed, 2) == [200, 429]


def test_client_address_rules() -> None:
    plain = ClientAddress()
    assert plain.of(forwarded_scope("10.1.2.3", b"x-forwarded-for", "192.0.2.1")) == "10.1.2.3"
    proxied = ClientAddress(["10.0.0.0/8", "2001:db8::/32"])
    assert proxied.of(forwarded_scope("10.1.2.3", b"x-forwarded-for", "192.0.2.1:5000, 10.0.0.2")) \
        == "192.0.2.1"
    assert proxied.of(forwarded_scope("2001:db8::1", b"x-forwarded-for", "[2001:db8:ffff::5]:443")) \
        == "2001:db8:ffff::5"
    # Every hop trusted: the leftmost is the client.
    assert proxied.of(forwarded_scope("10.1.2.3", b"x-forwarded-for", "10.0.0.7")) == "10.0.0.7"
    # An unreadable entry stops the walk at the last hop vouched for.
    assert proxied.of(forwarded_scope("10.1.2.3", b"x-forwarded-for", "192.0.2.1, garbage")) == "10.1.2.3"
    standard = ClientAddress(["10.0.0.0/8"], "forwarded")
    scope = forwarded_scope("10.1.2.3", b"forwarded", 'for=192.0.2.60;proto=https, for="[2001:db8::7]"')
    assert standard.of(scope) == "2001:db8::7"
    with pytest.raises(ValueError, match=r"trusted_proxies: 'proxy\.local' is not an IP address"):
        ClientAddress(["proxy.local"])


async def test_ip_keys_use_the_forwarded_address() -> None:
    app = make_guard(Backend(), key="ip", allow=(), trusted_proxies=["10.0.0.0/8"], quota=2, share=0.5)
    for client in ("192.0.2.1", "192.0.2.2"):
        scope = forwarded_scope("10.1.2.3", b"x-forwarded-for", client, agent="curl/8")
        assert await statuses(app, scope, 2) == [200, 429]
    assert set(app.stats()["keys"]) == {"192.0.2.1", "192.0.2.2"}
