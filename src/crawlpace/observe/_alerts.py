"""Alerts: run a command when a scope is given up or its breaker opens.

The command is the user's own (``crawlpace crawl --on-give-up CMD``), run
through the shell like a line they typed, with the event in its environment:
``CRAWLPACE_EVENT`` (``give_up`` or ``breaker_open``), ``CRAWLPACE_SCOPE``
and ``CRAWLPACE_REASON``. Commands run in the background; the crawl never
waits for one, except at close, for at most :data:`CLOSE_TIMEOUT` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os

__all__ = ["CLOSE_TIMEOUT", "CommandAlert"]

logger = logging.getLogger(__name__)

#: Seconds :meth:`CommandAlert.aclose` waits for commands still running.
CLOSE_TIMEOUT = 10.0


class CommandAlert:
    """Runs ``command`` once per event.

    Args:
        command: a shell command line.
    """

    def __init__(self, command: str) -> None:
        self.command = command
        self._tasks: set[asyncio.Task[None]] = set()
        self.runs = 0

    def give_up(self, scope: str, reason: str) -> None:
        """Run the command for a scope given up."""
        self._spawn("give_up", scope, reason)

    def breaker_open(self, scope: str, reason: str) -> None:
        """Run the command for a breaker seen open."""
        self._spawn("breaker_open", scope, reason)

    def _spawn(self, event: str, scope: str, reason: str) -> None:
        logger.warning("scope %s: %s; running the alert command", scope, reason)
        self.runs += 1
        task = asyncio.get_running_loop().create_task(self._run(event, scope, reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, event: str, scope: str, reason: str) -> None:
        env = {**os.environ, "CRAWLPACE_EVENT": event, "CRAWLPACE_SCOPE": scope, "CRAWLPACE_REASON": reason}
        try:
            process = await asyncio.create_subprocess_shell(
                self.command, env=env, stdin=asyncio.subprocess.DEVNULL)
            code = await process.wait()
        except OSError as exc:
            logger.error("scope %s: the alert command %r could not start: %s", scope, self.command, exc)
            return
        if code != 0:
            logger.error("scope %s: the alert command %r exited with status %d", scope, self.command, code)

    async def aclose(self) -> None:
        """Wait for running commands, at most :data:`CLOSE_TIMEOUT` seconds."""
        if not self._tasks:
            return
        _done, pending = await asyncio.wait(set(self._tasks), timeout=CLOSE_TIMEOUT)
        for task in pending:
            logger.warning("an alert command still runs after %gs; leaving it", CLOSE_TIMEOUT)
            task.cancel()
