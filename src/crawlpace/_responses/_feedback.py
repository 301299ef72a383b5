"""Turning a response or an exception into feedback for each scope.

This is the edge between the outside world and the pure policy: it reads
statuses, exception classes and headers, and produces one
:class:`~crawlpace.policy.signals.ScopeFeedback` per scope of the request,
according to that scope's own backoff settings. The store then applies them.

A throttling manager can take part through two hooks (seed 001):
``get_response_backoff(response)`` returns the per-scope feedback (call the
default with ``super()`` and change it with :func:`update_scope_backoff`), and
``get_response_delay(response)`` returns the seconds a response asks to wait.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._exceptions import ConfigError
from .._scoping._scopes import Demand, import_object
from .._settings._config import DEFAULT_BACKOFF_EXCEPTIONS, BackoffConfig, ScopeConfig, Settings
from ..policy.budget import SPREAD_SHARE
from ..policy.signals import AnnouncedQuota, BudgetReading, CoarseReset, ScopeFeedback
from ..policy.tokens import budget_kind
from ._headers import ServerHint, parse_hints

__all__ = ["FeedbackBuilder", "ScopeFeedback", "current_context", "update_scope_backoff"]

logger = logging.getLogger(__name__)


def _status_of(response: Any) -> int | None:
    for attr in ("status_code", "status"):
        value = getattr(response, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _headers_of(response: Any) -> object:
    return getattr(response, "headers", None)


def _deferred(item: object) -> bool:
    """Whether ``item`` is a default entry of a client library that is not imported yet.

    No exception of such a library can exist before its module is loaded, so
    its class need not be imported to classify anything: looking it up is put
    off until an exception comes (see :func:`loaded_defaults`). This keeps
    ``Throttler()`` from importing aiohttp, httpx and requests.
    """
    return (isinstance(item, str) and item in DEFAULT_BACKOFF_EXCEPTIONS
            and item.rpartition(".")[0] not in sys.modules)


def loaded_defaults(paths: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    """The exception classes among ``paths`` whose module has been imported since.

    Args:
        paths: deferred default entries of ``BACKOFF_EXCEPTIONS``.
    """
    found: list[type[BaseException]] = []
    for path in paths:
        module_name, _, attr = path.rpartition(".")
        module = sys.modules.get(module_name)
        target = getattr(module, attr, None) if module is not None else None
        if isinstance(target, type) and issubclass(target, BaseException):
            found.append(target)
    return tuple(found)


def resolve_exceptions(config: BackoffConfig, label: str) -> tuple[type[BaseException], ...]:
    """Import the classes ``BACKOFF_EXCEPTIONS`` names.

    Default entries of client libraries that are not imported yet are left
    out (see :func:`deferred_exceptions`).

    Raises:
        ConfigError: naming ``label`` when a path cannot be imported or is not
            an exception class.
    """
    classes: list[type[BaseException]] = []
    problems: list[str] = []
    for item in config.exceptions:
        if isinstance(item, type):
            classes.append(item)
            continue
        if _deferred(item):
            continue
        try:
            target = import_object(item)
        except ImportError as exc:
            if item in DEFAULT_BACKOFF_EXCEPTIONS:
                continue  # a default for an HTTP client that is not installed
            problems.append(f"{label}: cannot import {item!r} ({exc}); install the package that "
                            "provides it or remove it from the list")
            continue
        except (AttributeError, ValueError) as exc:
            problems.append(f"{label}: cannot import {item!r} ({exc}); install the package that "
                            "provides it or remove it from the list")
            continue
        if not (isinstance(target, type) and issubclass(target, BaseException)):
            problems.append(f"{label}: {item!r} is not an exception class")
            continue
        classes.append(target)
    if problems:
        raise ConfigError(problems)
    return tuple(classes)


def deferred_exceptions(config: BackoffConfig) -> tuple[str, ...]:
    """The default entries :func:`resolve_exceptions` left out because their library is not loaded."""
    return tuple(item for item in config.exceptions if isinstance(item, str) and _deferred(item))


@dataclass(frozen=True, slots=True)
class _Rules:
    """One scope's settings, in the form classification needs."""

    codes: frozenset[int]
    exceptions: tuple[type[BaseException], ...]
    cap: float
    #: Default entries whose library was not imported when the rules were made.
    deferred: tuple[str, ...] = ()

    def matches(self, exc: BaseException) -> bool:
        """Whether ``exc`` is one of the backoff exceptions."""
        return isinstance(exc, self.exceptions) or (
            bool(self.deferred) and isinstance(exc, loaded_defaults(self.deferred)))


