"""What every HTTP client adapter agrees on about retrying a request.

The adapters (httpx async and sync, requests, aiohttp) send a request again
only when its outcome was a backoff trigger for one of its scopes: a status in
the scope's ``BACKOFF_HTTP_CODES`` (429, 503...) or an exception in its
``BACKOFF_EXCEPTIONS``. The next acquire then waits for the backoff delay or
the server's ``Retry-After`` by itself, so no adapter sleeps. These helpers
keep that rule, and the argument check, in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from ..stores.base import Outcome
from ._last_look import WRITING, Granted, LastLook, NotSent, Writing

if TYPE_CHECKING:
    from .._throttle._sync import SyncThrottler
    from .._throttle._throttler import Throttler

__all__ = ["check_owner", "check_retries", "is_backoff", "log_giving_up", "log_retry",
           "send_async", "send_sync"]

R = TypeVar("R")

logger = logging.getLogger("crawlpace.http")


def check_owner(settings: object, throttler: object, store: object, **own: object) -> None:
    """Refuse a shared throttler together with options for a throttler of one's own.

    ``own`` names more such options (``learned``, ``block_rules``); ``None`` is "not given".
    """
    options = {"settings": settings, "store": store, **own}
    given = " and ".join(name for name, value in options.items() if value is not None)
    if throttler is not None and given:
        raise TypeError(f"give either {'/'.join(options)} (for a throttler the client or session creates "
                        f"and closes) or throttler (an existing one), not both: got throttler and {given}")


def check_retries(retries: int) -> int:
    """Return ``retries`` when it is an integer >= 0.

    Raises:
        ValueError: naming the value and the fix.
    """
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an integer >= 0 (0 disables retries), got {retries!r}")
    return retries


def is_backoff(outcome: Outcome | None) -> bool:
    """Whether the outcome a permit was released with asks any of its scopes to back off."""
    return outcome is not None and any(signal.backoff for signal in outcome.feedback)


def log_retry(log: logging.Logger, method: str, url: str, what: str, scopes: tuple[str, ...],
              attempt: int, attempts: int) -> None:
    """Say that a backoff outcome is being retried (``attempt`` is the next one)."""
    log.info("%s %s: %s is a backoff trigger for %s; retrying (attempt %d of %d)",
                method, url, what, "+".join(scopes), attempt, attempts)


def log_giving_up(log: logging.Logger, method: str, url: str, what: str, attempts: int) -> None:
    """Say that a backoff outcome is returned because the attempts ran out."""
    log.info("%s %s: %s after %d attempts; giving up retrying", method, url, what, attempts)


def _describe(response: object | None, error: BaseException | None) -> str:
    if response is None:
        return repr(error)
    status = getattr(response, "status_code", None)
    return str(status if status is not None else getattr(response, "status", "?"))


def _settle(log: logging.Logger, method: str, url: str, permit: Granted, response: object | None,
            error: Exception | None, attempt: int, attempts: int) -> bool:
    """After a send: True to send again (a backoff outcome with attempts left), else False."""
    backoff = is_backoff(permit.outcome)
    if backoff and attempt < attempts:
        log_retry(log, method, url, _describe(response, error), permit.scopes, attempt + 1, attempts)
        return True
    if backoff and attempts > 1:
        log_giving_up(log, method, url, _describe(response, error), attempt)
    return False


async def send_async(throttler: Throttler, method: str, url: str, scopes: object, attempts: int,
                     send: Callable[[], Awaitable[R]], discard: Callable[[R], Awaitable[None]],
                     log: logging.Logger = logger, *, request: object = None,
                     look: LastLook | None = None,
                     judge: Callable[[R], Awaitable[bool]] | None = None) -> tuple[R, int]:
    """Send under a permit, feed the outcome back, and retry backoff outcomes.

    Args:
        throttler: gives the permits.
        method: the HTTP method, for log lines.
        url: the request's URL: the manager's input and the log's subject.
        scopes: explicit scopes, or ``None`` to ask the manager.
        attempts: the most sends (1 + retries, or 1 for a body that cannot be replayed).
        send: sends once; returns when the response headers are in, so its
            duration is the latency. While it runs (with ``look``),
            :data:`~crawlpace._clients._last_look.WRITING` holds the permit for the
            adapter's last look.
        discard: closes a response that is not returned (a retried one).
        log: the adapter's logger, for the retry lines.
        request: what the throttler is asked about instead of ``url`` (an
            object with ``url`` and ``meta``, for a request whose latency must
            not steer the scope).
        look: notes the holds of every answer; when ``send`` raises
            :class:`~crawlpace._clients._last_look.NotSent` (its adapter's last look
            found a hold heard after the permit was granted), the permit goes
            back with no outcome and the request waits for the throttler
            again, without using up an attempt.
        judge: tells whether a response is a soft block (see
            :class:`~crawlpace.BlockRules`); it may read the body, after the
            latency was taken. A soft block backs the scopes off and is sent
            again like a 429.

    Returns:
        The response and the number of sends it took.

    Raises:
        Exception: whatever the last send raised, or the throttler's errors
            (``ScopeGivenUp``, ``QuotaError``, ``ThrottlerClosed``).
    """
    clock = throttler.clock
    subject = url if request is None else request
    heard = None if look is None else look.hearing(clock.now)
    attempt = 0
    while attempt < attempts:
        attempt += 1
        permit = await throttler.acquire(subject, scopes=scopes)
        started = clock.now()
        response: R | None = None
        error: Exception | None = None
        token = WRITING.set(None if look is None else Writing(permit, look, clock.now))
        try:
            response = await send()
        except NotSent as exc:
            # Not written: the slot goes back untaught, and the next acquire waits for the hold.
            await permit.release()
            log.debug("%s %s: %s; asking the throttler again", method, url, exc)
            attempt -= 1
            continue
        except Exception as exc:
            error = exc
            permit.feedback(exception=exc, latency=clock.now() - started)
            await permit.release(heard=heard)
        except BaseException:
            # Cancelled or interrupted: free the slot, teach the scopes nothing.
            await permit.release()
            raise
        else:
            latency = clock.now() - started
            try:
                blocked = judge is not None and await judge(response)
                permit.feedback(response, latency=latency, blocked=blocked)
                await permit.release(heard=heard)
            except BaseException:
                await permit.release()
                await discard(response)
                raise
        finally:
            WRITING.reset(token)
        if look is not None:
            look.note(permit, clock.now())
        if _settle(log, method, url, permit, response, error, attempt, attempts):
            if response is not None:
                await discard(response)
            continue
        if error is not None:
            raise error
        assert response is not None
        return response, attempt
    raise AssertionError("unreachable: the last attempt always returns or raises")


def send_sync(throttler: SyncThrottler, method: str, url: str, scopes: object, attempts: int,
              send: Callable[[], R], discard: Callable[[R], None],
              log: logging.Logger = logger, *, look: LastLook | None = None,
              judge: Callable[[R], bool] | None = None) -> tuple[R, int]:
    """The blocking twin of :func:`send_async`, on a :class:`~crawlpace.SyncThrottler`.

    The same rules, step for step: a backoff outcome is sent again while
    attempts remain, and a request stopped by the last look
    (:class:`~crawlpace._clients._last_look.NotSent`) goes back to the throttler
    without using up an attempt. The send runs in the calling thread.
    """
    heard = None if look is None else look.hearing(throttler.now)
    attempt = 0
    while attempt < attempts:
        attempt += 1
        permit = throttler.acquire(url, scopes=scopes)
        started = throttler.now()
        response: R | None = None
        error: Exception | None = None
        token = WRITING.set(None if look is None else Writing(permit, look, throttler.now))
        try:
            response = send()
        except NotSent as exc:
            permit.release()
            log.debug("%s %s: %s; asking the throttler again", method, url, exc)
            attempt -= 1
            continue
        except Exception as exc:
            error = exc
            permit._report(exception=exc, latency=throttler.now() - started, heard=heard)
        except BaseException:
            permit.release()
            raise
        else:
            latency = throttler.now() - started
            try:
                blocked = judge is not None and judge(response)
                permit._report(response, latency=latency, blocked=blocked, heard=heard)
            except BaseException:
                permit.release()
                discard(response)
                raise
        finally:
            WRITING.reset(token)
        if look is not None:
            look.note(permit, throttler.now())
        if _settle(log, method, url, permit, response, error, attempt, attempts):
            if response is not None:
                discard(response)
            continue
        if error is not None:
            raise error
        assert response is not None
        return response, attempt
    raise AssertionError("unreachable: the last attempt always returns or raises")
