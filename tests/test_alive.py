"""Live hosts: a URL of a site that keeps answering well may go past its retries, within a bound."""

from __future__ import annotations

from crawlpace.crawl._alive import ALIVE_FACTOR, ALIVE_SECONDS, LiveHosts


def test_within_its_retries_a_url_always_goes_again() -> None:
    live = LiveHosts()
    assert live.may_retry("a", 0.0, retries=3, used=2)
    assert not live.may_retry("a", 0.0, retries=3, used=3)  # no good answer seen: retries only


def test_a_live_host_extends_the_retries_up_to_a_bound() -> None:
    live = LiveHosts()
    live.note("a", 100.0)
    limit = ALIVE_FACTOR * (3 + 1)  # attempts
    assert live.may_retry("a", 110.0, retries=3, used=3)
    assert live.may_retry("a", 110.0, retries=3, used=limit - 2)
    assert not live.may_retry("a", 110.0, retries=3, used=limit - 1)
    assert not live.may_retry("b", 110.0, retries=3, used=3)  # another host


def test_a_host_silent_for_a_while_is_no_longer_alive() -> None:
    live = LiveHosts()
    live.note("a", 100.0)
    assert live.alive("a", 100.0 + ALIVE_SECONDS)
    assert not live.alive("a", 100.0 + ALIVE_SECONDS + 0.1)
    assert not live.may_retry("a", 100.0 + ALIVE_SECONDS + 0.1, retries=3, used=3)


def test_zero_retries_stays_zero() -> None:
    live = LiveHosts()
    live.note("a", 0.0)
    assert not live.may_retry("a", 0.0, retries=0, used=0)
