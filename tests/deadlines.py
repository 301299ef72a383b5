"""How long a test waits on real time for something that happens at once on an idle machine.

A test that waits for a child process, or for a worker to reach a point, returns as soon as it is
there: a deadline costs nothing when the machine is idle, and only says when to give up on a hang.
On the shared CI machine (two cores, load 25-50 seen) a Python child's start-up alone took 30-60 s
with twenty-five of them starting together, and fixed deadlines of 20-60 s failed tests that then
passed idle. These deadlines are generous for that, and below the suite's ``timeout`` (300 s in
pyproject.toml), so a hang still ends in the test's own message (the child's output), not in
pytest-timeout's stack dump.

They are for waits on an event; never for what a test measures (a pace, a limit): a measured
time is asserted against the model (the fake clock) or against a figure that load does not move.
"""

from __future__ import annotations

__all__ = ["CHILD", "REACH"]

#: Seconds a short-lived child (``python -m crawlpace ...`` that prints and exits) may take.
CHILD = 240.0
#: Seconds for a long-lived child or a worker to reach a point the test then acts on (its first
#: output lines, a claim in the frontier, a connection to the server).
REACH = 120.0
