"""A farm: many simulated sites served at once by one asyncio process.

Each site gets an address of its own, 127.0.0.2, 127.0.0.3 and so on, all on
one port, so a crawler sees distinct hosts (and throttles each separately)
exactly as it would on the web. Linux routes the whole of 127.0.0.0/8 to the
loopback interface, so no setup is needed there. Where only 127.0.0.1 exists
(macOS without aliases, for one), binding 127.0.0.2 fails and the farm falls
back to 127.0.0.1 with one port per site; crawlers that throttle per host and
port still tell the sites apart. :attr:`Farm.aliases` says which happened.

An optional control server on 127.0.0.1 publishes the statistics as JSON.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict, Unpack

from .._exceptions import ConfigError
from ._control import ControlApp
from ._plot import write_plot
from ._server import READ_TIMEOUT, SimServer
from ._site import Site
from ._spec import FarmSpec, build_site, parse_farm

__all__ = ["CONTROL_HOST", "FIRST_SITE_HOST", "Farm", "FarmOptions", "SiteInfo", "builtin_farms"]

_log = logging.getLogger(__name__)

#: The address of the first site; the next ones follow it.
FIRST_SITE_HOST = "127.0.0.2"
#: The address of the control server, and of every site when aliases are missing.
CONTROL_HOST = "127.0.0.1"
_PACKAGE = __name__.rpartition(".")[0]
# How many free ports to try before giving up on one that every site can share.
_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class SiteInfo:
    """Where one site of a running farm listens.

    Attributes:
        name: the site's name.
        profile: its profile name.
        host: its loopback address.
        port: its port.
        app: the site itself, with its statistics.
    """

    name: str
    profile: str
    host: str
    port: int
    app: Site = field(repr=False, compare=False)

    @property
    def url(self) -> str:
        """The base URL, such as ``http://127.0.0.2:8080``."""
        return f"http://{self.host}:{self.port}"

    def as_dict(self) -> dict[str, Any]:
        """The address as a JSON-ready dict."""
        return {"name": self.name, "profile": self.profile, "host": self.host, "port": self.port,
                "url": self.url, "capacity": self.app.capacity}


class FarmOptions(TypedDict, total=False):
    """Keyword arguments of :class:`Farm`, also accepted by its alternative constructors."""

    port: int | None
    control: bool
    control_port: int
    clock: Callable[[], float]
    read_timeout: float


def builtin_farms() -> list[str]:
    """The names of the farms shipped with crawlpace, for :meth:`Farm.builtin`."""
    folder = resources.files(_PACKAGE).joinpath("farms")
    return sorted(entry.name.removesuffix(".toml") for entry in folder.iterdir()
                  if entry.name.endswith(".toml"))


async def _close_all(servers: list[SimServer]) -> None:
    for server in servers:
        await server.close()
    servers.clear()


