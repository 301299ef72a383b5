"""Token budgets for LLM and other metered APIs: requests and tokens per minute, at once.

A :class:`TokenBudget` names the budgets of one API scope and turns a
request's expected use into the scopes it reserves, and an answer's actual
use into what it settles::

    budget = TokenBudget("api.example.com", kinds=("requests", "tokens"), usage=openai_usage)
    throttler = Throttler({"DOWNLOAD_DELAY": 0, "THROTTLING_SCOPES": budget.settings()})
    async with throttler.slot(scopes=budget.scopes(input_tokens=900, output_tokens=300)) as permit:
        response = await client.post(url, json=...)
        budget.feedback(permit, response)

Each budget is counted in a scope of its own (``api.example.com#tokens``, see
:mod:`crawlpace.policy.tokens`). Its size comes from the settings
(``budget.settings(tokens=30_000)``) or, when they give none, from the
budget headers of the API's answers (``x-ratelimit-*-tokens``,
``anthropic-ratelimit-*``); with a Redis store, every process of a team
spends the one budget.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .policy.tokens import BUDGET_KINDS, budget_kind, budget_scope

__all__ = ["BUDGET_KINDS", "TokenBudget", "Usage", "anthropic_usage", "budget_kind", "budget_scope",
           "openai_usage"]

logger = logging.getLogger(__name__)

#: A request's use of each budget kind: ``{"input-tokens": 900, "output-tokens": 312}``.
Usage = Mapping[str, float]
#: Reads the actual use from an answer (its JSON body's usage field, a header...); None when it cannot.
UsageHook = Callable[[Any], Usage | None]


def _json_usage(response: Any) -> Mapping[str, Any] | None:
    try:
        body = response.json()
    except Exception:
        logger.debug("no JSON body to read the usage from", exc_info=True)
        return None
    usage = body.get("usage") if isinstance(body, Mapping) else None
    return usage if isinstance(usage, Mapping) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def openai_usage(response: Any) -> Usage | None:
    """The use an OpenAI-style answer reports: ``usage.prompt_tokens`` and ``usage.completion_tokens``."""
    usage = _json_usage(response)
    if usage is None:
        return None
    prompt, completion = _number(usage.get("prompt_tokens")), _number(usage.get("completion_tokens"))
    if prompt is None or completion is None:
        return None
    return {"input-tokens": prompt, "output-tokens": completion}


def anthropic_usage(response: Any) -> Usage | None:
    """The use an Anthropic-style answer reports: ``usage.input_tokens`` and ``usage.output_tokens``."""
    usage = _json_usage(response)
    if usage is None:
        return None
    given, made = _number(usage.get("input_tokens")), _number(usage.get("output_tokens"))
    if given is None or made is None:
        return None
    return {"input-tokens": given, "output-tokens": made}


class TokenBudget:
    """The budgets of one metered API scope.

    Args:
        scope: the API's scope (its host, by default: ``api.example.com``).
        kinds: the budgets the API counts, of :data:`BUDGET_KINDS`:
            ``("requests", "tokens")`` for an API that counts input and output
            tokens together, ``("requests", "input-tokens", "output-tokens")``
            for one that counts them apart.
        usage: reads an answer's actual use (:func:`openai_usage`,
            :func:`anthropic_usage`, or your own); without it, or when it
            finds nothing, the expected use stands.

    Raises:
        ValueError: for an unknown kind or an empty scope.
    """

    def __init__(self, scope: str, *, kinds: Iterable[str] = ("requests", "tokens"),
                 usage: UsageHook | None = None) -> None:
        if not isinstance(scope, str) or not scope:
            raise ValueError(f"scope must be a non-empty string, not {scope!r}")
        self.scope = scope
        self.kinds = tuple(dict.fromkeys(kinds))
        unknown = [kind for kind in self.kinds if kind not in BUDGET_KINDS]
        if unknown or not self.kinds:
            raise ValueError(f"kinds: unknown budget kinds {unknown!r}; "
                             f"valid kinds: {', '.join(BUDGET_KINDS)}")
        self.usage = usage

    def __repr__(self) -> str:
        return f"<TokenBudget {self.scope} kinds={'+'.join(self.kinds)}>"

    def settings(self, *, window: float = 60.0, **limits: float) -> dict[str, dict[str, Any]]:
        """``THROTTLING_SCOPES`` entries for the budget scopes.

        A budget scope holds a request back by its budget, not by a delay
        (its slots are ``CONCURRENT_REQUESTS_PER_DOMAIN``, like the API's
        own scope). A budget given here (``tokens=30_000``, ``input_tokens=...``;
        units per ``window`` seconds) is used as set; the others are learned
        from the API's answers.

        Raises:
            ValueError: naming a limit that is not a budget kind of this scope,
                or not a positive number.
        """
        free: dict[str, Any] = {"delay": 0.0, "delay_per_slot": 0.0}
        out: dict[str, dict[str, Any]] = {}
        given = {name.replace("_", "-"): value for name, value in limits.items()}
        for kind, value in given.items():
            if kind not in self.kinds:
                raise ValueError(f"{kind.replace('-', '_')}={value!r}: not a budget of {self!r}; "
                                 f"its kinds are {', '.join(self.kinds)}")
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 \
                    or not math.isfinite(value):
                raise ValueError(f"{kind.replace('-', '_')}={value!r}: a budget must be a positive number")
        for kind in self.kinds:
            entry = dict(free)
            if kind in given:
                entry.update(quota=float(given[kind]), window=float(window))
            out[budget_scope(self.scope, kind)] = entry
        return out

    def scopes(self, *, input_tokens: float = 0.0, output_tokens: float = 0.0) -> dict[str, float]:
        """The scopes a request reserves, with its expected use of each (``throttler.slot(scopes=...)``).

        Args:
            input_tokens: the tokens the request sends (its prompt).
            output_tokens: the tokens it expects back (its ``max_tokens``, or
                a typical length: the answer settles the difference).
        """
        expected = {"requests": 1.0, "tokens": input_tokens + output_tokens, "input-tokens": input_tokens,
                    "output-tokens": output_tokens}
        out = {self.scope: 1.0}
        for kind in self.kinds:
            out[budget_scope(self.scope, kind)] = float(expected[kind])
        return out

    def consumed(self, usage: Usage) -> dict[str, float]:
        """The actual use of each budget scope, from a usage of input and output tokens (or of tokens)."""
        given, made = usage.get("input-tokens"), usage.get("output-tokens")
        total = usage.get("tokens")
        if total is None and given is not None and made is not None:
            total = given + made
        actual = {"requests": 1.0, "tokens": total, "input-tokens": given, "output-tokens": made}
        return {budget_scope(self.scope, kind): float(value) for kind in self.kinds
                if (value := actual[kind]) is not None}

    def feedback(self, permit: Any, response: Any) -> None:
        """Give ``response`` to ``permit`` with the actual use the usage hook reads from it.

        An answer whose use cannot be read (a refusal, most often) keeps the
        expected use charged. For a refusal that is deliberate: the server
        refused because its budget holds less than the scope's bucket showed
        (spent by requests sent before the budget was known, or by another
        program on the same key), and each refusal that keeps its reservation
        brings the scope's bucket down toward the server's. Given back, the
        reservation would be spent again at once and refused again.
        """
        found = self.usage(response) if self.usage is not None else None
        permit.feedback(response, consumed_quota=None if found is None else self.consumed(found))
