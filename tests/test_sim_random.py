"""Random farms: the draw is reproducible, reaches every kind within its ranges, and serves as drawn."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawlpace import ConfigError
from crawlpace.cli import main
from crawlpace.sim import HEADER_STYLES, Farm, RequestRateSite, ShiftingSite, parse_farm
from crawlpace.sim._random import RANDOM_KINDS, draw_farm, farm_toml
from crawlpace.sim._spec import build_site


def kind(site: dict[str, Any]) -> str:
    return str(site["name"]).rstrip("0123456789")


def test_the_same_seed_draws_the_same_farm() -> None:
    assert draw_farm(42, 30) == draw_farm(42, 30)
    assert draw_farm(42, 30) != draw_farm(43, 30)
    assert draw_farm(42, 10, kinds=("fixed",)) == draw_farm(42, 10, kinds=["fixed"])


def test_every_kind_is_dealt_before_any_comes_twice() -> None:
    sites = draw_farm(5, len(RANDOM_KINDS))["site"]
    assert sorted(kind(site) for site in sites) == sorted(RANDOM_KINDS)
    counts = Counter(kind(site) for site in draw_farm(5, 3 * len(RANDOM_KINDS))["site"])
    assert set(counts.values()) == {3}


def test_every_variant_is_reachable() -> None:
    sites = [site for seed in range(12) for site in draw_farm(seed, 30)["site"]]
    windows = [site for site in sites if site["profile"] == "window"]
    assert {site["kind"] for site in windows} == {"fixed", "sliding", "started"}
    # Flask-Limiter's windows: moving or opened by a request, whole seconds (``limits`` parses no other).
    flask = [site for site in windows if kind(site) == "flask"]
    assert {site["kind"] for site in flask} == {"sliding", "started"}
    assert all(float(site["window"]).is_integer() for site in flask)
    assert {site.get("count_refused") for site in windows} >= {True, False}
    assert {site["retry_after"] for site in windows} == {"none", "refusals", "every"}
    styles = {site["style"] for site in sites if site["profile"] in ("window", "headers")}
    assert styles == {"none", *HEADER_STYLES}
    bases = {site["base"] for site in sites if site["profile"] == "shifting"}
    assert bases == {"ratelimit", "window", "reqrate"}
    knees = [site for site in sites if site["profile"] == "overload"]
    assert any("knee" in site for site in knees)
    assert any("knee" not in site for site in knees)
    assert {site["status"] for site in sites if site["profile"] == "flaky"} == {500, 502, 503}
    lags = [site["lag"] for site in sites if site["profile"] == "conncap"]
    assert 0.0 in lags  # freed at once, as HAProxy's conn_cur and nginx's limit_conn do
    assert any(lag > 0 for lag in lags)
    queues = [site for site in sites if site["profile"] == "queue"]
    assert {site["status"] for site in queues} == {429, 503}
    assert any(site["delay"] == 0 for site in queues)
    assert any(0 < site["delay"] < site["burst"] for site in queues)  # nginx's two-stage ``delay=``


def test_parameters_stay_in_their_ranges() -> None:
    for seed in range(10):
        spec = draw_farm(seed, 45, seconds=60.0)
        checked = parse_farm(spec)  # every value passes the profiles' own checks
        for site, described in zip(spec["site"], checked.sites, strict=True):
            built = build_site(described)
            assert 10 <= site["pages"] <= 1500
            profile = site["profile"] if site["profile"] != "shifting" else site["base"]
            if profile in ("ratelimit", "retryafter", "challenge", "window", "reqrate", "headers", "queue"):
                assert 0.5 <= site.get("rate", 1.0) <= 60.0
                capacity = built.inner.capacity if isinstance(built, ShiftingSite) else built.capacity
                assert capacity is not None
                assert 0.5 <= capacity <= 61.0, site
            if "burst" in site:
                assert 1 <= site["burst"] <= 20
            if "embargo" in site:
                assert 1 <= site["embargo"] <= 60
            if profile in ("window", "headers"):
                assert 1.0 <= site["window"] <= 30.0  # at most half the 60 s a site takes
            if profile == "reqrate":
                assert 1.0 <= site["period"] <= 60.0
                assert site["limit"] >= 10
                assert 0.0 <= site["phase"] < 1.0
                counted = built.inner if isinstance(built, ShiftingSite) else built
                assert isinstance(counted, RequestRateSite)
                assert counted.counter.phase == site["phase"]
            if profile == "conncap":
                assert 1 <= site["cap"] <= 16
                assert 0.0 <= site["lag"] <= 0.1
            if profile == "flaky":
                assert 0.05 <= site["errors"] <= 0.3
                assert site["hangs"] <= 0.03
            if profile == "crawldelay":
                assert 0.2 <= site["delay"] <= 2.0
            if profile == "queue":
                assert 0 <= site["delay"] < site["burst"] or site["delay"] == 0


def test_bad_draws_are_refused() -> None:
    with pytest.raises(ValueError, match="use one or more of"):
        draw_farm(1, 3, kinds=("nonesuch",))
    with pytest.raises(ValueError, match="sites must be"):
        draw_farm(1, 0)
    with pytest.raises(ValueError, match="seconds must be"):
        draw_farm(1, 3, seconds=0.5)


def test_a_random_section_in_a_farm_file(tmp_path: Path) -> None:
    path = tmp_path / "farm.toml"
    path.write_text('[[site]]\nname = "mine"\nprofile = "dead"\n\n'
                    '[random]\nseed = 9\nsites = 4\nkinds = ["fixed", "reqrate"]\n', encoding="utf-8")
    farm = Farm.from_toml(path)
    assert farm.spec.sites[0].name == "mine"
    assert {site.profile for site in farm.spec.sites[1:]} == {"window", "reqrate"}
    assert len(farm.spec.sites) == 5
    with pytest.raises(ConfigError) as caught:
        parse_farm({"random": {"seed": -1, "site": 3, "kinds": ["nope"]}})
    text = str(caught.value)
    assert "random: seed = -1 is too small" in text
    assert "random: unknown key 'site' = 3; did you mean 'sites'?" in text
    assert "random: kinds = ['nope'] is not a list of kinds; use a list of some of: bucket, strict" in text


def test_sim_random_prints_and_writes_a_farm_that_reads_back(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "drawn.toml"
    assert main(["sim", "random", "--seed", "3", "--sites", "6", "--draw-only", "--write", str(path)]) == 0
    out = capsys.readouterr().out
    assert "# A random farm: crawlpace sim random --seed 3 --sites 6 --seconds 60" in out
    assert f"random farm written to {path}" in out
    assert tomllib.loads(path.read_text(encoding="utf-8")) == draw_farm(3, 6)
    assert main(["sim", "random", "--sites", "2", "--kinds", "bogus", "--draw-only"]) == 3
    assert "cannot draw a random farm" in capsys.readouterr().err
    assert main(["sim", "mixed", "--draw-only"]) == 3


def test_farm_toml_round_trips() -> None:
    spec = draw_farm(8, 20)
    assert tomllib.loads(farm_toml(spec, "a comment\non two lines")) == spec


async def test_a_random_farm_serves_and_refuses_as_drawn() -> None:
    spec = draw_farm(1, 3, kinds=("strict", "sliding", "reqrate"), seconds=4.0)
    sites = {kind(site): site for site in spec["site"]}
    assert sites["sliding"]["limit"] <= 30  # so that a burst is quick
    assert sites["reqrate"]["limit"] <= 30
    async with Farm(spec) as farm, httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
        url = {kind({"name": info.name}): info.url for info in farm.sites}
        strict = [(await client.get(f"{url['strict']}/page/1")).status_code for _ in range(2)]
        assert strict == [200, 429]  # no burst at 1.42/s: the second, at once, is refused
        limit = sites["sliding"]["limit"]
        codes = [(await client.get(f"{url['sliding']}/page/1")).status_code for _ in range(limit + 3)]
        assert codes == [200] * limit + [429] * 3
        limit = sites["reqrate"]["limit"]
        answers = [await client.get(f"{url['reqrate']}/page/1") for _ in range(limit + 3)]
        assert [answer.status_code for answer in answers] == [200] * limit + [429] * 3
        assert all("retry-after" not in answer.headers for answer in answers)  # HAProxy says nothing


def test_a_window_announced_with_its_length_is_whole_seconds() -> None:
    # The IETF, draft-07 and policy forms say the window as w=<seconds>: a 1.1 s window would be
    # announced as w=2, a limit the site does not have. Other forms only say when the window resets.
    sites = [site for seed in range(20) for site in draw_farm(seed, 15, kinds=("headers", "fixed"))["site"]]
    stated = [site for site in sites if site.get("style") in ("ietf", "draft07", "policy")]
    others = [site for site in sites if site.get("style") not in ("ietf", "draft07", "policy")]
    assert len(stated) > 20
    assert all(site["window"] == int(site["window"]) for site in stated)
    assert any(site["window"] != int(site["window"]) for site in others)
