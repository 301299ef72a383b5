"""Refreshing a crawler's published IP ranges from the JSON file its owner publishes.

Google and Bing publish the addresses their crawlers use as JSON:
``{"creationTime": "...", "prefixes": [{"ipv4Prefix": "66.249.64.0/27"},
{"ipv6Prefix": "2001:4860:4801:10::/64"}, ...]}``. :func:`refresh` checks such
a file (every entry must be a range) and writes the ranges file the guard
reads (``bot_ranges={"googlebot": "googlebot.txt"}``): one range per line,
with a comment saying where they came from. The file is replaced atomically,
so a guard starting meanwhile reads the old list or the new one, never half.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ._address import Network, parse_networks
from ._verify import load_ranges

__all__ = ["Refresh", "refresh"]


@dataclass(frozen=True, slots=True)
class Refresh:
    """What a refresh found: the ranges, the file's date, and the change from the old list."""

    ranges: tuple[Network, ...]
    created: str | None
    added: tuple[Network, ...]
    removed: tuple[Network, ...]

    def describe(self) -> str:
        """One line for the owner."""
        v4 = sum(1 for net in self.ranges if net.version == 4)
        when = f", published {self.created}" if self.created else ""
        return (f"{len(self.ranges)} ranges ({v4} IPv4, {len(self.ranges) - v4} IPv6){when}; "
                f"{len(self.added)} added, {len(self.removed)} removed")


def _published(source: Path) -> tuple[tuple[Network, ...], str | None]:
    text = source.read_text("utf-8")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{source}: not JSON ({exc}); download the crawler's published list, e.g. "
                         "https://developers.google.com/static/search/apis/ipranges/googlebot.json") from None
    if not isinstance(data, dict) or not isinstance(data.get("prefixes"), list) or not data["prefixes"]:
        raise ValueError(f"{source}: no \"prefixes\" list; a published ranges file looks like "
                         "{\"prefixes\": [{\"ipv4Prefix\": \"66.249.64.0/27\"}, ...]}")
    entries: list[str] = []
    for item in data["prefixes"]:
        found = [str(value) for key, value in (item.items() if isinstance(item, dict) else ())
                 if key in ("ipv4Prefix", "ipv6Prefix")]
        if not found:
            raise ValueError(f"{source}: the entry {item!r} has no ipv4Prefix or ipv6Prefix")
        entries += found
    created = data.get("creationTime")
    return parse_networks(entries, str(source)), None if created is None else str(created)


def refresh(source: str | Path, target: str | Path | None = None) -> Refresh:
    """Read a published ranges file and, with ``target``, write the guard's ranges file from it.

    Raises:
        ValueError: for a file that is not a published list of ranges (nothing is written).
        OSError: when a file cannot be read or written.
    """
    source = Path(source)
    ranges, created = _published(source)
    old: tuple[Network, ...] = ()
    if target is not None and Path(target).exists():
        try:
            old = load_ranges(Path(target))
        except ValueError:
            old = ()
    added = tuple(net for net in ranges if net not in old)
    removed = tuple(net for net in old if net not in ranges)
    if target is not None:
        path = Path(target)
        header = f"# from {source.name}" + (f", published {created}" if created else "") + "\n"
        body = header + "".join(f"{net}\n" for net in ranges)
        handle, temporary = tempfile.mkstemp(dir=path.parent or Path("."), prefix=f".{path.name}.")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(body)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return Refresh(ranges, created, added, removed)
