"""A metered API's budgets (requests or tokens per window), and the scopes that count them.

Pure: names and numbers in, a :class:`~crawlpace.policy.quota.QuotaBucket` out.

A scope such as ``api.example.com`` may hold several budgets at once (requests
per minute, tokens per minute, input and output tokens apart). Each budget is
counted in a scope of its own, a *budget scope* named ``api.example.com#tokens``
(:func:`budget_scope`), whose quota is the budget: a request names the budget
scopes it spends with its expected use, is admitted once every one of them
(and the API's own scope) allows it, and its answer settles the actual use.
So the rules of quotas (reserve, then settle; one atomic admission over all
of a request's scopes, in one process or through Redis) are the rules of
budgets too, written once.

APIs that count tokens (and their requests) say so in every answer: a limit
per minute, what remains, and when the budget is full again. Both vendors that
send such headers document their budgets as buckets that refill continuously
(``limit`` units, back at ``limit / window`` units a second), so a client that
spends exactly the refill never runs dry, and a client that spends the whole
bucket at once and then the refill is refused as soon as any estimate runs
short.

So the bucket a scope keeps for such a budget mirrors the server's, a little
inside it:

* it refills at :data:`REFILL_SHARE` of the server's refill: the server's
  bucket then fills up slowly over a run, which absorbs the difference between
  a request's expected use (reserved when it is sent) and its actual use
  (settled when it is answered), and the spacing of sends that only ever
  stretches;
* it holds at most :data:`BURST_SHARE` of the server's limit: the other half
  is a reserve for what is in flight and not yet settled.

Until the size of a budget is known (set, or learned from an answer), its
scope sends one request at a time (:func:`awaits_first_answer`): requests
sent before any answer spend a budget nobody has seen, and a team of
processes that each sent a full set of them at once would overdraw it.

The scope's bucket admits a request once its credit covers the request's
expected use; the answer's actual use is charged or refunded (see
:mod:`crawlpace.policy.quota`). With a Redis store the credit is counted
atomically in Redis, so every process of a team spends one budget.
"""

from __future__ import annotations

import math

from .quota import QuotaBucket

__all__ = ["BUDGET_KINDS", "BURST_SHARE", "REFILL_SHARE", "SEPARATOR", "awaits_first_answer", "budget_kind",
           "budget_scope", "learned_bucket"]

#: What a metered API's budgets count, as its headers name them.
BUDGET_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")
#: Between a scope's name and a budget kind in a budget scope's name.
SEPARATOR = "#"

#: The share of the server's refill the scope spends: enough to keep more than 0.9 of the
#: budget, with room for estimates that ran short and for sends that came late.
REFILL_SHARE = 0.97
#: The share of the server's bucket the scope may spend at once.
BURST_SHARE = 0.5


def learned_bucket(limit: float, window: float) -> QuotaBucket | None:
    """The scope's bucket for a budget of ``limit`` units per ``window`` seconds; None when unusable."""
    if not (math.isfinite(limit) and limit > 0.0 and math.isfinite(window) and window > 0.0):
        return None
    capacity = BURST_SHARE * limit
    return QuotaBucket(capacity + REFILL_SHARE * limit, window, capacity=capacity)


def budget_scope(scope: str, kind: str) -> str:
    """The name of the scope that holds ``scope``'s budget of ``kind`` (``requests``, ``tokens``...).

    Raises:
        ValueError: when ``kind`` is not one of :data:`BUDGET_KINDS`.
    """
    if kind not in BUDGET_KINDS:
        raise ValueError(f"unknown budget kind {kind!r}; valid kinds: {', '.join(BUDGET_KINDS)}")
    return f"{scope}{SEPARATOR}{kind}"


def budget_kind(name: str) -> str | None:
    """The budget kind a scope's name holds, or None for a scope that is no budget scope."""
    if SEPARATOR not in name:
        return None
    kind = name.rpartition(SEPARATOR)[2]
    return kind if kind in BUDGET_KINDS else None


def awaits_first_answer(scope: str, quota: float | None) -> bool:
    """Whether ``scope`` is a budget scope of unknown size, to send one request first.

    A budget scope whose settings give no size (``quota``) learns it from the
    API's answers; until the first answer comes (or the first request fails),
    the scope admits one request at a time. With a Redis store the one slot is
    the team's: every process waits for the first answer's headers. A request
    that is lost frees its slot when it times out, or, if its process died,
    when its lease runs out (the store's ``lease``, 30 s by default); the next
    request then goes first. An API that sends no budget headers costs one
    round trip: its first answer, headers or not, opens every slot.
    """
    return quota is None and budget_kind(scope) is not None
