"""Options that several commands share: the store, the namespace, the closing JSON line.

``crawl``, ``status``, ``dashboard``, ``enqueue`` and ``purge`` all name a
shared store the same way (``--store URL``, also spelled ``--redis``) and a
crawl job within it (``--namespace``); this module declares those options
once, so that their spelling, destination and the URL forms shown in the help
cannot drift apart between commands. Each command still says in its own words
what the store is for.
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlencode, urlsplit

from .._exceptions import ConfigError
from ..stores import REDIS_SCHEMES

__all__ = ["URL_FORMS", "add_json_option", "add_store_options", "require_redis", "store_url"]

#: The store URL forms, as every command's help lists them.
URL_FORMS = "redis://host:6379/0, rediss://..., unix:///path"


def add_store_options(parser: Any, *, store_help: str, namespace_help: str, default: str | None = None,
                      namespace_required: bool = False) -> None:
    """Declare ``--store URL`` (alias ``--redis``) and ``--namespace`` on ``parser``.

    Args:
        parser: the subcommand's parser or argument group.
        store_help: what the store is, for this command.
        namespace_help: what the namespace selects, for this command.
        default: the store when the option is left out; None makes it required.
        namespace_required: whether ``--namespace`` must be given.
    """
    parser.add_argument("--store", "--redis", dest="store", metavar="URL", required=default is None,
                        default=default, help=store_help)
    parser.add_argument("--namespace", required=namespace_required, help=namespace_help)


def add_json_option(parser: Any, holding: str = "every figure") -> None:
    """Declare ``--json``: end the output with one line of JSON holding ``holding``."""
    parser.add_argument("--json", action="store_true", help=f"end with one line of JSON holding {holding}")


def store_url(url: str, namespace: str | None) -> str:
    """The store URL with ``--namespace`` added to its options."""
    if not namespace:
        return url
    return f"{url}{'&' if '?' in url else '?'}{urlencode({'namespace': namespace})}"


def require_redis(args: argparse.Namespace, why: str) -> None:
    """Refuse a ``--store`` that is not a Redis URL, saying ``why`` the command needs one.

    Raises:
        ConfigError: naming the option, the value given and an example.
    """
    if urlsplit(args.store).scheme not in REDIS_SCHEMES:
        raise ConfigError([f"--store: {args.store!r} is not a Redis URL; {why}: give one such as "
                           "--store redis://127.0.0.1:6379/0"])
