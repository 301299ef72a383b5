"""What a crawl is asked to do, beside the throttling settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .._exceptions import ConfigError
from .._robotstxt._robots import ROBOTS_RETRIES
from .._settings._config_crawl import crawl_problems
from .._user_agent import DEFAULT_USER_AGENT

__all__ = ["DEFAULT_USER_AGENT", "CrawlOptions"]

#: The user agent sent unless another is configured.


#: The options checked by the rules the settings file's [crawl] table shares.
_CHECKED = ("retries", "max_redirects", "max_bytes", "robots_retries", "max_in_memory", "timeout", "deadline",
            "visibility", "wait_for_urls", "user_agent")


@dataclass(frozen=True, slots=True)
class CrawlOptions:
    """The crawl's own options.

    Attributes:
        output: the JSON Lines file, one line per URL.
        state: the journal (SQLite) that makes ``resume`` possible; by
            default the output path plus ``.state``.
        resume: continue the crawl recorded in ``state`` instead of starting one.
        user_agent: sent with every request, and matched against robots.txt.
        retries: times a URL is sent again after a backoff answer (429, 503,
            a timeout...), whose wait the throttler decides, or after another
            transient failure (a 500, a reset connection), which goes behind
            the host's other URLs. A bound: a URL is sent at most
            ``retries + 1`` times, and a robots.txt file at most
            ``min(robots_retries, retries) + 1`` times.
        timeout: seconds allowed for connecting, and then for each read.
        deadline: seconds one whole request may take, headers and body
            (default 300: a body at the 10 MiB cap still arrives at 35 KiB/s).
            A request past it counts as a timeout for the backoff.
        max_redirects: redirects followed per URL, each throttled under its
            own host.
        max_bytes: bytes of a body read at most; the rest is discarded.
        robots: fetch and obey robots.txt (rules and Crawl-Delay).
        robots_retries: times a robots.txt that fails with a backoff answer
            is fetched again (after the throttler's backoff) before the site
            counts as unreachable: one retry lets a passing fault by, and a
            site that is down costs two requests, not three.
        max_in_memory: URLs held in memory at once; the rest wait in the journal.
        trust_env: let proxies and certificates come from the environment.
        store: where admission state lives: ``memory://`` (this process) or a
            Redis URL shared with other workers (see :mod:`crawlpace.stores.redis`).
        visibility: with the shared frontier, seconds a claimed URL stays
            hidden from other workers unless renewed: a killed worker's URLs
            are handed out again after at most this long.
        wait_for_urls: with the shared frontier, seconds a worker that finds
            the frontier empty, and has not yet seen work in it, waits for
            URLs to be enqueued before it ends (0: it ends at once). Workers
            started ahead of ``crawlpace enqueue`` are ready when the URLs come.
    """

    output: Path
    state: Path | None = None
    resume: bool = False
    user_agent: str = DEFAULT_USER_AGENT
    retries: int = 3
    timeout: float = 10.0
    deadline: float = 300.0
    max_redirects: int = 5
    max_bytes: int = 10 * 1024 * 1024
    robots: bool = True
    robots_retries: int = ROBOTS_RETRIES
    max_in_memory: int = 100_000
    trust_env: bool = True
    store: str = "memory://"
    visibility: float = 30.0
    wait_for_urls: float = 0.0

    def __post_init__(self) -> None:
        # The same checks as the settings file's [crawl] table (one rule, two ways in).
        problems = crawl_problems({name: getattr(self, name) for name in _CHECKED})
        if not Path(self.output).name or Path(self.output).is_dir():
            problems.append(f"output: {str(self.output)!r} names no file (a folder, or nothing); give the "
                            "file to write, e.g. -o results.jsonl")
        for name, path in (("output", self.output), ("state", self.state)):
            folder = None if path is None else Path(path).parent
            if folder is not None and not folder.is_dir():
                problems.append(f"{name}: the folder {str(folder)!r} of {str(path)!r} does not exist; "
                                f"create it first (mkdir -p {folder}) or choose a path in an existing folder")
        if problems:
            raise ConfigError(problems)

    @property
    def state_path(self) -> Path:
        """Where the journal lives."""
        return self.state if self.state is not None else self.output.with_name(self.output.name + ".state")
