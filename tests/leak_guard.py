"""A descriptor a test leaves unclosed fails that test, not a later one.

An unclosed socket (or file) warns only when it is garbage-collected. One held in a reference
cycle (a client, its connection, its transport) is collected at some later test's allocation,
and its ResourceWarning, an error in this suite, then fails whichever test runs then: twice a
fresh-clone CI run failed that way on tests that leaked nothing (test_packaging,
test_network_faults), with nothing naming the leak.

The fixture below counts this process's open descriptors before and after each test. A test
that ends with more than it began with is collected at once, so the warning lands on it, at its
teardown (run ``python -X tracemalloc=25 -m pytest ...`` to see where the object was made).
Collecting after every test would cost about half a second a test on a loaded machine; after
only these (a few in a hundred: those that start a session's server, say), seconds a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import Iterator

import pytest

__all__ = ["end_child", "leaked_descriptors_fail_their_own_test", "open_descriptors"]


def open_descriptors() -> int | None:
    """How many file descriptors this process has open (None where the system does not say)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return None


#: The descriptors open when the last test's guard was torn down.
_LAST: list[int | None] = [None]


@pytest.fixture(autouse=True)
def leaked_descriptors_fail_their_own_test() -> Iterator[None]:
    """Collect garbage after a test that ends with more descriptors open than it began with.

    Autouse fixtures are set up first, so this one is torn down after the test's other function
    fixtures, its event loop included: what they close is closed by then. A module's fixtures are
    torn down after it, when the module's last test ends; what they leave is caught at the next
    test's set-up (more open than when the last test ended), and fails that set-up.
    """
    before = open_descriptors()
    last = _LAST[0]
    if before is not None and last is not None and before > last:
        gc.collect()
        before = open_descriptors()
    yield
    after = open_descriptors()
    if before is None or after is None or after > before:
        gc.collect()
    _LAST[0] = open_descriptors()


async def end_child(process: asyncio.subprocess.Process) -> None:
    """Kill a child a test gives up on (a timeout, a failed step) and read its pipes to the end.

    Left running, its pipe transports stay open; held by the failed test's traceback until the
    session ends, they then fail the run with an unclosed-transport warning each.
    """
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(process.communicate(), 10.0)
