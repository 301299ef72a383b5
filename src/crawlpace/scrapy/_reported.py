"""An error the add-on has already reported is not printed a second time as a traceback.

When the add-on refuses the settings it logs one ERROR line listing every
problem, then raises :class:`~crawlpace.ConfigError` so that the crawl does
not start. Scrapy then reports the same exception once more, with a 15-line
traceback that says nothing new: asyncio's "Task exception was never
retrieved" (``AsyncCrawlerProcess``, what ``scrapy crawl`` and ``runspider``
use from Scrapy 2.14 on) or Twisted's "Unhandled error in Deferred"
(``CrawlerProcess`` with the Twisted reactor, Scrapy 2.13).

:func:`mark_reported` flags the exception, and a filter on the ``asyncio`` and
``twisted`` loggers drops the log records that carry a flagged exception.
Nothing else is filtered: any other error, or the same class raised
elsewhere, is logged as before, and the crawl still fails (Scrapy's exit
status is unchanged).
"""

from __future__ import annotations

import logging

__all__ = ["mark_reported"]

# The attribute set on an exception the add-on has logged in full.
_FLAG = "_crawlpace_reported"
# The loggers through which Scrapy reports a crawl that failed to start.
_LOGGERS = ("asyncio", "twisted")


class _AlreadyReported(logging.Filter):
    """Drops records whose exception the add-on has already logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_exception_of(record), _FLAG, False)


_FILTER = _AlreadyReported()


def _exception_of(record: logging.LogRecord) -> BaseException | None:
    """The exception a record reports, from its ``exc_info`` or from a Twisted log event's failure."""
    if record.exc_info and record.exc_info[1] is not None:
        return record.exc_info[1]
    event = getattr(record.msg, "event", None)  # Twisted's events reach logging wrapped like this
    if isinstance(event, dict):
        value = getattr(event.get("log_failure"), "value", None)
        return value if isinstance(value, BaseException) else None
    return None


def mark_reported(exc: BaseException) -> None:
    """Flag ``exc`` as logged in full, so Scrapy's later report of it is not printed."""
    setattr(exc, _FLAG, True)
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
