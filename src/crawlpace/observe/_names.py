"""Site names for scopes whose key alone says little (``127.0.0.7``, an IP address).

A scope is keyed by what admission shares: a host by default, an address or a
registrable domain with ``--scope-by``. The simulator gives each of its sites
an address of its own (127.0.0.2, 127.0.0.3, ...), so a dashboard keyed by
scope shows a column of addresses where the operator thinks of ``challenge``
or ``deadlink``. :func:`read_site_names` reads the names once, at start-up,
from where they are known:

- a ``crawlpace sim`` control address: ``http://127.0.0.1:PORT/sites`` (a list
  of sites with their URLs) or ``.../stats`` (site name -> figures with a
  ``url``);
- a JSON file holding either of those (``crawlpace sim --output`` writes the
  second), or a plain mapping of scope to name (``{"93.184.215.14":
  "example.com"}``).

The dashboards show the name beside the key, and the metrics export it as
``crawlpace_scope_info{scope, site}`` for Grafana to join on.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .._exceptions import ConfigError

__all__ = ["MAX_NAME", "read_site_names", "site_names_of"]

logger = logging.getLogger(__name__)

#: Characters of a site name kept at most (a label value, a table cell).
MAX_NAME = 80
# Seconds to wait for a control address to answer.
TIMEOUT = 10.0


def _host(url: Any) -> str | None:
    try:
        host = urlsplit(str(url)).hostname
    except ValueError:
        return None
    return host or None


def _clean(name: Any) -> str:
    text = " ".join(str(name).split())
    return text[:MAX_NAME]


def site_names_of(data: Any) -> dict[str, str]:
    """Scope -> site name from a simulator's ``/sites`` or ``/stats`` answer, or a plain mapping.

    Sites sharing a host (a farm without loopback aliases serves every site on
    127.0.0.1, one port each, and the host is one scope) are named together,
    ``"a, b"``. Entries that name no host are skipped.

    Raises:
        ValueError: when ``data`` is none of the accepted shapes.
    """
    found: dict[str, list[str]] = {}

    def add(host: str | None, name: Any) -> None:
        if host and name not in (None, ""):
            found.setdefault(host, []).append(_clean(name))

    if isinstance(data, list):
        for item in data:
            if isinstance(item, Mapping):
                add(str(item["host"]) if item.get("host") else _host(item.get("url")), item.get("name"))
    elif isinstance(data, Mapping):
        for key, value in data.items():
            if isinstance(value, Mapping):  # name -> figures with a url
                add(_host(value.get("url")), key)
            elif isinstance(value, str):  # scope -> name
                add(str(key), value)
    else:
        raise ValueError("expected a list of sites or a mapping")
    if data and not found:
        raise ValueError("no site in it names a host")
    return {host: ", ".join(sorted(set(names))) for host, names in found.items()}


def read_site_names(source: str, option: str = "--sites") -> dict[str, str]:
    """Read scope -> site name from a simulator's address or a JSON file (see the module's text).

    Raises:
        ConfigError: naming ``option``, the source and the fix, when it cannot be
            read or holds no site names.
    """
    fix = ("give a crawlpace sim control address (http://127.0.0.1:PORT/sites) or a JSON file of "
           "scope -> name")
    try:
        if urlsplit(source).scheme in ("http", "https"):
            with urllib.request.urlopen(source, timeout=TIMEOUT) as answer:
                text = answer.read().decode("utf-8")
        else:
            text = Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError([f"{option} {source}: cannot be read ({exc}); {fix}"]) from None
    try:
        names = site_names_of(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError([f"{option} {source}: holds no site names ({exc}); {fix}"]) from None
    logger.info("%s: %d site names read from %s", option, len(names), source)
    return names
