"""Reading a farm description: the sites, their profiles and their parameters.

A farm is described by a mapping shaped like its TOML file::

    port = 0                  # optional: the port every site shares, 0 for a free one

    [[site]]
    name = "slowshop"
    profile = "ratelimit"
    rate = 2.0
    burst = 2

    [random]                  # optional: sites drawn at random (see crawlpace.sim._random)
    seed = 7
    sites = 30

Everything is checked before any socket is opened. All problems are reported
together in one :class:`~crawlpace.ConfigError`, one line each, naming the site,
the key, the offending value and what to write instead.
"""

from __future__ import annotations

import difflib
import json
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._exceptions import ConfigError
from ._params import Param, ParamValue
from ._profiles import PROFILES
from ._random import DEFAULT_SECONDS, RANDOM_KINDS, draw_farm
from ._site import Site

__all__ = ["MAX_SITES", "FarmSpec", "SiteSpec", "build_site", "parse_farm"]

#: The most sites one farm may hold (bench/broad.py serves 2,000, on 127.0.0.2 to 127.0.7.209).
MAX_SITES = 4000

_FARM_KEYS = ("port", "site", "random")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", re.ASCII)
_NAME_RULE = "letters, digits, '_', '-' and '.', starting with a letter or digit, at most 64"
_SEED = Param("seed", "integer", "seed of the site's random choices", 0, low=0, high=2**63 - 1)
_PORT = Param("port", "integer", "the port all sites share, 0 for a free one", 0, low=0, high=65535)
_RANDOM_PARAMS = (
    Param("seed", "integer", "seed of the draw", 0, low=0, high=2**63 - 1),
    Param("sites", "integer", "sites to draw", 30, low=1, high=MAX_SITES),
    Param("seconds", "number", "about how long a crawl of each site at its capacity takes", DEFAULT_SECONDS,
          low=2.0, high=86400.0),
)


@dataclass(frozen=True, slots=True)
class SiteSpec:
    """One checked site description.

    Attributes:
        name: the site's unique name.
        profile: the profile name, a key of :data:`~crawlpace.sim.PROFILES`.
        params: the profile parameters given (defaults are left to the profile).
        seed: the seed of the site's random generator.
    """

    name: str
    profile: str
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    seed: int = 0


@dataclass(frozen=True, slots=True)
class FarmSpec:
    """A checked farm description.

    Attributes:
        sites: the sites, in the order given.
        port: the port every site shares; 0 picks a free one.
    """

    sites: tuple[SiteSpec, ...]
    port: int = 0


