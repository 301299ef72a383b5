"""The public API is exactly what ``__all__`` lists, kept sorted."""

from __future__ import annotations

import crawlpace


def test_all_is_sorted_and_complete() -> None:
    public = sorted((name for name in vars(crawlpace) if not name.startswith("_")), key=str.casefold)
    subpackages = {"policy", "stores", "cli", "testing", "guard", "sim", "frontier", "crawl", "http",
                   "scrapy", "requests", "aiohttp", "observe", "budgets"}
    public = [name for name in public if name not in subpackages]
    assert sorted(crawlpace.__all__, key=str.casefold) == sorted([*public, "__version__"],
                                                                 key=str.casefold)
    assert crawlpace.__all__ == sorted(crawlpace.__all__)


def test_version_comes_from_the_package_metadata() -> None:
    # One version, written once in pyproject.toml: __version__, --version and the
    # default User-Agent all read it from the installed metadata.
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    from crawlpace._user_agent import DEFAULT_USER_AGENT

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
    assert crawlpace.__version__ == version("crawlpace") == declared
    assert f"crawlpace/{declared}" == DEFAULT_USER_AGENT


def test_client_modules_export_what_they_define() -> None:
    import crawlpace.aiohttp
    import crawlpace.http
    import crawlpace.requests

    for module in (crawlpace.http, crawlpace.requests, crawlpace.aiohttp):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
        assert module.__all__ == sorted(module.__all__)


def test_every_client_module_reads_the_attempt_count_the_same_way() -> None:
    import crawlpace.aiohttp
    import crawlpace.http
    import crawlpace.requests

    assert crawlpace.http.attempts is crawlpace.requests.attempts is crawlpace.aiohttp.attempts
    for module in (crawlpace.http, crawlpace.requests, crawlpace.aiohttp):
        assert "attempts" in module.__all__
