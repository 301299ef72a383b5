"""Reading seed 001's settings out of a Scrapy settings object.

Scrapy and seed 001 share some names but not their defaults: Scrapy's own
``CONCURRENT_REQUESTS_PER_DOMAIN`` is 8 and its ``DOWNLOAD_DELAY`` is 0,
where the seed (and crawlpace) start every scope at one slot and one second.
A name Scrapy defines is therefore read only when someone set it (its
priority is above Scrapy's ``default``); otherwise crawlpace's default
applies. Names only crawlpace knows (``THROTTLING_*``, ``BACKOFF_*``, ...)
are read whenever present, and a misspelt one is an error, as in the core.

Values the core's :class:`~crawlpace.Settings` cannot hold (a manager given
as a class or an instance, the add-on's own ``CRAWLPACE_*`` options) are
taken here; everything else goes to :meth:`Settings.from_scrapy`, so the
messages for invalid values are the core's, word for word.
"""

from __future__ import annotations

import json
import logging
import random
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings
from scrapy.settings import default_settings as _scrapy_defaults

from .._clock import AsyncioClock, Clock
from .._exceptions import ConfigError
from .._responses._feedback import FeedbackBuilder
from .._scoping._manager import ThrottlingManager, ThrottlingManagerProtocol, load_scope_manager
from .._scoping._server_scopes import IpScopes
from .._settings._config import Settings
from .._settings._names import misspelt_name, unknown_name
from .._throttle._learning import Learner
from ..stores import REDIS_SCHEMES, open_store
from ..stores._check import check_url
from ..stores.base import Store
from ._compat import ASYNCIO_REACTOR, default_backoff_exceptions
from ._managers import load_manager

__all__ = ["AddonConfig", "read_config", "scrapy_values"]

logger = logging.getLogger(__name__)

# Names Scrapy defines too, with defaults of its own: read only when set.
_SHARED_NAMES = frozenset({
    "CONCURRENT_REQUESTS", "CONCURRENT_REQUESTS_PER_DOMAIN", "DOWNLOAD_DELAY",
    "RANDOMIZE_DOWNLOAD_DELAY", "AUTOTHROTTLE_ENABLED", "AUTOTHROTTLE_START_DELAY",
    "AUTOTHROTTLE_MAX_DELAY", "AUTOTHROTTLE_TARGET_CONCURRENCY", "AUTOTHROTTLE_DEBUG",
})
# Names only crawlpace knows, without one of the core's prefixes.
_PLAIN_NAMES = frozenset({"DOWNLOAD_DELAY_PER_SLOT", "REDIRECT_MAX_DELAY", "DELAYED_REQUESTS_WARN_THRESHOLD",
                          "CRAWLPACE_LEARNED"})
_PREFIXES = ("THROTTLING_", "BACKOFF_", "BREAKER_", "RAMPUP_", "AUTOTHROTTLE_")
# The add-on's own names, never passed to the core.
# The names of Scrapy's throttling draft (scrapy/scrapy#6931) among them: THROTTLING_SCOPE_CONCURRENCY is
# read as CONCURRENT_REQUESTS_PER_DOMAIN, THROTTLER_DEBUG as THROTTLING_DEBUG.
ADDON_NAMES = frozenset({"THROTTLING_DEBUG", "THROTTLING_MANAGER", "THROTTLER_DEBUG",
                         "THROTTLING_SCOPE_LIMIT", "THROTTLING_SCOPE_CONCURRENCY"})
#: Every ``CRAWLPACE_*`` name the add-on reads; another ``CRAWLPACE_*`` name is a slip.
CRAWLPACE_NAMES = frozenset({
    "CRAWLPACE_STORE", "CRAWLPACE_SCHEDULER", "CRAWLPACE_STATS_SCOPES", "CRAWLPACE_LEARNED",
    "CRAWLPACE_METRICS_PORT", "CRAWLPACE_METRICS_HOST", "CRAWLPACE_METRICS_TOP_SCOPES",
    "CRAWLPACE_ON_GIVE_UP", "CRAWLPACE_FRONTIER", "CRAWLPACE_FRONTIER_VISIBILITY",
})
# Scrapy's own settings (this Scrapy's defaults, and the deprecated ones it reads without a default):
# never taken for a slip of ours.
_SCRAPY_NAMES = frozenset(name for name in dir(_scrapy_defaults) if name.isupper()) | {
    "CONCURRENT_REQUESTS_PER_IP", "REQUEST_FINGERPRINTER_IMPLEMENTATION", "REQUEST_FINGERPRINTER_CLASS",
    "SPIDER_LOADER_WARN_ONLY", "DOWNLOAD_DELAY_JITTER", "RANDOMIZE_DOWNLOAD_DELAY"}
