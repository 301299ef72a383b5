"""Soft blocks: the rules, the throttler's reaction, crawls against a site answering 200 challenge pages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crawlpace import Settings
from crawlpace._exceptions import ConfigError
from crawlpace._responses._blocks import DEFAULT_MAX_BYTES, BlockRule, BlockRules, parse_block_rules
from crawlpace.cli import main
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.sim import CHALLENGE_PAGE, ChallengeSite, Farm
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory
from .test_crawl import FAST, lines, pages
from .test_scrapy_crawl import FAST as SCRAPY_FAST
from .test_scrapy_crawl import crawl as scrapy_crawl

# -- the rules --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "pattern", "statuses"), [
    ("captcha:200", b"captcha", {200}),
    ("Access denied:403,503", b"Access denied", {403, 503}),
    ("verify you are human", b"verify you are human", set()),
    ("https?://x:8080", b"https?://x:8080", set()),  # a port is no status: it stays in the pattern
    ("a:b:429", b"a:b", {429}),
])
def test_a_rule_splits_off_trailing_statuses_only(spec: str, pattern: bytes, statuses: set[int]) -> None:
    rule = BlockRule.parse(spec)
    assert (rule.pattern.pattern, set(rule.statuses)) == (pattern, statuses)


def test_a_body_rule_matches_its_statuses_case_insensitively() -> None:
    rules = BlockRules(["verify you are human:200"])
    assert rules.match(200, {}, CHALLENGE_PAGE) == "verify you are human:200"
    assert rules.match(404, {}, CHALLENGE_PAGE) is None
    assert rules.match(200, {}, b"<html>a real page</html>") is None


def test_the_challenge_header_and_quota_problems_are_always_blocks() -> None:
    rules = BlockRules()
    assert rules.match(200, {"cf-mitigated": " Challenge "}, b"") == "header cf-mitigated: challenge"
    assert rules.match(200, {"cf-mitigated": "other"}, b"") is None
    problem = json.dumps({"type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
                          "title": "Request cannot be satisfied", "violated-policies": ["burst"]}).encode()
    headers = {"content-type": "application/problem+json; charset=utf-8"}
    assert rules.match(429, headers, problem) == "problem quota-exceeded"
    reduced = b'{"type": "https://example.net/problems/temporary-reduced-capacity"}'
    assert rules.match(503, headers, reduced) == "problem temporary-reduced-capacity"
    assert rules.match(400, headers, b'{"type": "https://example.net/problems/out-of-stock"}') is None
    assert rules.match(400, headers, b"{not json") is None  # hostile bodies are ignored, never raise
    assert rules.match(400, headers, b"[1, 2]") is None
    assert rules.match(200, {}, problem) is None  # not announced as a problem: no block


# -- the default rules -----------------------------------------------------------------------------

HTML = {"content-type": "text/html; charset=UTF-8"}

#: Trimmed but faithful interstitials of well-known shields, each with the status it comes with.
INTERSTITIALS = [
    (200, CHALLENGE_PAGE, "default cloudflare challenge"),  # the simulator's, without its header
    (403, b'<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title></head><body>'
          b"<script>window._cf_chl_opt={cType: 'managed'};</script></body></html>",
          "default cloudflare challenge"),
    (503, b"<html><head><title>Just a moment...</title></head><body>Checking your browser before accessing "
          b"example.com.</body></html>", "default cloudflare challenge"),
    (403, b"<title>Attention Required! | Cloudflare</title><h1>Sorry, you have been blocked</h1>",
          "default cloudflare challenge"),
    (403, b'<html><head><META NAME="robots" CONTENT="noindex,nofollow"></head><body><iframe '
          b'src="/_Incapsula_Resource?CWUDNSAI=2&incident_id=1-2&edet=12">Request unsuccessful. Incapsula '
          b"incident ID: 1-2</iframe></body></html>", "default imperva"),
    (403, b"<html><head><title>example.com</title></head><body><script>var dd={'rt':'c','cid':'x','hsh':'y',"
          b"'host':'geo.captcha-delivery.com'}</script><script src=\"https://ct.captcha-delivery.com/c.js\">"
          b"</script></body></html>", "default datadome"),
    (403, b'<html><head><title>Access to this page has been denied.</title></head><body>'
          b'<div id="px-captcha"></div></body></html>', "default human"),
    (403, b"<html><title>Sucuri WebSite Firewall - Access Denied</title></html>", "default sucuri"),
]


@pytest.mark.parametrize(("status", "body", "rule"), INTERSTITIALS)
def test_the_default_rules_know_the_common_interstitials(status: int, body: bytes, rule: str) -> None:
    assert BlockRules().match(status, HTML, body) == rule
    assert BlockRules().match(status, {}, body) == rule  # no Content-Type said: still judged
    assert BlockRules(defaults=False).match(status, HTML, body) is None


#: Pages of content that carry a shield's widget or script, or quote a marker: none is a block.
CONTENT_PAGES = [
    # A sign-up form with a Cloudflare Turnstile widget, and Cloudflare's detection script on every page.
    (200, b'<html><head><title>Sign up</title><script src="https://challenges.cloudflare.com/turnstile/v0/'
          b'api.js" async defer></script></head><body><form><div class="cf-turnstile" data-sitekey="0x4AAA">'
          b"</div><p>Verify you are human</p><button>Sign up</button></form><script>(function(){var a="
          b"document.createElement('script');a.src='/cdn-cgi/challenge-platform/scripts/jsd/main.js';}());"
          b"</script></body></html>"),
    # A contact form with reCAPTCHA and one with hCaptcha; a page with HUMAN's and DataDome's sensors.
    (200, b'<html><title>Contact</title><script src="https://www.google.com/recaptcha/api.js"></script>'
          b'<form><div class="g-recaptcha" data-sitekey="k"></div>Please complete the captcha.</form>'
          b"</html>"),
    (200, b'<html><title>Contact</title><script src="https://js.hcaptcha.com/1/api.js"></script>'
          b'<div class="h-captcha" data-sitekey="k"></div></html>'),
    (200, b'<html><script>window._pxAppId="PXabc";</script><script src="https://js.datadome.co/tags.js">'
          b"</script><title>Shop</title></html>"),
    # A blog post titled like the interstitial: a 404, and a long page.
    (404, b"<html><head><title>Just a moment...</title></head><body>No such page.</body></html>"),
    (200, b"<html><head><title>Just a moment...</title></head><body>" + b"<p>A long story.</p>" * 4000
          + b"</body></html>"),
]


@pytest.mark.parametrize(("status", "body"), CONTENT_PAGES)
def test_a_page_that_embeds_a_captcha_widget_is_no_block(status: int, body: bytes) -> None:
    assert BlockRules().match(status, HTML, body) is None


def test_the_default_rules_judge_only_a_small_html_body() -> None:
    rules = BlockRules()
    padded = CHALLENGE_PAGE + b" " * (DEFAULT_MAX_BYTES - len(CHALLENGE_PAGE))
    assert rules.match(200, HTML, padded) == "default cloudflare challenge"
    assert rules.match(200, HTML, padded + b" ") is None  # past the size a challenge page has
    assert rules.match(200, {"content-type": "application/json"}, CHALLENGE_PAGE) is None
    assert rules.match(200, {"content-type": "text/plain"}, CHALLENGE_PAGE) is None
    assert rules.match(404, HTML, CHALLENGE_PAGE) is None
    # A user rule keeps its own reach: any size, any type, and it is reported first.
    mine = BlockRules(["just a moment:200"])
    assert mine.match(200, {"content-type": "text/plain"}, padded + b" ") == "just a moment:200"
    assert mine.match(200, HTML, CHALLENGE_PAGE) == "just a moment:200"


def test_a_client_reads_a_body_only_where_a_rule_could_match() -> None:
    rules = BlockRules()
    assert not rules.needs_body(200, HTML)  # a page of unsaid length could be large: it streams on
    assert rules.needs_body(200, {**HTML, "content-length": "5000"})
    assert rules.needs_body(403, {})
    assert rules.needs_body(200, {**HTML, "content-length": str(DEFAULT_MAX_BYTES)})
    assert not rules.needs_body(200, {**HTML, "content-length": str(DEFAULT_MAX_BYTES + 1)})  # a big page
    assert not rules.needs_body(200, {"content-type": "application/json"})  # an API answer streams on
    assert not rules.needs_body(404, HTML)
    assert rules.needs_body(503, {**HTML, "content-length": "junk"})  # hostile length: as if unsaid
    assert not rules.needs_body(503, {**HTML, "retry-after": "5"})  # its hold is heard before any body
    assert not rules.needs_body(429, HTML)  # pushback already
    assert rules.needs_body(400, {"content-type": "application/problem+json"})
    assert not BlockRules(defaults=False).needs_body(503, HTML)
    assert BlockRules(["captcha:404"], defaults=False).needs_body(404, {"content-type": "image/png"})
    assert BlockRules(["captcha"], defaults=False).needs_body(201, {})


def test_the_defaults_can_be_turned_off_in_every_settings_form() -> None:
    assert Settings().block_defaults
    assert BlockRules.of(Settings()).match(200, HTML, CHALLENGE_PAGE) == "default cloudflare challenge"
    for settings in (Settings.from_scrapy({"THROTTLING_BLOCK_DEFAULTS": False,
                                           "THROTTLING_BLOCK_RULES": ["x:503"]}),
                     Settings.from_dict({"block_defaults": False, "block_rules": ["x:503"]})):
        rules = BlockRules.of(settings)
        assert [rule.spec for rule in rules.rules] == ["x:503"]  # the user's rules stay
        assert rules.match(200, HTML, CHALLENGE_PAGE) is None
    with pytest.raises(ConfigError, match=r"THROTTLING_BLOCK_DEFAULTS: expected true or false, got 'maybe'"):
        Settings.from_scrapy({"THROTTLING_BLOCK_DEFAULTS": "maybe"})
    with pytest.raises(ConfigError, match=r"block_defaults: expected true or false"):
        Settings.from_dict({"block_defaults": 0})


def test_invalid_rules_fail_at_start_up_naming_key_value_and_fix() -> None:
    with pytest.raises(ConfigError, match=r"THROTTLING_BLOCK_RULES: '\(oops:403' is not a valid regular"):
        Settings.from_scrapy({"THROTTLING_BLOCK_RULES": ["(oops:403"]})
    with pytest.raises(ConfigError, match="block_rules: expected a list"):
        Settings.from_dict({"block_rules": 5})
    with pytest.raises(ConfigError, match="is not a rule"):
        parse_block_rules("block_rules", [""])
    assert Settings.from_dict({"block_rules": ["captcha:200"]}).block_rules == ("captcha:200",)
    assert main(["crawl", "-", "-o", "/dev/null", "--block-on-match", "(x"]) == 3


# -- the throttler ----------------------------------------------------------------------------------


async def test_a_blocked_answer_backs_off_like_a_429(clock: MockClock,
                                                     make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 1.0})
    async with throttler.slot("https://example.com/") as permit:
        permit.feedback(status=200, blocked=True, latency=0.01)
    assert permit.outcome is not None
    assert [item.backoff for item in permit.outcome.feedback] == [True]
    assert permit.outcome.feedback[0].latency is None  # a challenge's latency says nothing of the site
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert (stats.backoff, stats.delay) == (1, 2.0)


# -- crawls against the challenge profile -----------------------------------------------------------

#: Four in flight with no delay: fast enough to run into a 10-per-second bucket.
UNPACED = {"CONCURRENT_REQUESTS_PER_DOMAIN": 4, "DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}


async def run_crawl(tmp_path: Path, urls: list[str], settings: dict[str, Any],
                    **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    output = tmp_path / "out.jsonl"
    job = CrawlJob(Settings.from_scrapy({**FAST, **settings}), CrawlOptions(output=output, trust_env=False,
                                                                           **options))
    summary = await job.run(urls)
    return summary, lines(output)


async def test_challenge_pages_are_resent_until_the_content_comes(tmp_path: Path) -> None:
    spec = {"site": [{"name": "shield", "profile": "challenge", "rate": 10.0, "burst": 2, "pages": 12}]}
    async with Farm(spec) as farm:
        urls = pages(farm)
        summary, results = await run_crawl(tmp_path, urls, UNPACED, retries=20)
        site = farm.stats()["shield"]
    assert site["challenged"] >= 1  # the crawl did hit the wall...
    assert site["ok"] == len(urls) + 1  # ...and got every page's content in the end (plus robots.txt)
    assert {result["outcome"] for result in results} == {"ok"}
    assert not any(result.get("blocked") for result in results)
    assert max(result["attempts"] for result in results) >= 2
    assert summary.complete


async def test_a_url_still_blocked_after_its_retries_says_so(tmp_path: Path) -> None:
    spec = {"site": [{"name": "shield", "profile": "challenge", "rate": 0.2, "burst": 1, "pages": 5,
                      "header": False}]}
    async with Farm(spec) as farm:
        urls = pages(farm)
        rules = {"THROTTLING_BLOCK_RULES": ["verify you are human:200"]}
        summary, results = await run_crawl(tmp_path, urls, rules, retries=0)
    blocked = [result for result in results if result.get("blocked")]
    assert blocked
    for result in blocked:
        assert (result["outcome"], result["status"]) == ("exhausted", 200)
        assert result["block_rule"] == "verify you are human:200"
        assert "blocked: verify you are human:200" in result["error"]
    assert not summary.complete


async def test_a_bare_challenge_page_is_a_block_by_default_and_content_without_the_defaults(
        tmp_path: Path) -> None:
    """The header-less variant: the default rules know the page; turned off, only a user rule would."""
    spec = {"site": [{"name": "shield", "profile": "challenge", "rate": 0.2, "burst": 1, "pages": 3,
                      "header": False}]}
    async with Farm(spec) as farm:
        _, results = await run_crawl(tmp_path, pages(farm), {}, retries=0)
        site = farm.stats()["shield"]
    blocked = [result for result in results if result.get("blocked")]
    assert len(blocked) == site["challenged"] >= 1
    assert {(result["outcome"], result["block_rule"]) for result in blocked} == {
        ("exhausted", "default cloudflare challenge")}
    assert set(site["challenged_paths"]) == {result["url"].removeprefix(site["url"]) for result in blocked}
    async with Farm(spec) as farm:
        (tmp_path / "off").mkdir()
        _, results = await run_crawl(tmp_path / "off", pages(farm), {"THROTTLING_BLOCK_DEFAULTS": False},
                                     retries=0)
        site = farm.stats()["shield"]
    assert site["challenged"] >= 1
    assert {result["outcome"] for result in results} == {"ok"}  # taken for content


def test_the_challenge_profile_is_a_token_bucket_with_a_capacity() -> None:
    site = ChallengeSite(rate=2.0, burst=3)
    assert (site.capacity, site.profile, site.header) == (2.0, "challenge", True)


async def test_the_scrapy_addon_retries_challenge_pages(tmp_path: Path) -> None:
    # Without the header: the add-on finds the page by the default rules, with no rule of the user's.
    spec = {"site": [{"name": "shield", "profile": "challenge", "rate": 10.0, "burst": 2, "pages": 10,
                      "header": False}]}
    async with Farm(spec) as farm:
        urls = pages(farm)
        result = await scrapy_crawl(tmp_path, urls, {**SCRAPY_FAST, **UNPACED})
        site = farm.stats()["shield"]
    assert result.returncode == 0, result.log[-3000:]
    assert site["challenged"] >= 1
    assert site["ok"] == len(urls) + 1
    # Each challenge page backed the site off as a soft block; none was still blocked after its retry.
    assert result.stats["throttling/backoffs/soft_block"] == site["challenged"]
    assert "throttling/backoffs/status/200" not in result.stats
    assert "throttling/blocked" not in result.stats
    assert result.stats["retry/count"] >= site["challenged"]
    assert {record["url"]: record.get("status") for record in result.records} == dict.fromkeys(urls, 200)


def test_the_command_line_turns_the_defaults_off_over_the_settings_file(tmp_path: Path) -> None:
    from crawlpace.cli import _parser
    from crawlpace.cli.crawl import build_settings

    config = tmp_path / "crawlpace.toml"
    config.write_text("block_defaults = false\n", encoding="utf-8")

    def defaults(*flags: str) -> bool:
        args = _parser().parse_args(["crawl", "urls.txt", "-o", "out.jsonl", *flags])
        return build_settings(args).block_defaults

    assert defaults()
    assert not defaults("--no-block-defaults")
    assert not defaults("--config", str(config))
    assert defaults("--config", str(config), "--block-defaults")