def _show(value: object) -> str:
    """Render a value the way it would be written in TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unknown(key: str, accepted: list[str]) -> str:
    close = difflib.get_close_matches(key, accepted, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}remove it or use one of: {', '.join(sorted(accepted))}"


def _check_param(label: str, param: Param, value: object, problems: list[str]) -> ParamValue | None:
    problem = param.problem(value)
    if problem is None:
        return param.convert(value)
    problems.append(f"{label}: {param.name} = {_show(value)} {problem or 'is not valid'}; "
                    f"set {param.name} to {param.expected()}")
    return None


def _check_site(index: int, entry: object, seen: dict[str, str], problems: list[str]) -> SiteSpec | None:
    label = f"site #{index}"
    if not isinstance(entry, Mapping):
        problems.append(f"{label}: expected a table such as {{name = \"shop\", profile = \"ratelimit\", "
                        f"rate = 2.0}}, got {_show(entry)}")
        return None
    name = entry.get("name")
    profiles = ", ".join(sorted(PROFILES))
    if name is None:
        problems.append(f"{label}: missing key 'name'; add name = \"shop{index}\" ({_NAME_RULE})")
    elif not isinstance(name, str) or _NAME.fullmatch(name) is None:
        problems.append(f"{label}: name = {_show(name)} is not a valid site name; use {_NAME_RULE}")
    else:
        label = f"site {name!r}"
        if name in seen:
            problems.append(f"{label}: name = {_show(name)} is also used by {seen[name]}; "
                            f"give every site its own name")
        seen.setdefault(name, f"site #{index}")
    profile = entry.get("profile")
    if profile is None:
        problems.append(f"{label}: missing key 'profile'; add profile = \"ratelimit\" (one of: {profiles})")
        return None
    if not isinstance(profile, str) or profile not in PROFILES:
        close = difflib.get_close_matches(str(profile), list(PROFILES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"{label}: profile = {_show(profile)} is not a known profile{hint}; "
                        f"set profile to one of: {profiles}")
        return None
    cls = PROFILES[profile]
    known = {param.name: param for param in (*cls.params(), *cls.extra_params(entry))}
    known[_SEED.name] = _SEED
    before = len(problems)
    params: dict[str, ParamValue] = {}
    seed = 0
    for key, value in entry.items():
        if key in ("name", "profile"):
            continue
        param = known.get(str(key))
        if param is None:
            problems.append(f"{label}: unknown key {str(key)!r} = {_show(value)} for profile {profile!r}; "
                            f"{_unknown(str(key), [*known, 'name', 'profile'])}")
            continue
        checked = _check_param(label, param, value, problems)
        if isinstance(checked, int) and param is _SEED:
            seed = checked
        elif checked is not None:
            params[param.name] = checked
    for param in known.values():
        if param.required and param.name not in entry:
            problems.append(f"{label}: missing key {param.name!r} for profile {profile!r}; "
                            f"add {param.name}, {param.expected()}")
    if len(problems) == before:
        conflict = cls.conflict(params)
        if conflict:
            problems.append(f"{label}: {conflict}")
    if len(problems) > before or not isinstance(name, str):
        return None
    return SiteSpec(name=name, profile=profile, params=params, seed=seed)


def parse_farm(spec: Mapping[str, Any]) -> FarmSpec:
    """Check a farm description and return it in checked form.

    Args:
        spec: the mapping read from a farm file: ``site``, a list of site
            tables, and optionally ``port``.

    Returns:
        The checked description.

    Raises:
        ConfigError: listing every problem found, one per line.
    """
    if not isinstance(spec, Mapping):
        raise ConfigError([f"farm: expected a table with [[site]] entries, got {_show(spec)}"])
    problems: list[str] = []
    for key in spec:
        if key not in _FARM_KEYS:
            problems.append(f"farm: unknown key {str(key)!r} = {_show(spec[key])}; "
                            f"{_unknown(str(key), list(_FARM_KEYS))}")
    port = 0
    if "port" in spec:
        checked = _check_param("farm", _PORT, spec["port"], problems)
        port = checked if isinstance(checked, int) else 0
    entries = spec.get("site")
    drawn = _random_sites(spec.get("random"), problems)
    if drawn:
        entries = [*entries, *drawn] if isinstance(entries, list) else drawn if entries is None else entries
    if entries is None or (isinstance(entries, list) and not entries):
        problems.append("farm: no sites; add at least one [[site]] table with a name and a profile")
        entries = []
    elif not isinstance(entries, list):
        problems.append(f"farm: site = {_show(entries)} is not a list of tables; "
                        f"write each site as a [[site]] table")
        entries = []
    elif len(entries) > MAX_SITES:
        problems.append(f"farm: {len(entries)} sites is too many; keep at most {MAX_SITES}")
    seen: dict[str, str] = {}
    sites = [_check_site(index, entry, seen, problems) for index, entry in enumerate(entries, 1)]
    if problems:
        raise ConfigError(problems)
    return FarmSpec(sites=tuple(site for site in sites if site is not None), port=port)


def _random_sites(section: object, problems: list[str]) -> list[dict[str, Any]]:
    """The sites a ``[random]`` section draws, or none (with a problem noted) when it is invalid."""
    if section is None:
        return []
    if not isinstance(section, Mapping):
        problems.append(f"farm: random = {_show(section)} is not a table; write it as [random] with "
                        f"seed = 7 and sites = 30")
        return []
    known = {param.name: param for param in _RANDOM_PARAMS}
    values: dict[str, Any] = {param.name: param.default for param in _RANDOM_PARAMS}
    kinds: list[str] = list(RANDOM_KINDS)
    before = len(problems)
    for key, value in section.items():
        if key == "kinds":
            if (not isinstance(value, list) or not value
                    or any(not isinstance(kind, str) or kind not in RANDOM_KINDS for kind in value)):
                problems.append(f"random: kinds = {_show(value)} is not a list of kinds; use a list of "
                                f"some of: {', '.join(RANDOM_KINDS)}")
            else:
                kinds = value
            continue
        param = known.get(str(key))
        if param is None:
            problems.append(f"random: unknown key {str(key)!r} = {_show(value)}; "
                            f"{_unknown(str(key), [*known, 'kinds'])}")
            continue
        checked = _check_param("random", param, value, problems)
        if checked is not None:
            values[param.name] = checked
    if len(problems) > before:
        return []
    drawn: list[dict[str, Any]] = draw_farm(int(values["seed"]), int(values["sites"]),
                                            seconds=float(values["seconds"]), kinds=kinds)["site"]
    return drawn


def build_site(spec: SiteSpec, *, clock: Callable[[], float] = time.monotonic) -> Site:
    """Make the site a checked description asks for.

    Args:
        spec: the site description.
        clock: the site's time source.

    Returns:
        The site, an ASGI application.
    """
    factory: Callable[..., Site] = PROFILES[spec.profile]
    return factory(**spec.params, clock=clock, rng=random.Random(spec.seed))
