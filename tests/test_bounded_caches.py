"""Per-scope (per-host) caches stay bounded in a worker that meets millions of hosts."""

from __future__ import annotations

from crawlpace._bounded import remember
from crawlpace._robotstxt._robots import RobotsRules
from crawlpace.frontier import RobotsCache


def test_the_robots_cache_keeps_at_most_its_limit_and_never_a_fetch_in_flight() -> None:
    cache = RobotsCache("bot", ttl=100.0, retry_ttl=10.0, limit=100)
    cache.start("http://pending", 0.0)
    rules = RobotsRules.allow_all("bot")
    for i in range(1_000):
        cache.learn(f"http://h{i}", rules, float(i) / 100.0)
    assert len(cache) <= 100
    assert cache.evicted >= 900
    assert cache.state("http://pending", 10.0) == "pending"  # its fetch is still out: kept
    assert cache.state("http://h999", 10.0) == "known"  # the newest stay
    assert cache.state("http://h0", 10.0) == "unknown"  # the oldest went


def test_the_robots_cache_evicts_the_least_recently_used() -> None:
    cache = RobotsCache("bot", ttl=1000.0, limit=10)
    rules = RobotsRules.allow_all("bot")
    for i in range(10):
        cache.learn(f"http://h{i}", rules, 0.0)
    assert cache.state("http://h0", 1.0) == "known"  # asked again: now the most recently used
    cache.learn("http://new", rules, 1.0)
    assert cache.state("http://h0", 1.0) == "known"
    assert cache.state("http://h1", 1.0) == "unknown"


def test_expired_rules_go_before_live_ones() -> None:
    cache = RobotsCache("bot", ttl=5.0, limit=10)
    rules = RobotsRules.allow_all("bot")
    cache.learn("http://old-1", rules, 0.0)
    cache.learn("http://old-2", rules, 0.0)
    for i in range(8):
        cache.learn(f"http://h{i}", rules, 100.0)
    cache.learn("http://one-more", rules, 100.0)  # 11 > 10: the two expired go, that is room enough
    assert cache.evicted == 2
    assert len(cache) == 9
    assert cache.state("http://h0", 100.0) == "known"
    assert cache.rules("http://old-1") is None


def test_remember_keeps_the_newest_entries() -> None:
    memo: dict[str, int] = {}
    dropped = sum(remember(memo, f"h{i}", i, limit=3) for i in range(10))
    assert dropped == 7
    assert list(memo) == ["h7", "h8", "h9"]
    remember(memo, "h7", 70, limit=3)  # refreshed: now the newest
    remember(memo, "new", 0, limit=3)
    assert list(memo) == ["h9", "h7", "new"]
    assert memo["h7"] == 70


def test_the_crawl_keeps_a_bounded_number_of_host_tallies_and_exact_totals() -> None:
    from crawlpace.crawl import CrawlSummary
    from crawlpace.crawl._display import render_summary
    from crawlpace.crawl._tallies import tally_of

    summary = CrawlSummary()
    for i in range(1_000):
        tally = tally_of(summary.scopes, summary.folded, f"h{i % 300}", limit=100)
        tally.done += 1
        tally.outcomes["ok" if i % 10 else "http_error"] += 1
        tally.errors += 0 if i % 10 else 1
        tally_of(summary.scopes, summary.folded, "busy", limit=100).requests += 1  # counted all along
    assert len(summary.scopes) == 100
    kept = sum(t.done for t in summary.scopes.values())
    assert kept + summary.folded.others.done == 1_000  # nothing lost, only folded
    assert sum(t.errors for t in summary.scopes.values()) + summary.folded.others.errors == 100
    assert summary.scopes["busy"].requests == 1_000  # the most recently counted host is never folded
    assert summary.folded.hosts >= 200
    figures = summary.as_dict()
    assert figures["other_hosts"]["done"] == summary.folded.others.done
    assert f"({summary.folded.hosts} more hosts)" in render_summary(summary)
