"""Site names for scopes: read from a simulator's address or a file, at start-up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawlpace.cli import main
from crawlpace.observe._names import read_site_names, site_names_of
from crawlpace.sim import Farm


def test_names_come_from_the_sites_list_the_figures_or_a_plain_mapping() -> None:
    assert site_names_of([{"name": "shop", "host": "127.0.0.2", "url": "http://127.0.0.2:80"},
                          {"name": "api", "url": "http://127.0.0.3:80"}]) == {"127.0.0.2": "shop",
                                                                              "127.0.0.3": "api"}
    assert site_names_of({"shop": {"url": "http://127.0.0.2:80", "requests": 3}}) == {"127.0.0.2": "shop"}
    assert site_names_of({"93.184.215.14": "example.com"}) == {"93.184.215.14": "example.com"}
    # A farm without loopback aliases serves every site on 127.0.0.1: one scope, every name.
    assert site_names_of([{"name": "b", "url": "http://127.0.0.1:81"},
                          {"name": "a", "url": "http://127.0.0.1:80"}]) == {"127.0.0.1": "a, b"}
    # One line, 80 characters at most.
    assert site_names_of({"x": "  a\nname  " + "z" * 200})["x"] == "a name " + "z" * 73


async def test_a_running_farm_names_its_sites(tmp_path: Path) -> None:
    spec = {"site": [{"name": "alive", "profile": "ratelimit", "rate": 100.0, "pages": 1}]}
    async with Farm(spec) as farm:
        path = tmp_path / "sites.json"
        path.write_text(json.dumps(farm.stats()), encoding="utf-8")
        host = farm.site("alive").host
    assert read_site_names(str(path)) == {host: "alive"}


@pytest.mark.parametrize(("content", "why"), [
    (None, "cannot be read"),
    ("[1, 2]", "holds no site names"),
    ('"text"', "holds no site names"),
])
def test_a_source_without_names_is_refused_at_start_up(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        content: str | None, why: str) -> None:
    source = tmp_path / "names.json"
    if content is not None:
        source.write_text(content, encoding="utf-8")
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.9:9/\n", encoding="utf-8")
    code = main(["crawl", str(urls), "-o", str(tmp_path / "out.jsonl"), "--sites", str(source),
                 "--metrics-port", "0"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert f"--sites {source}: {why}" in err
    assert "give a crawlpace sim control address (http://127.0.0.1:PORT/sites) or a JSON file" in err
    assert not (tmp_path / "out.jsonl.state").exists()  # refused before the crawl began
