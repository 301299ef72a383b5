"""Who is really asking: the client address, through trusted proxies only.

Behind a reverse proxy or load balancer, the ASGI peer address is the
proxy's, and the client's is in a forwarding header. Anybody can send that
header, so it is believed only when the peer is a proxy the owner named, and
then read from the right: each hop appends the address it received the
request from, so the rightmost entry not belonging to a trusted proxy is the
first one no trusted party vouches for beyond, the client. Entries to its left
were written by the client itself and are ignored.

The ASGI server in front may have read the header already: uvicorn, by
default, trusts 127.0.0.1 and replaces ``scope["client"]`` with the address
the header names, so a request from a local proxy (or from anyone, with
``--forwarded-allow-ips="*"``) arrives with a client address nobody the owner
named vouches for. With no ``trusted_proxies``, a client address that the
request's own forwarding header names is taken for such a rewrite: the
address is then unknown (``""``), it confirms no crawler, and a warning says
how to set the server up.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, MutableMapping
from typing import Any, Literal

__all__ = ["ClientAddress", "Network", "parse_networks"]

_log = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
ForwardedHeader = Literal["x-forwarded-for", "forwarded"]


def parse_networks(entries: Iterable[str], what: str) -> tuple[Network, ...]:
    """Parse addresses and CIDR ranges (``"10.0.0.0/8"``, ``"::1"``).

    Raises:
        ValueError: naming ``what`` and the entry that is not a range.
    """
    if isinstance(entries, str):
        entries = (entries,)
    networks: list[Network] = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ValueError(f"{what}: {entry!r} is not an IP address or CIDR range such as "
                             f"'192.0.2.0/24' or '2001:db8::/32'") from None
    return tuple(networks)


def _address(text: str) -> Address | None:
    """An address from a header entry: brackets, ports and quotes removed; None if malformed."""
    text = text.strip().strip('"')
    if text.startswith("["):  # "[2001:db8::1]:443"
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # "192.0.2.1:443"
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _forwarded_for(value: str) -> list[str]:
    """The ``for=`` values of an RFC 7239 ``Forwarded`` header, in order."""
    found: list[str] = []
    for element in value.split(","):
        for pair in element.split(";"):
            name, _, text = pair.partition("=")
            if name.strip().lower() == "for":
                found.append(text)
    return found


def _in(address: Address, networks: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network for network in networks)


class ClientAddress:
    """Find a request's client address, believing forwarding headers from trusted proxies only.

    Args:
        trusted_proxies: addresses or CIDR ranges of the owner's proxies.
            Empty (the default): the peer address is the client's, and
            forwarding headers are ignored.
        header: which header the proxies write: ``"x-forwarded-for"`` or
            the standard ``"forwarded"``.

    Raises:
        ValueError: for a malformed range or an unknown header.
    """

    def __init__(self, trusted_proxies: Iterable[str] = (),
                 header: ForwardedHeader = "x-forwarded-for") -> None:
        self._trusted = parse_networks(trusted_proxies, "trusted_proxies")
        if header not in ("x-forwarded-for", "forwarded"):
            raise ValueError(f"forwarded_header must be 'x-forwarded-for' or 'forwarded', got {header!r}")
        self._header = header.encode("ascii")
        self._warned = False

    @property
    def trusted(self) -> tuple[Network, ...]:
        """The trusted proxies' ranges."""
        return self._trusted

    def of(self, scope: MutableMapping[str, Any]) -> str:
        """The client address of an ASGI connection scope, as text (empty when unknown)."""
        client = scope.get("client")
        peer_text = str(client[0]) if client else ""
        if not self._trusted:
            if peer_text and self._rewritten(scope, peer_text):
                return ""
            return peer_text
        peer = _address(peer_text)
        if peer is None or not _in(peer, self._trusted):
            return peer_text
        entries: list[str] = []
        for raw_name, raw_value in scope.get("headers") or ():
            if bytes(raw_name).lower() == self._header:
                value = bytes(raw_value).decode("latin-1")
                entries += _forwarded_for(value) if self._header == b"forwarded" else value.split(",")
        found = peer
        for entry in reversed(entries):
            address = _address(entry)
            if address is None:
                _log.debug("guard: unreadable forwarding entry %r; taking %s as the client",
                           entry[:64], found)
                break
            found = address
            if not _in(address, self._trusted):
                break
        return str(found)

    def _rewritten(self, scope: MutableMapping[str, Any], peer_text: str) -> bool:
        """Whether the server took the client address from a forwarding header no trusted proxy wrote."""
        peer = _address(peer_text)
        if peer is None:
            return False
        for raw_name, raw_value in scope.get("headers") or ():
            name = bytes(raw_name).lower()
            if name not in (b"x-forwarded-for", b"forwarded"):
                continue
            value = bytes(raw_value).decode("latin-1")
            entries = _forwarded_for(value) if name == b"forwarded" else value.split(",")
            if any(_address(entry) == peer for entry in entries):
                if not self._warned:
                    self._warned = True
                    _log.warning(
                        "guard: the server in front replaced the client address %s with one from %s, and "
                        "trusted_proxies names no proxy: such addresses are treated as unknown (they confirm "
                        "no crawler). Behind a proxy, name it in trusted_proxies and give the server the "
                        "same list (uvicorn --forwarded-allow-ips, gunicorn forwarded_allow_ips); without "
                        "one, run uvicorn with --no-proxy-headers", peer_text, name.decode())
                return True
        return False

    def __repr__(self) -> str:
        return f"<ClientAddress trusted={[str(n) for n in self._trusted]} header={self._header.decode()}>"