_DEFAULT = SETTINGS_PRIORITIES["default"]
THROTTLING_SCHEDULER = "crawlpace.scrapy.ThrottlingScheduler"
SHARED_SCHEDULER = "crawlpace.scrapy.SharedScheduler"


@dataclass(frozen=True, slots=True)
class AddonConfig:
    """Everything the add-on's components need, checked at start-up.

    Attributes:
        settings: the core settings.
        manager: the throttling manager (``THROTTLING_MANAGER``).
        store: the state store (``CRAWLPACE_STORE``), not yet connected.
        store_url: the store's URL, for log lines.
        clock: the throttler's clock.
        debug: log one line per change of a scope's limits
            (``THROTTLING_DEBUG`` or ``AUTOTHROTTLE_DEBUG``).
        use_scheduler: whether the crawlpace scheduler replaces Scrapy's.
        robots: whether robots.txt Crawl-Delay is applied (``ROBOTSTXT_OBEY``
            and ``THROTTLING_ROBOTSTXT_OBEY``).
        robots_user_agent: whose Crawl-Delay to read.
        stats_scopes: how many scopes get per-scope entries in the stats.
        learner: keeps what the crawl learns (``CRAWLPACE_LEARNED``), if set.
        frontier_url: the shared frontier's Redis URL when the requests of
            several processes share one queue (``SharedScheduler``), else ``None``.
        frontier_visibility: seconds a claimed request stays this process's
            without being touched (``CRAWLPACE_FRONTIER_VISIBILITY``).
    """

    settings: Settings
    manager: ThrottlingManagerProtocol
    store: Store
    store_url: str
    clock: Clock
    debug: bool
    use_scheduler: bool
    robots: bool
    robots_user_agent: str
    stats_scopes: int
    learner: Learner | None = None
    frontier_url: str | None = None
    frontier_visibility: float = 30.0

    @property
    def scheduler_path(self) -> str:
        """The import path of the crawlpace scheduler the crawl runs with."""
        return SHARED_SCHEDULER if self.frontier_url is not None else THROTTLING_SCHEDULER


def _plain(value: Any) -> Any:
    """Scrapy nests dicts as settings objects; the core wants plain data."""
    if isinstance(value, BaseSettings):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _explicit(settings: BaseSettings, name: str) -> bool:
    priority = settings.getpriority(name)
    return priority is not None and priority > _DEFAULT


def _class_path(value: object) -> object:
    """A class given where the core wants an import path becomes its path."""
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return value


