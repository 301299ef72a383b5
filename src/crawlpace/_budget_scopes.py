"""The scopes that hold a metered API's budgets: one per unit counted, beside the API's own scope.

A scope such as ``api.example.com`` may hold several budgets at once (requests
per minute, tokens per minute, input and output tokens apart). Each budget is
counted in a scope of its own, named ``api.example.com#tokens``, whose quota is
the budget: a request names the budget scopes it spends with its expected use,
is admitted once every one of them (and the API's scope) allows it, and its
answer settles the actual use. So the rules of quotas (reserve, then settle;
one atomic admission over all of a request's scopes, in one process or
through Redis) are the rules of budgets too, written once.
"""

from __future__ import annotations

from ._headers import BUDGET_KINDS

__all__ = ["SEPARATOR", "budget_kind", "budget_scope"]

SEPARATOR = "#"


def budget_scope(scope: str, kind: str) -> str:
    """The name of the scope that holds ``scope``'s budget of ``kind`` (``requests``, ``tokens``...).

    Raises:
        ValueError: when ``kind`` is not one of the budget kinds.
    """
    if kind not in BUDGET_KINDS:
        raise ValueError(f"unknown budget kind {kind!r}; valid kinds: {', '.join(BUDGET_KINDS)}")
    return f"{scope}{SEPARATOR}{kind}"


def budget_kind(name: str) -> str | None:
    """The budget kind a scope name holds, or None for a scope that is no budget scope."""
    if SEPARATOR not in name:
        return None
    kind = name.rpartition(SEPARATOR)[2]
    return kind if kind in BUDGET_KINDS else None
