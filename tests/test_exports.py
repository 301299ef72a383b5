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


def test_version_is_set() -> None:
    assert crawlpace.__version__ == "0.6.0"


def test_client_modules_export_what_they_define() -> None:
    import crawlpace.aiohttp
    import crawlpace.http
    import crawlpace.requests

    for module in (crawlpace.http, crawlpace.requests, crawlpace.aiohttp):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
        assert module.__all__ == sorted(module.__all__)
