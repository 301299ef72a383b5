"""Farms: reading descriptions, giving each site a loopback address, the control endpoint."""

from __future__ import annotations

import errno
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawlpace import ConfigError
from crawlpace.sim import PROFILES, Farm, ShiftingSite, SimServer, SlowSite, builtin_farms, parse_farm
from crawlpace.testing import MockClock

TWO_SITES: dict[str, Any] = {"site": [
    {"name": "slowshop", "profile": "ratelimit", "rate": 2.0, "burst": 2},
    {"name": "blog", "profile": "crawldelay", "delay": 1, "pages": 4},
    {"name": "gone", "profile": "dead"},
]}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        yield http


def problems_of(spec: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_farm(spec)
    return caught.value.problems


# --- addresses -------------------------------------------------------------------------------------


async def test_each_site_gets_its_own_alias_on_one_port(client: httpx.AsyncClient) -> None:
    clock = MockClock(50.0)
    async with Farm(TWO_SITES, clock=clock.now) as farm:
        assert farm.aliases
        assert [site.host for site in farm.sites] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        assert len({site.port for site in farm.sites}) == 1
        assert [site.profile for site in farm.sites] == ["ratelimit", "crawldelay", "dead"]
        blog = farm.site("blog")
        assert blog.url == f"http://127.0.0.3:{blog.port}"
        assert "Crawl-delay: 1" in (await client.get(f"{blog.url}/robots.txt")).text
        assert (await client.get(f"{farm.site('gone').url}/")).status_code == 503
        assert (await client.get(f"{farm.site('slowshop').url}/page/1")).status_code == 200
        report = farm.stats()
        assert farm.control_url is None
    assert list(report) == ["slowshop", "blog", "gone"]
    assert report["blog"]["profile"] == "crawldelay"
    assert report["blog"]["url"] == blog.url
    assert report["blog"]["first"] == 50.0
    assert report["blog"]["capacity"] == 1.0
    assert report["gone"]["throttled"] == 1
    with pytest.raises(KeyError):
        farm.site("nowhere")


async def test_an_explicit_port_is_shared_by_every_site() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        port = probe.getsockname()[1]
    async with Farm({**TWO_SITES, "port": port}) as farm:
        assert {site.port for site in farm.sites} == {port}


async def test_a_port_taken_on_one_alias_means_another_try(monkeypatch: pytest.MonkeyPatch) -> None:
    start = SimServer.start
    refused: list[str] = []

    async def flaky_start(self: SimServer) -> None:
        if self.host == "127.0.0.3" and not refused:
            refused.append(self.host)
            raise OSError(errno.EADDRINUSE, "address already in use")
        await start(self)

    monkeypatch.setattr(SimServer, "start", flaky_start)
    async with Farm(TWO_SITES) as farm:
        assert refused == ["127.0.0.3"]
        assert farm.aliases
        assert len({site.port for site in farm.sites}) == 1


async def test_an_explicit_port_taken_elsewhere_is_an_error() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.3", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        farm = Farm(TWO_SITES, port=port)
        with pytest.raises(OSError, match="address already in use") as caught:
            await farm.start()
        assert caught.value.errno == errno.EADDRINUSE
        assert farm.sites == ()
    # Nothing stayed bound on the first alias.
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", port))


async def test_without_aliases_sites_share_127_0_0_1_on_separate_ports(
        monkeypatch: pytest.MonkeyPatch, client: httpx.AsyncClient) -> None:
    start = SimServer.start

    async def no_aliases(self: SimServer) -> None:
        if self.host != "127.0.0.1":
            raise OSError(errno.EADDRNOTAVAIL, "cannot assign requested address")
        await start(self)

    monkeypatch.setattr(SimServer, "start", no_aliases)
    async with Farm(TWO_SITES) as farm:
        assert not farm.aliases
        assert {site.host for site in farm.sites} == {"127.0.0.1"}
        assert len({site.port for site in farm.sites}) == 3
        assert (await client.get(f"{farm.site('gone').url}/")).status_code == 503


async def test_a_farm_starts_once_and_closes_twice() -> None:
    farm = Farm(TWO_SITES)
    async with farm:
        with pytest.raises(RuntimeError, match="only once"):
            await farm.start()
    await farm.close()


@pytest.mark.parametrize("port", [-1, 65536, True, 1.5])
def test_farm_port_arguments_are_checked(port: Any) -> None:
    with pytest.raises(ValueError, match="port must be an integer"):
        Farm(TWO_SITES, port=port)
    with pytest.raises(ValueError, match="control_port must be an integer"):
        Farm(TWO_SITES, control_port=port)


# --- the control endpoint --------------------------------------------------------------------------


async def test_control_endpoint_serves_the_statistics(client: httpx.AsyncClient) -> None:
    async with Farm(TWO_SITES, control=True) as farm:
        assert farm.control_url is not None
        assert farm.control_url.startswith("http://127.0.0.1:")
        await client.get(f"{farm.site('slowshop').url}/page/1")
        response = await client.get(f"{farm.control_url}/stats")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.json() == farm.stats()
        assert response.json()["slowshop"]["ok"] == 1
        sites = (await client.get(f"{farm.control_url}/sites")).json()
        assert [site["name"] for site in sites] == ["slowshop", "blog", "gone"]
        assert sites[0]["url"] == farm.site("slowshop").url
        assert (await client.get(f"{farm.control_url}/other")).status_code == 404


# --- descriptions ----------------------------------------------------------------------------------


def test_a_valid_description_is_read() -> None:
    spec = parse_farm({"port": 8123, "site": [
        {"name": "a", "profile": "ratelimit", "rate": 3, "seed": 7},
        {"name": "b.example", "profile": "quota", "quota": 10},
    ]})
    assert spec.port == 8123
    first, second = spec.sites
    assert first.params == {"rate": 3.0}
    assert isinstance(first.params["rate"], float)
    assert first.seed == 7
    assert second.name == "b.example"


@pytest.mark.parametrize(("spec", "expected"), [
    ([], "expected a table with [[site]] entries"),
    ({}, "no sites; add at least one [[site]] table"),
    ({"site": []}, "no sites"),
    ({"site": {"name": "a"}}, "is not a list of tables"),
    ({"site": ["shop"]}, 'site #1: expected a table such as {name = "shop"'),
    ({"sites": [], "site": [{"name": "a", "profile": "dead"}]},
     "farm: unknown key 'sites' = []; did you mean 'site'?"),
    ({"port": 70000, "site": [{"name": "a", "profile": "dead"}]},
     "farm: port = 70000 is too large; set port to an integer >= 0 and <= 65535"),
    ({"site": [{"profile": "dead"}]}, "site #1: missing key 'name'; add name = \"shop1\""),
    ({"site": [{"name": "a b", "profile": "dead"}]}, "site #1: name = \"a b\" is not a valid site name"),
    ({"site": [{"name": "a", "profile": "dead"}, {"name": "a", "profile": "dead"}]},
     "site 'a': name = \"a\" is also used by site #1; give every site its own name"),
    ({"site": [{"name": "a"}]}, "site 'a': missing key 'profile'; add profile = \"ratelimit\" (one of: "),
    ({"site": [{"name": "a", "profile": "ratelimt"}]},
     "site 'a': profile = \"ratelimt\" is not a known profile (did you mean 'ratelimit'?); set profile to"),
    ({"site": [{"name": "shop", "profile": "ratelimit"}]},
     "site 'shop': missing key 'rate' for profile 'ratelimit'; add rate, a number > 0 and <= 1e+06 "
     "(requests per second)"),
    ({"site": [{"name": "shop", "profile": "ratelimit", "rate": -2}]},
     "site 'shop': rate = -2 is too small; set rate to a number > 0"),
    ({"site": [{"name": "shop", "profile": "ratelimit", "rate": "fast"}]},
     "site 'shop': rate = \"fast\" is not a number; set rate to a number > 0"),
    ({"site": [{"name": "shop", "profile": "ratelimit", "rate": 1, "burts": 2}]},
     "site 'shop': unknown key 'burts' = 2 for profile 'ratelimit'; did you mean 'burst'? remove it or use"),
    ({"site": [{"name": "shop", "profile": "ratelimit", "rate": 1, "retry_after": "no"}]},
     "site 'shop': retry_after = \"no\" is not true or false; set retry_after to true or false"),
    ({"site": [{"name": "shop", "profile": "quota", "quota": 5, "window": 0}]},
     "site 'shop': window = 0 is too small"),
    ({"site": [{"name": "shop", "profile": "dead", "seed": -1}]}, "site 'shop': seed = -1 is too small"),
    ({"site": [{"name": "x", "profile": "dead"}] * 4001}, "4001 sites is too many"),
    ({"site": [{"name": "api", "profile": "headers", "limit": 5, "style": "github"}]},
     "site 'api': style = \"github\" is not an accepted word; set style to one of 'ietf', 'draft07', "
     "'trio', 'x-ratelimit', 'x-rate-limit', 'reset-after', 'policy' (the rate-limit header family)"),
    ({"site": [{"name": "old", "profile": "slow", "low": 3.0, "high": 2.0}]},
     "site 'old': high = 2.0 is below low = 3.0; set high to at least low"),
    ({"site": [{"name": "f", "profile": "flaky", "errors": 0.7, "hangs": 0.7}]},
     "site 'f': errors = 0.7 and hangs = 0.7 add up to more than 1; lower one of them"),
    ({"site": [{"name": "m", "profile": "shifting", "base": "dead", "changes": [[1, 2]]}]},
     "site 'm': base = \"dead\" is not an accepted word; set base to one of 'ratelimit', 'retryafter', "
     "'headers', 'overload', 'slow'"),
    ({"site": [{"name": "m", "profile": "shifting", "base": "ratelimit", "changes": [[1, 2]]}]},
     "site 'm': missing key 'rate' for profile 'shifting'"),
    ({"site": [{"name": "m", "profile": "shifting", "base": "ratelimit", "rate": 2, "delay": 1,
                "changes": [[1, 2]]}]},
     "site 'm': unknown key 'delay' = 1 for profile 'shifting'"),
    ({"site": [{"name": "m", "profile": "shifting", "base": "ratelimit", "rate": 2,
                "changes": [[5, 2], [5, 1]]}]},
     "site 'm': changes = [[5, 2], [5, 1]] has seconds that are negative or not strictly increasing; set "
     "changes to a list such as [[60, 0.5], [120, 1.0]]"),
    ({"site": [{"name": "m", "profile": "shifting", "base": "slow", "changes": [[5, 0]]}]},
     "site 'm': changes = [[5, 0]] has a factor 0 outside (0, 1000]"),
    ({"site": [{"name": "m", "profile": "shifting", "base": "slow", "changes": []}]},
     "site 'm': changes = [] is not a list of [seconds, factor] pairs"),
])
def test_invalid_descriptions_are_explained(spec: Any, expected: str) -> None:
    problems = problems_of(spec)
    assert any(expected in problem for problem in problems), problems


def test_shifting_sites_are_built_with_their_base_parameters() -> None:
    farm = Farm({"site": [{"name": "m", "profile": "shifting", "base": "slow", "low": 0.5, "high": 0.5,
                           "limit": 2, "changes": [[60, 0.5]], "seed": 3}]})
    spec = farm.spec.sites[0]
    assert spec.params == {"base": "slow", "low": 0.5, "high": 0.5, "limit": 2, "changes": ((60.0, 0.5),)}
    site = farm._apps[0]
    assert isinstance(site, ShiftingSite)
    assert isinstance(site.inner, SlowSite)
    assert site.capacity == 4.0


def test_every_problem_is_reported_at_once() -> None:
    problems = problems_of({"site": [
        {"name": "a", "profile": "ratelimit", "rate": 0, "burst": 0},
        {"name": "b", "profile": "nope"},
    ], "extra": 1})
    assert len(problems) == 4
    assert [problem.split(":")[0] for problem in problems] == ["farm", "site 'a'", "site 'a'", "site 'b'"]


def test_config_error_message_has_one_line_per_problem() -> None:
    with pytest.raises(ConfigError) as caught:
        Farm({"site": [{"name": "a", "profile": "ratelimit"}, {"name": "b", "profile": "crawldelay"}]})
    assert str(caught.value).count("\n") == 1
    assert isinstance(caught.value, ValueError)


# --- files -----------------------------------------------------------------------------------------


def test_from_toml_reads_the_file_layout(tmp_path: Path) -> None:
    path = tmp_path / "farm.toml"
    path.write_text('port = 0\n\n[[site]]\nname = "slowshop"\nprofile = "ratelimit"\nrate = 2.0\nburst = 2\n')
    farm = Farm.from_toml(path)
    assert [site.name for site in farm.spec.sites] == ["slowshop"]
    assert farm.spec.sites[0].params == {"rate": 2.0, "burst": 2}


def test_from_toml_names_the_file_in_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[[site]\nname = ")
    with pytest.raises(ConfigError, match=r"broken\.toml: not a valid UTF-8 TOML file"):
        Farm.from_toml(broken)
    invalid = tmp_path / "invalid.toml"
    invalid.write_text('[[site]]\nname = "x"\nprofile = "ratelimit"\n')
    with pytest.raises(ConfigError, match=r"invalid\.toml: site 'x': missing key 'rate'"):
        Farm.from_toml(invalid)
    with pytest.raises(FileNotFoundError):
        Farm.from_toml(tmp_path / "absent.toml")


def test_the_mixed_farm_has_one_site_per_profile() -> None:
    assert "mixed" in builtin_farms()
    farm = Farm.builtin("mixed")
    # Shown by the limiters farm, so that mixed stays as measured.
    newer = {"window", "reqrate", "conncap", "queue"}
    assert sorted(site.profile for site in farm.spec.sites) == sorted(set(PROFILES) - newer)
    limiters = {site.profile for site in Farm.builtin("limiters").spec.sites}
    assert newer <= limiters
    with pytest.raises(ConfigError, match="use one of: fairness, hard, headers, limiters, mixed"):
        Farm.builtin("nonesuch")


async def test_the_mixed_farm_serves(client: httpx.AsyncClient) -> None:
    async with Farm.builtin("mixed") as farm:
        for site in farm.sites:
            expected = 503 if site.profile == "dead" else 200
            assert (await client.get(f"{site.url}/robots.txt")).status_code == expected, site.name
        report = farm.stats()
    assert all(entry["requests"] == 1 for entry in report.values())
    capacities = {entry["profile"]: entry["capacity"] for entry in report.values()}
    assert capacities["ratelimit"] == 2.0
    assert capacities["crawldelay"] == 2.0
    assert capacities["quota"] == 2.0
    assert capacities["dead"] == 0.0


@pytest.mark.parametrize("name", ["fairness", "headers", "mixed", "ratelimits", "shifting"])
def test_every_shipped_farm_is_valid(name: str) -> None:
    farm = Farm.builtin(name)
    assert len(farm.spec.sites) >= 3
    assert all(app.capacity is None or app.capacity >= 0 for app in farm._apps)
