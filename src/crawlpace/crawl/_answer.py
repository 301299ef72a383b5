"""The answer to one fetch, and the parts of what it means that need no job state.

:class:`Answer` is what the crawl keeps of a response (or of its absence);
:func:`transient` says whether sending again may help, :func:`redirect_target`
where a redirect leads, if it is to be followed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urljoin

from ..frontier._scheduler import Task

__all__ = ["REDIRECTS", "Answer", "redirect_target", "transient"]

_log = logging.getLogger(__name__)

#: The statuses whose ``Location`` is followed.
REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(slots=True)
class Answer:
    """What the crawl keeps of one fetch.

    Attributes:
        status: the HTTP status, ``None`` when no response came.
        location: the ``Location`` header, if any.
        body: the body, cut at the crawl's size limit.
        latency: seconds until the response headers, if known.
        error: the exception in place of a response.
        block_rule: the soft-block rule the response matched, if any.
    """

    status: int | None
    location: str | None
    body: bytes
    latency: float | None
    error: BaseException | None
    block_rule: str | None = None


def transient(answer: Answer) -> bool:
    """Whether an answer may well succeed if sent again: a 5xx, or no answer at all."""
    return answer.error is not None or (answer.status is not None and answer.status >= 500)


def redirect_target(task: Task, answer: Answer, limit: int) -> str | None:
    """The URL a redirect answer sends ``task`` to, or ``None`` when there is none to follow.

    None for an answer that is not a redirect, for a task that already made
    ``limit`` hops, and for a ``Location`` that is broken or not http(s).
    """
    if answer.status not in REDIRECTS or not answer.location or task.hops >= limit:
        return None
    try:
        target = urljoin(task.target, answer.location)
    except ValueError:  # hostile or broken input, e.g. an unclosed IPv6 bracket: not followed
        _log.info("%s: the Location %r cannot be followed", task.target, answer.location[:200])
        return None
    if not target.startswith(("http://", "https://")):
        return None
    return target