def _from_text(value: Any) -> Any:
    """A value given as text (``-s NAME=VALUE`` always is) read as Scrapy's getters would.

    JSON covers numbers, ``true``/``false``, lists and tables (``-s
    'THROTTLING_SCOPES={"a.com": {"delay": 2}}'``); Python's ``True``/``False``
    are accepted as ``getbool`` accepts them. Any other text (an import path,
    a URL) stays as it is, for the core to judge.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text in ("True", "False"):
        return text == "True"
    try:
        return json.loads(text)
    except ValueError:
        return value


def scrapy_values(settings: BaseSettings) -> dict[str, Any]:
    """The settings the core reads, as plain values, in seed 001's names.

    Names Scrapy also defines count only when set; ``DOWNLOAD_DELAY_JITTER``
    (Scrapy 2.19's name for the jitter magnitude) stands in for
    ``RANDOMIZE_DOWNLOAD_DELAY`` when only it is set. Scope managers given as
    classes become import paths. Values given as text are decoded first
    (:func:`_from_text`).
    """
    values: dict[str, Any] = {}
    for name in settings:
        if not isinstance(name, str) or name in ADDON_NAMES:
            continue
        if name in _SHARED_NAMES:
            if _explicit(settings, name):
                values[name] = _plain(_from_text(settings[name]))
        elif name in _PLAIN_NAMES or name.startswith(_PREFIXES):
            values[name] = _plain(_from_text(settings[name]))
        elif name not in _SCRAPY_NAMES and not name.startswith("CRAWLPACE_") and _explicit(settings, name):
            # Somebody else's setting, or a slip of one of ours (CONCURRENT_REQUEST_PER_DOMAIN,
            # BACKOF_MAX_DELAY): the core's did-you-mean judges the name, its value is never read.
            values[name] = None
    if "THROTTLING_SCOPE_CONCURRENCY" in settings and "CONCURRENT_REQUESTS_PER_DOMAIN" not in values:
        # The draft's new name for the per-scope concurrency; the seed's name wins when both are set.
        draft = settings["THROTTLING_SCOPE_CONCURRENCY"]
        values["CONCURRENT_REQUESTS_PER_DOMAIN"] = _plain(_from_text(draft))
    if "RANDOMIZE_DOWNLOAD_DELAY" not in values and _explicit(settings, "DOWNLOAD_DELAY_JITTER"):
        values["RANDOMIZE_DOWNLOAD_DELAY"] = _from_text(settings["DOWNLOAD_DELAY_JITTER"])
    if "BACKOFF_EXCEPTIONS" not in values:
        values["BACKOFF_EXCEPTIONS"] = default_backoff_exceptions()
    if "THROTTLING_SCOPE_MANAGER" in values:
        values["THROTTLING_SCOPE_MANAGER"] = _class_path(values["THROTTLING_SCOPE_MANAGER"])
    scopes = values.get("THROTTLING_SCOPES")
    if isinstance(scopes, dict):
        values["THROTTLING_SCOPES"] = {
            name: ({**entry, "manager": _class_path(entry["manager"])}
                   if isinstance(entry, dict) and "manager" in entry else entry)
            for name, entry in scopes.items()}
    return values


def addon_name_problems(settings: BaseSettings) -> list[str]:
    """Slips in the names of the add-on's own settings (``CRAWLPACE_STORES``, ``THROTTLING_DEBUGG``).

    The core judges the names it reads (:meth:`Settings.from_scrapy`, with
    the values :func:`scrapy_values` passes it); these are the names only the
    add-on reads, judged by the same did-you-mean (:mod:`crawlpace._settings._names`).
    """
    problems: list[str] = []
    own = CRAWLPACE_NAMES | ADDON_NAMES
    for name in settings:
        if not isinstance(name, str) or name in own or name in _SCRAPY_NAMES:
            continue
        if name.upper().startswith("CRAWLPACE_"):
            problems.append(unknown_name(name, own).replace("unknown crawlpace setting",
                                                            "unknown crawlpace.scrapy setting"))
        elif not name.startswith(_PREFIXES) and (problem := misspelt_name(name, own)) is not None:
            problems.append(problem)  # names with the core's prefixes are the core's to judge first
    return problems


def _as_addon_slip(problem: str) -> str:
    """The core's message for an unknown name, or the add-on's when the name is a slip of one of its own."""
    name = problem.partition(":")[0]
    if "unknown crawlpace setting" not in problem and "not a setting crawlpace reads" not in problem:
        return problem
    return misspelt_name(name, CRAWLPACE_NAMES | ADDON_NAMES) or problem


def _flag(settings: BaseSettings, name: str, default: bool, problems: list[str]) -> bool:
    value = settings.get(name, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")  # ``-s NAME=true`` on the command line
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    problems.append(f"{name}: expected true or false, got {value!r} ({type(value).__name__})")
    return default


def _count(settings: BaseSettings, name: str, default: int, problems: list[str]) -> int:
    value = settings.get(name, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if isinstance(value, bool) or number < 0 or (isinstance(value, float) and not value.is_integer()):
        problems.append(f"{name}: expected a whole number of 0 or more, got {value!r}")
        return default
    return number


def _check_reactor(settings: BaseSettings, problems: list[str]) -> None:
    if settings.get("TWISTED_REACTOR_ENABLED", True) is False:
        return  # Scrapy 2.19 without a reactor: plain asyncio
    reactor = settings.get("TWISTED_REACTOR")
    if reactor and reactor != ASYNCIO_REACTOR:
        problems.append(f"TWISTED_REACTOR: crawlpace.scrapy needs the asyncio reactor, got {reactor!r}; "
                        f"set TWISTED_REACTOR = {ASYNCIO_REACTOR!r}")


def _shared_choice(settings: BaseSettings, store_url: object, problems: list[str]) -> str | None:
    """The shared frontier's URL when ``SharedScheduler`` is asked for, else ``None``.

    ``SCHEDULER = "crawlpace.scrapy.SharedScheduler"`` or ``CRAWLPACE_FRONTIER``
    ask for it; the frontier is ``CRAWLPACE_FRONTIER``, by default the Redis
    of ``CRAWLPACE_STORE``.
    """
    scheduler = _class_path(settings.get("SCHEDULER"))
    frontier = settings.get("CRAWLPACE_FRONTIER")
    if scheduler not in (SHARED_SCHEDULER, "crawlpace.scrapy._shared.SharedScheduler") and not frontier:
        return None
    if settings.get("JOBDIR"):
        problems.append("JOBDIR: the shared scheduler keeps requests in Redis, not in a JOBDIR; remove "
                        "JOBDIR (a stopped fleet resumes from the shared frontier by itself)")
    url = frontier or store_url
    if not isinstance(url, str) or urlsplit(url).scheme not in REDIS_SCHEMES:
        problems.append(f"CRAWLPACE_FRONTIER: the shared scheduler needs a Redis URL, got {url!r}; set "
                        "CRAWLPACE_FRONTIER = 'redis://host:6379/0' (by default it is CRAWLPACE_STORE's, "
                        "which should then be the same Redis, so that the fleet shares the limits too)")
        return None
    problems.extend(f"CRAWLPACE_FRONTIER: {problem}" for problem in check_url(url))
    return url


def _seconds(settings: BaseSettings, name: str, default: float, problems: list[str]) -> float:
    value = _from_text(settings.get(name, default))
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        problems.append(f"{name}: expected a number of seconds above 0, got {value!r}; use e.g. {default:g}")
        return default
    return float(value)


def _scheduler_choice(settings: BaseSettings, problems: list[str]) -> bool:
    """Whether the crawlpace scheduler is used (``CRAWLPACE_SCHEDULER``)."""
    ours = THROTTLING_SCHEDULER
    explicit = _explicit(settings, "CRAWLPACE_SCHEDULER")
    use = _flag(settings, "CRAWLPACE_SCHEDULER", True, problems)
    if explicit:
        if use and settings.get("JOBDIR"):
            problems.append("CRAWLPACE_SCHEDULER: the crawlpace scheduler keeps requests in memory and "
                            "cannot resume a JOBDIR crawl; set CRAWLPACE_SCHEDULER = False to keep "
                            "Scrapy's scheduler, or remove JOBDIR")
        return use
    scheduler = settings.get("SCHEDULER")
    if _class_path(scheduler) == SHARED_SCHEDULER or scheduler == SHARED_SCHEDULER:
        return True
    if _explicit(settings, "SCHEDULER") and _class_path(scheduler) != ours and scheduler != ours:
        problems.append(f"SCHEDULER: {_class_path(scheduler)!r} is set, and the add-on would replace it "
                        "with crawlpace's; set CRAWLPACE_SCHEDULER = True to replace it, or "
                        "CRAWLPACE_SCHEDULER = False to keep it (requests then wait for their scopes "
                        "after leaving it)")
    elif settings.get("JOBDIR"):
        problems.append("JOBDIR: the crawlpace scheduler keeps requests in memory and cannot resume a "
                        "crawl; set CRAWLPACE_SCHEDULER = False to keep Scrapy's scheduler (requests "
                        "then wait for their scopes after leaving it)")
    return True


def _warn_inert(settings: BaseSettings, core: Settings) -> None:
    """Say which Scrapy throttling settings stop mattering under the add-on."""
    # A delay the per-slot delay makes inert is reported by the throttler (crawlpace._settings._ineffective).
    slots = _plain(settings.get("DOWNLOAD_SLOTS") or {})
    if slots:
        moved = {key: {k: v for k, v in (entry or {}).items() if k in ("concurrency", "delay")}
                 for key, entry in slots.items()}
        logger.warning("DOWNLOAD_SLOTS has no effect under crawlpace.scrapy; throttling scopes replace "
                       "download slots: THROTTLING_SCOPES = %r", moved)
    if _per_ip(settings) and settings.get("THROTTLING_MANAGER") is not None:
        logger.warning("CONCURRENT_REQUESTS_PER_IP has no effect beside THROTTLING_MANAGER, which decides "
                       "the scopes; use crawlpace.IpScopes as the manager to scope by server address")


def _per_ip(settings: BaseSettings) -> int:
    """``CONCURRENT_REQUESTS_PER_IP`` when set to a positive number, else 0."""
    with warnings.catch_warnings():  # Scrapy 2.19 warns on reading it: it is deprecated
        warnings.simplefilter("ignore")
        if not _explicit(settings, "CONCURRENT_REQUESTS_PER_IP"):
            return 0
        return max(settings.getint("CONCURRENT_REQUESTS_PER_IP"), 0)


def _apply_per_ip(settings: BaseSettings,
                  core: Settings) -> tuple[Settings, ThrottlingManagerProtocol | None]:
    """Honour ``CONCURRENT_REQUESTS_PER_IP`` as Scrapy did: one scope per server address.

    Scrapy then keys its download slots by IP and gives each that many
    slots; here requests are scoped by :class:`~crawlpace.IpScopes` and the
    scope defaults get that concurrency. A ``THROTTLING_MANAGER`` wins.
    """
    per_ip = _per_ip(settings)
    if not per_ip or settings.get("THROTTLING_MANAGER") is not None:
        return core, None
    logger.info("CONCURRENT_REQUESTS_PER_IP = %d: requests are scoped by server address, %d in flight "
                "each (Scrapy deprecated this setting; THROTTLING_MANAGER = 'crawlpace.IpScopes' is "
                "the lasting way)", per_ip, per_ip)
    defaults = replace(core.scope_defaults, concurrency=per_ip)
    return replace(core, scope_defaults=defaults), IpScopes()


def spider_attribute_values(spider: object, settings: BaseSettings) -> dict[str, Any]:
    """The deprecated spider attributes ``download_delay`` and ``max_concurrent_requests``.

    Scrapy reads them in place of ``DOWNLOAD_DELAY`` and
    ``CONCURRENT_REQUESTS_PER_DOMAIN`` unless those are set at spider
    priority or above; the add-on does the same.
    """
    values: dict[str, Any] = {}
    for attr, name in (("download_delay", "DOWNLOAD_DELAY"),
                       ("max_concurrent_requests", "CONCURRENT_REQUESTS_PER_DOMAIN")):
        if spider is None or not hasattr(spider, attr):
            continue
        if (settings.getpriority(name) or 0) >= SETTINGS_PRIORITIES["spider"]:
            continue
        logger.warning("the spider attribute %r is deprecated; crawlpace reads it as %s, set that "
                       "instead", attr, name)
        values[name] = getattr(spider, attr)
    return values


def read_config(settings: BaseSettings, build: Callable[[type[Any]], Any], *,
                spider: object = None, clock: Clock | None = None,
                rng: random.Random | None = None) -> AddonConfig:
    """Check every setting the add-on reads and gather them.

    Args:
        settings: the crawl's Scrapy settings, before the add-on changes them.
        build: creates a manager from its class (see :func:`load_manager`).
        spider: the spider (class), for its deprecated throttling attributes.
        clock: the throttler's clock (the event loop's by default).
        rng: the random source for jitter.

    Raises:
        ConfigError: listing every problem found.
    """
    problems: list[str] = addon_name_problems(settings)
    _check_reactor(settings, problems)
    values = {**scrapy_values(settings), **spider_attribute_values(spider, settings)}
    core: Settings | None = None
    flagged = {problem.partition(":")[0] for problem in problems}  # a slip of the add-on's names: said once
    try:
        core = Settings.from_scrapy(values)
    except ConfigError as exc:
        problems.extend(_as_addon_slip(problem) for problem in exc.problems
                        if problem.partition(":")[0] not in flagged)
    if core is not None:
        debug = (_flag(settings, "THROTTLING_DEBUG", False, problems)
                 or _flag(settings, "THROTTLER_DEBUG", False, problems) or core.autothrottle.debug)
        if settings.get("THROTTLING_SCOPE_LIMIT") is not None:
            logger.info("THROTTLING_SCOPE_LIMIT (from Scrapy's throttling draft) has no effect under "
                        "crawlpace.scrapy: crawlpace forgets an idle scope's state by itself")
        if debug:
            # The add-on's own line per adjustment covers AutoThrottle's changes too.
            core = replace(core, autothrottle=replace(core.autothrottle, debug=False))
        try:
            FeedbackBuilder(core)  # imports BACKOFF_EXCEPTIONS
        except ConfigError as exc:
            problems.extend(exc.problems)
        for path in {cfg.manager for cfg in (core.scope_defaults, *core.scopes.values()) if cfg.manager}:
            try:
                load_scope_manager(path)
            except ConfigError as exc:
                problems.extend(exc.problems)
    else:
        debug = False
    manager: ThrottlingManagerProtocol = ThrottlingManager()
    learner: Learner | None = None
    if core is not None:
        core, by_ip = _apply_per_ip(settings, core)
        manager = by_ip or manager
        try:
            core, learner = Learner.prepare(core)
        except Exception as exc:  # sqlite3.Error, OSError, a Redis error
            problems.append(f"CRAWLPACE_LEARNED: cannot open {core.learned!r} ({exc}); give a writable "
                            "SQLite file path or a reachable redis:// URL")
    raw_manager = settings.get("THROTTLING_MANAGER")
    if raw_manager is not None:
        try:
            manager = load_manager(raw_manager, build)
        except ConfigError as exc:
            problems.extend(exc.problems)
    store_url = settings.get("CRAWLPACE_STORE") or "memory://"
    store: Store | None = None
    clock = clock if clock is not None else AsyncioClock()
    if not isinstance(store_url, str):
        problems.append(f"CRAWLPACE_STORE: expected a URL such as 'memory://' or 'redis://localhost:6379/0', "
                        f"got {store_url!r}")
    elif (scheme := urlsplit(store_url).scheme) not in ("memory", *REDIS_SCHEMES):
        problems.append(f"CRAWLPACE_STORE: {store_url!r} has the unknown scheme {scheme!r}; use "
                        "'memory://', 'redis://host:port/db', 'rediss://...' or "
                        "'unix:///path/to/redis.sock'")
    elif core is not None:
        try:
            store = open_store(store_url, core, clock, rng if rng is not None else random.Random())
        except ConfigError as exc:
            for problem in exc.problems:  # the store checks some settings again: say each once
                if problem.startswith("store "):
                    problems.append(f"CRAWLPACE_STORE: {problem}")
                elif problem not in problems:
                    problems.append(problem)
    use_scheduler = _scheduler_choice(settings, problems)
    frontier_url = _shared_choice(settings, store_url, problems) if use_scheduler else None
    visibility = _seconds(settings, "CRAWLPACE_FRONTIER_VISIBILITY", 30.0, problems)
    stats_scopes = _count(settings, "CRAWLPACE_STATS_SCOPES", 100, problems)
    robots = settings.getbool("ROBOTSTXT_OBEY")
    if problems:
        raise ConfigError(problems)
    assert core is not None
    assert store is not None
    _warn_inert(settings, core)
    agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
    return AddonConfig(settings=core, manager=manager, store=store, store_url=store_url, clock=clock,
                       debug=debug, use_scheduler=use_scheduler, robots=robots and core.robotstxt_obey,
                       robots_user_agent=str(agent), stats_scopes=stats_scopes, learner=learner,
                       frontier_url=frontier_url, frontier_visibility=visibility)
