"""A :class:`requests.Session` whose every request goes through a :class:`~crawlpace.SyncThrottler`.

For synchronous code built on requests, in one thread or many, in one
process or many (with a Redis store)::

    with throttled_session({"DOWNLOAD_DELAY": 0.5}) as session:
        response = session.get("https://books.toscrape.com/")

The session mounts a :class:`ThrottledAdapter` for ``http://`` and
``https://``. For each send (each redirect hop is one) the adapter waits for
the URL's scopes, times the send up to the response headers (requests reads
the body afterwards), feeds the response or exception back, and sends again
when the outcome was a backoff trigger (429, 503, a timeout...) and retries
remain; the next permit waits for the backoff delay or ``Retry-After`` by
itself. Waiting blocks the thread on a lock: nothing polls.

requests is an optional dependency (``pip install crawlpace[requests]``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from ._config import Settings
from ._retry import check_owner, check_retries, send_sync
from ._sync import SyncThrottler

__all__ = ["ATTEMPTS_ATTRIBUTE", "ThrottledAdapter", "ThrottledSession", "throttled_session"]

logger = logging.getLogger(__name__)

#: The attribute set on each response: how many sends it took.
ATTEMPTS_ATTRIBUTE = "crawlpace_attempts"


def _replayable(request: requests.PreparedRequest) -> bool:
    """Whether the prepared body can be sent again: none, bytes or text (not a file or generator)."""
    return request.body is None or isinstance(request.body, bytes | str)


def _discard(response: requests.Response) -> None:
    with contextlib.suppress(requests.RequestException, OSError):
        response.close()


class ThrottledAdapter(HTTPAdapter):
    """A transport adapter that waits for a permit before each send.

    Args:
        throttler: the throttler to wait for; the adapter never closes it.
        retries: how many times a backoff outcome is sent again; 0 disables
            retries. (requests' own ``max_retries``, for connection errors,
            stays 0 unless given in ``adapter_kwargs``.)
        **adapter_kwargs: passed to :class:`requests.adapters.HTTPAdapter`
            (``pool_connections``, ``pool_maxsize``...).

    Raises:
        ValueError: when ``retries`` is not an integer >= 0.
    """

    def __init__(self, throttler: SyncThrottler, *, retries: int = 3, **adapter_kwargs: Any) -> None:
        self._retries = check_retries(retries)
        self.throttler = throttler
        super().__init__(**adapter_kwargs)

    @property
    def retries(self) -> int:
        """How many times a backoff outcome is retried."""
        return self._retries

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: float | tuple[float, float] | tuple[float, None] | None = None,
             verify: bool | str = True, cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
             proxies: Mapping[str, str] | None = None) -> requests.Response:
        """Send ``request`` when its scopes allow it, retrying backoff outcomes.

        Returns:
            The first response that is not a backoff trigger, or the last one;
            its ``crawlpace_attempts`` attribute counts the sends.

        Raises:
            ScopeGivenUp: when the circuit breaker gave a scope up.
            QuotaError: when the request expects more quota than its scope has.
            ThrottlerClosed: when the throttler is closed.
            requests.RequestException: for the last attempt, when it failed.
        """
        target = request.url or ""
        method = request.method or "GET"
        attempts = 1 + (self._retries if _replayable(request) else 0)
        if attempts == 1 and self._retries:
            logger.debug("%s %s has a streamed body that cannot be sent twice: no retries",
                         method, target)

        def once() -> requests.Response:
            # HTTPAdapter.send returns once the headers are in; Session.send reads the body later.
            return super(ThrottledAdapter, self).send(request, stream=stream, timeout=timeout,
                                                      verify=verify, cert=cert, proxies=proxies)

        scopes = getattr(request, "crawlpace_scopes", None)
        response, attempt = send_sync(self.throttler, method, target, scopes, attempts, once, _discard,
                                      logger)
        setattr(response, ATTEMPTS_ATTRIBUTE, attempt)
        return response


class ThrottledSession(requests.Session):
    """A :class:`requests.Session` with a :class:`ThrottledAdapter` on http and https.

    Args:
        throttler: the throttler every request waits for.
        owns_throttler: close the throttler with the session.
        retries: see :class:`ThrottledAdapter`.
    """

    def __init__(self, throttler: SyncThrottler, *, owns_throttler: bool = False, retries: int = 3) -> None:
        super().__init__()
        self._throttler = throttler
        self._owns_throttler = owns_throttler
        adapter = ThrottledAdapter(throttler, retries=retries)
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    @property
    def throttler(self) -> SyncThrottler:
        """The throttler every request of this session waits for."""
        return self._throttler

    def close(self) -> None:
        """Close the adapters, and the throttler if the session created it."""
        try:
            super().close()
        finally:
            if self._owns_throttler:
                self._throttler.close()

    def __repr__(self) -> str:
        owned = "owned" if self._owns_throttler else "shared"
        return f"<ThrottledSession throttler={owned} {self._throttler!r}>"


def throttled_session(settings: Settings | Mapping[str, Any] | None = None, *,
                      throttler: SyncThrottler | None = None, store: str | None = None,
                      retries: int = 3) -> ThrottledSession:
    """Build a :class:`requests.Session` whose requests all go through a throttler.

    Args:
        settings: settings for a throttler the session creates; closing the
            session closes it. Not allowed together with ``throttler``.
        throttler: an existing :class:`~crawlpace.SyncThrottler` to share
            (with other sessions, threads, or an httpx client); closing the
            session leaves it open.
        store: the store URL of the session's own throttler: ``"memory://"``
            by default, ``"redis://host:port/db"`` to share one budget between
            processes and machines.
        retries: how many times a backoff outcome is sent again.

    Returns:
        The session; use it in ``with`` or call ``close()``.

    Raises:
        TypeError: for ``throttler`` together with ``settings`` or ``store``.
        ValueError: when ``retries`` is not an integer >= 0.
        ConfigError: when the settings are invalid.
    """
    check_retries(retries)
    check_owner(settings, throttler, store)
    if throttler is not None:
        return ThrottledSession(throttler, retries=retries)
    own = SyncThrottler(settings, store=store if store is not None else "memory://")
    return ThrottledSession(own, owns_throttler=True, retries=retries)