class FeedbackBuilder:
    """Classifies outcomes for the scopes of one throttler.

    Args:
        settings: the throttler's settings.
        wall_clock: the POSIX clock that epoch-based headers are measured
            against (``time.time``; injectable for tests).

    Raises:
        ConfigError: when ``BACKOFF_EXCEPTIONS`` names something unimportable.
    """

    def __init__(self, settings: Settings, wall_clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.wall_clock = wall_clock
        self._rules: dict[int, _Rules] = {}
        configs = [("BACKOFF_EXCEPTIONS", settings.scope_defaults)]
        configs += [(f'THROTTLING_SCOPES["{name}"]["backoff"]["exceptions"]', cfg)
                    for name, cfg in settings.scopes.items()]
        problems: list[str] = []
        for label, cfg in configs:
            try:
                self._rules_of(cfg, label)
            except ConfigError as exc:
                problems.extend(exc.problems)
        if problems:
            raise ConfigError(sorted(set(problems)))

    def _rules_of(self, config: ScopeConfig, label: str = "BACKOFF_EXCEPTIONS") -> _Rules:
        rules = self._rules.get(id(config.backoff))
        if rules is None:
            backoff = config.backoff
            rules = _Rules(backoff.http_codes, resolve_exceptions(backoff, label), backoff.max_delay,
                           deferred_exceptions(backoff))
            self._rules[id(config.backoff)] = rules
        return rules

    # -- exceptions ----------------------------------------------------------

    def for_exception(self, demands: tuple[Demand, ...], exc: BaseException,
                      latency: float | None) -> tuple[ScopeFeedback, ...]:
        """Feedback for a request that failed with ``exc``.

        A backoff exception, or any ``OSError`` (connection and socket
        failures) or ``TimeoutError``, counts as a failure for the circuit
        breaker. Other exceptions (a bug in the caller's parsing code, say) say
        nothing about the server and only show up in the error count.
        """
        out: list[ScopeFeedback] = []
        for name, _use in demands:
            rules = self._rules_of(self.settings.scope_config(name))
            backoff = rules.matches(exc)
            out.append(ScopeFeedback(backoff=backoff,
                                     failed=backoff or isinstance(exc, OSError | TimeoutError)))
        return tuple(out)

    # -- responses -----------------------------------------------------------

    def hint(self, response: Any) -> ServerHint | None:
        """Read the rate-limit headers of ``response`` (never raises)."""
        headers = _headers_of(response)
        if headers is None:
            return None
        return parse_hints(headers, wall_now=self.wall_clock(), cap=float("inf"))

    def hold_of(self, hint: ServerHint | None, status: int | None = None) -> float | None:
        """The seconds a hint asks to wait before the next request, if any.

        ``Retry-After`` when it applies (see :func:`retry_after_applies`);
        otherwise the time to the reset when the announced budget is spent.

        Args:
            hint: the response's parsed headers.
            status: the response's status, when known: a ``Retry-After`` on an
                answer that is no refusal and says budget remains is no hold.
        """
        if hint is None:
            return None
        retry_after = hint.retry_after if retry_after_applies(hint, status) else None
        if hint.source in ("ratelimit", "ratelimit-policy"):
            # The strictest of the announced budgets, already chosen; a Retry-After comes first.
            return hint.hold if retry_after is None else retry_after
        spent = _spent_reset(hint)
        if spent is not None:
            # Spent until its reset, whatever a Retry-After says: Flask-Limiter's is the
            # reset's seconds cut down to a whole number (0 with 0.9 s to go).
            return spent if retry_after is None else max(spent, retry_after)
        return retry_after

    def for_response(self, demands: tuple[Demand, ...], *, status: int | None,
                     latency: float | None, hold: float | None,
                     hint: ServerHint | None) -> dict[str, ScopeFeedback]:
        """Feedback for each scope of a request answered with ``status``.

        Args:
            demands: the request's scopes.
            status: the response's HTTP status.
            latency: the latency to give AutoThrottle (``None``: do not adjust).
            hold: the seconds the response asks to wait (see :meth:`hold_of`).
            hint: the response's parsed rate-limit headers, for pacing.
        """
        pace = pace_for = None
        if hint is not None and hint.source in ("ratelimit", "ratelimit-policy"):
            pace, pace_for = hint.pace, hint.pace_for
        elif hint is not None and hint.remaining is not None and hint.remaining >= 1.0 \
                and hint.reset is not None and hint.reset > 0.0:
            # R requests within T seconds: spread over most of T (SPREAD_SHARE), so that the
            # R-th goes before the reset; spread over all of it, the R-th lands on the reset, in
            # the next window, and a window of 2 got one request each (half its capacity).
            # The pace lasts past the reset, until an answer replaces it: a moving window's
            # reset frees only its oldest request, and a scope with many slots left unpaced
            # at the reset would send them all at once (most of them to be refused).
            pace_for = 2.0 * hint.reset
            # (A reset moment in whole seconds is the scope's to narrow, with the window it learns.)
            share = 1.0 if hint.reset_whole else SPREAD_SHARE
            pace = share * _earliest(hint.reset) / hint.remaining
        elif hint is not None and (spent := _spent_reset(hint)) is not None and spent > 0.0:
            # Spent: held to the reset (see hold_of), and then one request at a time until an
            # answer says how much came back. A fixed window's reset brings the whole budget
            # back, a moving window's only its oldest request: sending every slot at the hold's
            # end would have all but one of them refused.
            pace, pace_for = spent, 2.0 * spent
        budget = _budget_of(hint)
        if budget is not None and hint is not None and (
                hold == hint.hold or hint.source != "ratelimit") and (
                hint.retry_after is None or not retry_after_applies(hint, status)):
            hold = None  # a spent budget's hold: the scope reckons it from the window it learned
        if hint is not None and logger.isEnabledFor(logging.DEBUG):
            _log_hold(demands, hint, status, hold)
        settings = self.settings
        redirect_cap = settings.redirect_max_delay
        is_redirect = status is not None and 300 <= status < 400
        announced = _announced_by_kind(hint, demands)
        coarse = None
        if hint is not None and hint.limit is not None and hint.remaining is not None \
                and hint.reset is not None \
                and (hint.reset_whole or (budget is None and hint.source in _WINDOWLESS_SOURCES)):
            # (Seconds from now, not a whole-second moment: for a moving window's log only, see
            # policy/budget.py's WindowLog; the pace above stands until that log gates.)
            coarse = CoarseReset(hint.remaining, hint.limit, hint.reset, whole=hint.reset_whole)
        # A refusal that says the announced budget is spent, and until when, is answered by
        # holding the scope to the reset (above), not by a backoff on top of it: the budget
        # paces the scope, and the backoff's minute at one request a second would not.
        explained = bool(announced) or (
            hint is not None and hint.source not in ("ratelimit", "ratelimit-policy")
            and _spent_reset(hint) is not None)
        out: dict[str, ScopeFeedback] = {}
        for name, _use in demands:
            rules = self._rules_of(settings.scope_config(name))
            cap = rules.cap
            if is_redirect and redirect_cap is not None:
                cap = min(cap, redirect_cap)
            out[name] = ScopeFeedback(
                # So too a refusal that comes with the budgets the request spends: their buckets
                # pace the scope.
                backoff=status in rules.codes and not explained,
                failed=status is not None and status >= 500,
                hold=None if hold is None else min(hold, cap),
                pace=None if pace is None else min(pace, cap),
                pace_for=0.0 if pace_for is None else min(pace_for, cap),
                latency=latency,
                status=status,
                concurrency=None if hint is None else hint.concurrency,
                budget=budget,
                announced=announced.get(budget_kind(name) or ""),
                coarse=coarse,
            )
        return out


def _spent_reset(hint: ServerHint) -> float | None:
    """The seconds to the reset of a budget the answer says is spent (``X-RateLimit-*`` and the like)."""
    if hint.remaining is not None and hint.remaining < 1.0 and hint.reset is not None:
        return hint.reset
    return None


def budget_remains(hint: ServerHint) -> bool:
    """Whether the answer announces budget left for another request."""
    if hint.source == "ratelimit":
        return hint.hold is None and (hint.remaining is None or hint.remaining >= 1.0)
    return hint.remaining is not None and hint.remaining >= 1.0


def retry_after_applies(hint: ServerHint, status: int | None) -> bool:
    """Whether the answer's ``Retry-After`` asks the client to wait.

    It does on a refusal (429, 503, any status of 400 and above) and on a
    redirect (RFC 9110 section 10.2.3). On any other answer (a 200, say) it
    counts only while the same answer does not say budget remains: Flask-Limiter,
    with its headers on, sends ``Retry-After`` on every answer, beside
    ``X-RateLimit-Remaining: 99``, and holding the scope for it after every
    success would run a client at a tenth of its limit. A lone
    ``Retry-After`` on a success, with no budget announced, still counts:
    the server gave no other sign.
    """
    if status is None or status >= 300:
        return True
    return not budget_remains(hint)


def describe_hold(hint: ServerHint, status: int | None, hold: float) -> str:
    """Which header asked for a hold, and its value, for the DEBUG line."""
    family = {"x-ratelimit": "X-RateLimit", "x-rate-limit": "X-Rate-Limit", "ratelimit": "RateLimit",
              "ratelimit-draft07": "RateLimit", "ratelimit-trio": "RateLimit-Reset",
              "ratelimit-policy": "RateLimit-Policy"}.get(hint.source, hint.source)
    on = "" if status is None else f" on a {status}"
    if hint.retry_after is not None and retry_after_applies(hint, status) and hold == hint.retry_after:
        return f"Retry-After {hint.retry_after:g}s{on}"
    return (f"{family} budget spent (remaining {hint.remaining!r}, reset in "
            f"{'?' if hint.reset is None else format(hint.reset, 'g')}s){on}")


def _announced_by_kind(hint: ServerHint | None, demands: tuple[Demand, ...]) -> dict[str, AnnouncedQuota]:
    """The budgets an answer announces that the request's budget scopes count, by kind."""
    if hint is None or not hint.budgets:
        return {}
    kinds = {budget_kind(name) for name, _use in demands}
    return {budget.kind: AnnouncedQuota(budget.limit, budget.window)
            for budget in hint.budgets if budget.kind in kinds}


def _log_hold(demands: tuple[Demand, ...], hint: ServerHint, status: int | None, hold: float | None) -> None:
    """Say why the scopes are held, or why a ``Retry-After`` is not a hold."""
    names = "+".join(name for name, _use in demands)
    if hold is not None and hold > 0.0:
        logger.debug("scope %s held %.3fs: %s", names, hold, describe_hold(hint, status, hold))
    elif hint.retry_after is not None and not retry_after_applies(hint, status):
        logger.debug("scope %s not held: Retry-After %gs on a %s that says budget remains "
                     "(remaining %r)", names, hint.retry_after, status, hint.remaining)


#: The header families that may announce a count and its reset without the window's length: a
#: moving window's log learns the length from their spent answers (``CoarseReset``).
_WINDOWLESS_SOURCES = frozenset({"ratelimit-trio", "x-ratelimit", "x-rate-limit"})

#: The header families whose budget is a count per window with the seconds to its reset: with
#: the window's length announced too, the scope paces them as one budget (:mod:`.policy.budget`).
_BUDGET_SOURCES = frozenset({"ratelimit", "ratelimit-draft07", "ratelimit-trio"})


def _budget_of(hint: ServerHint | None) -> BudgetReading | None:
    """The request budget of a ``RateLimit`` answer whose policy gives the quota and the window.

    The current form (``r``, ``t`` beside a policy's ``q`` and ``w``), the
    draft-07 dictionary (``limit``, ``remaining``, ``reset`` beside
    ``RateLimit-Policy: 4;w=1``) and the older trio with a window say the
    same thing: so many requests per window, so many left, the seconds to
    the reset. Read without the window, the draft-07 form held a moving
    window at its full pace for the whole second of each ``reset=1`` (every
    answer of it shows none left), about half its capacity.
    """
    if hint is None or hint.source not in _BUDGET_SOURCES or hint.unit != "requests":
        return None
    if hint.remaining is None or hint.limit is None or hint.window is None:
        return None
    return BudgetReading(remaining=hint.remaining, quota=hint.limit, window=hint.window, span=hint.reset)


def _earliest(reset: float) -> float:
    """The time to a reset a header gave in whole seconds that the budget is spread over.

    Servers round the seconds to a reset up, so "2" means anywhere in (1, 2]: the
    rest of the budget, spread over the earliest the reset may be, all goes in this
    window. (Taken as 1.5 s, a window of 2 per 2.3 s whose reset was 1.3 s away got its
    second request in the next window, one request a window: 0.57 of its limit. Sent
    sooner, the budget is spent a little early and the spent budget waits out the
    rest.) "1" gives no such bound and is taken as half a second; a fractional reset
    is already exact.
    """
    if reset >= 1.0 and reset == int(reset):
        return reset - 1.0 if reset >= 2.0 else 0.5
    return reset


@dataclass(slots=True)
class FeedbackContext:
    """What the default manager hooks need while the throttler calls them."""

    builder: FeedbackBuilder
    demands: tuple[Demand, ...]
    latency: float | None
    hint: ServerHint | None = None
    parsed: bool = False

    def hint_of(self, response: Any) -> ServerHint | None:
        if not self.parsed:
            self.hint, self.parsed = self.builder.hint(response), True
        return self.hint


_CONTEXT: contextvars.ContextVar[FeedbackContext | None] = contextvars.ContextVar(
    "crawlpace_feedback", default=None)


def current_context() -> FeedbackContext:
    """The feedback being built, for the default manager hooks.

    Raises:
        RuntimeError: outside a throttler's feedback (the hooks are the
            throttler's to call).
    """
    context = _CONTEXT.get()
    if context is None:
        raise RuntimeError("get_response_backoff() and get_response_delay() are called by the "
                           "throttler while it takes a permit's feedback; call them from there")
    return context


def default_response_delay(response: Any) -> float | None:
    """The default ``get_response_delay``: what the response's headers ask for."""
    context = current_context()
    return context.builder.hold_of(context.hint_of(response), _status_of(response))


def default_response_backoff(response: Any, hold: float | None) -> dict[str, ScopeFeedback]:
    """The default ``get_response_backoff``, given the manager's delay for the response."""
    context = current_context()
    return context.builder.for_response(context.demands, status=_status_of(response),
                                        latency=context.latency, hold=hold,
                                        hint=context.hint_of(response))


def update_scope_backoff(scopes: Mapping[str, ScopeFeedback], scope: str, *,
                         backoff: bool | None = None, consumed_quota: float | None = None,
                         delay: float | None = None, failed: bool | None = None,
                         ) -> dict[str, ScopeFeedback]:
    """Return ``scopes`` with ``scope``'s feedback changed, without changing the argument.

    The scope is added when missing. Only the given fields change.

    Args:
        scopes: what ``get_response_backoff`` returned.
        scope: the scope to change.
        backoff: whether the response is a backoff trigger for this scope.
        consumed_quota: the quota the request actually used.
        delay: seconds this scope must wait before its next request.
        failed: whether the response counts as an error for the circuit breaker.
    """
    current = scopes.get(scope, ScopeFeedback())
    changes: dict[str, Any] = {}
    if backoff is not None:
        changes["backoff"] = backoff
    if consumed_quota is not None:
        changes["consumed_quota"] = float(consumed_quota)
    if delay is not None:
        changes["hold"] = float(delay)
    if failed is not None:
        changes["failed"] = failed
    result = dict(scopes)
    result[scope] = dataclasses.replace(current, **changes)
    return result


def use_context(context: FeedbackContext) -> contextvars.Token[FeedbackContext | None]:
    """Make ``context`` current for the manager hooks; reset with the returned token."""
    return _CONTEXT.set(context)


def reset_context(token: contextvars.Token[FeedbackContext | None]) -> None:
    """Undo :func:`use_context`."""
    _CONTEXT.reset(token)


def status_of(response: Any) -> int | None:
    """The HTTP status of a response object (``status_code`` or ``status``)."""
    return _status_of(response)