class Farm:
    """Serve the sites of a farm description, each on its own loopback address.

    Use it as an async context manager::

        async with Farm.builtin("mixed") as farm:
            for site in farm.sites:
                print(site.name, site.url)
            ...
            report = farm.stats()

    Args:
        spec: the farm description (see :func:`parse_farm` for its layout),
            as read from TOML, or an already checked :class:`FarmSpec`.
        port: the port every site shares, overriding the description's;
            0 picks a free one.
        control: also start the control server on 127.0.0.1.
        control_port: the control server's port, 0 for a free one.
        clock: the time source of every site.
        read_timeout: see :class:`SimServer`.

    Raises:
        ConfigError: listing every problem in the description.
        ValueError: for a port outside 0 to 65535.
    """

    def __init__(self, spec: Mapping[str, Any] | FarmSpec, *, port: int | None = None, control: bool = False,
                 control_port: int = 0, clock: Callable[[], float] = time.monotonic,
                 read_timeout: float = READ_TIMEOUT) -> None:
        self.spec = spec if isinstance(spec, FarmSpec) else parse_farm(spec)
        for label, value in (("port", port), ("control_port", control_port)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value <= 65535):
                raise ValueError(f"{label} must be an integer from 0 to 65535, got {value!r}")
        self._port = self.spec.port if port is None else port
        self._control_wanted = control
        self._control_port = control_port
        self._read_timeout = read_timeout
        self._apps = [build_site(site, clock=clock) for site in self.spec.sites]
        self._servers: list[SimServer] = []
        self._control: SimServer | None = None
        self._sites: tuple[SiteInfo, ...] = ()
        self._started = False
        self.aliases = True

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], **options: Unpack[FarmOptions]) -> Farm:
        """Read a farm description from a TOML file.

        Args:
            path: the file.
            **options: see :class:`Farm`.

        Raises:
            ConfigError: when the file is not TOML or describes an invalid
                farm; each line starts with the file name.
            OSError: when the file cannot be read.
        """
        return cls._from_text(str(path), Path(path).read_bytes(), options)

    @classmethod
    def builtin(cls, name: str = "mixed", **options: Unpack[FarmOptions]) -> Farm:
        """Load a farm shipped with crawlpace (see :func:`builtin_farms`).

        Raises:
            ConfigError: for an unknown name.
        """
        names = builtin_farms()
        if name not in names:
            raise ConfigError([f"farm {name!r} is not shipped with crawlpace; "
                               f"use one of: {', '.join(names)}"])
        source = resources.files(_PACKAGE).joinpath("farms", f"{name}.toml")
        return cls._from_text(f"{name}.toml", source.read_bytes(), options)

    @classmethod
    def _from_text(cls, label: str, data: bytes, options: FarmOptions) -> Farm:
        try:
            spec = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError([f"{label}: not a valid UTF-8 TOML file ({exc}); fix its syntax"]) from exc
        try:
            return cls(spec, **options)
        except ConfigError as exc:
            raise ConfigError([f"{label}: {problem}" for problem in exc.problems]) from None

    @property
    def sites(self) -> tuple[SiteInfo, ...]:
        """Every site and where it listens; empty until the farm is started."""
        return self._sites

    def site(self, name: str) -> SiteInfo:
        """The site called ``name``.

        Raises:
            KeyError: when there is none (or the farm is not started).
        """
        for info in self._sites:
            if info.name == name:
                return info
        raise KeyError(name)

    @property
    def control_url(self) -> str | None:
        """The control server's base URL, None when it is not running."""
        return None if self._control is None else self._control.url

    def stats(self, *, timeline: bool = False) -> dict[str, dict[str, Any]]:
        """Every site's statistics (see :class:`SiteStats`), with its profile and URL, by name.

        Args:
            timeline: add each site's second-by-second ``"timeline"``, what
                :func:`write_plot` draws.
        """
        return {info.name: {"profile": info.profile, "url": info.url,
                            **info.app.stats.as_dict(timeline=timeline)}
                for info in self._sites}

    def write_plot(self, path: str | os.PathLike[str]) -> None:
        """Draw every site's request rate over time into a PNG (needs matplotlib).

        Raises:
            PlotUnavailable: when matplotlib is not installed.
        """
        write_plot(self.stats(timeline=True), path)

    async def start(self) -> None:
        """Bind every site (and the control server) and start serving.

        Raises:
            OSError: when the addresses cannot be bound.
            RuntimeError: when the farm was started before.
        """
        if self._started:
            raise RuntimeError("a farm can be started only once")
        self._started = True
        try:
            await self._bind()
            if self._control_wanted:
                control = SimServer(ControlApp(self.stats, self._site_list), CONTROL_HOST, self._control_port,
                                    read_timeout=self._read_timeout)
                await control.start()
                self._control = control
        except BaseException:
            await self.close()
            raise
        self._sites = tuple(SiteInfo(spec.name, spec.profile, server.host, server.port, app)
                            for spec, app, server in zip(self.spec.sites, self._apps, self._servers,
                                                         strict=True))
        _log.info("farm of %d sites on %s", len(self._sites),
                  ", ".join(f"{info.name}={info.url}" for info in self._sites))

    async def close(self) -> None:
        """Stop every server; safe to call twice."""
        control, self._control = self._control, None
        if control is not None:
            await control.close()
        await _close_all(self._servers)

    async def __aenter__(self) -> Farm:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _site_list(self) -> list[dict[str, Any]]:
        return [info.as_dict() for info in self._sites]

    async def _bind(self) -> None:
        """Start one server per site, on aliases if possible, else on 127.0.0.1."""
        first = ipaddress.IPv4Address(FIRST_SITE_HOST)
        for _attempt in range(_ATTEMPTS):
            servers = self._servers
            try:
                for index, app in enumerate(self._apps):
                    port = self._port if index == 0 else servers[0].port
                    server = SimServer(app, str(first + index), port, read_timeout=self._read_timeout)
                    await server.start()
                    servers.append(server)
                return
            except OSError as exc:
                await _close_all(servers)
                if exc.errno == errno.EADDRNOTAVAIL:
                    _log.warning("cannot bind %s (%s): serving every site on %s, one port each",
                                 FIRST_SITE_HOST, exc.strerror, CONTROL_HOST)
                    await self._bind_separately()
                    return
                if exc.errno != errno.EADDRINUSE or self._port != 0:
                    raise
                _log.debug("a port chosen for the farm is taken on another address; trying another")
        raise OSError(errno.EADDRINUSE, f"found no port free on all {len(self._apps)} site addresses "
                                        f"in {_ATTEMPTS} attempts")

    async def _bind_separately(self) -> None:
        """Start every site on 127.0.0.1: free ports, or consecutive ones from an explicit port."""
        self.aliases = False
        for index, app in enumerate(self._apps):
            port = self._port + index if self._port else 0
            server = SimServer(app, CONTROL_HOST, port, read_timeout=self._read_timeout)
            await server.start()
            self._servers.append(server)
