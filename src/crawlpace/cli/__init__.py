"""The ``crawlpace`` command line."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TextIO

from .. import __version__
from .._exceptions import ConfigError, StoreUnreachable
from .._redact import RedactingFormatter, RedactingStream, redact
from .._settings._config import ScopeConfig, Settings
from .._settings._ineffective import static_notes
from ..frontier import JournalError
from ..observe._server import ServeError

__all__ = ["EXIT_BAD_SETTINGS", "EXIT_MISSING_DEPENDENCY", "EXIT_NO_STORE", "EXIT_SERVE", "main"]

#: Exit status for invalid settings (argparse uses 2 for usage errors).
EXIT_BAD_SETTINGS = 3
#: Exit status when the shared store cannot be reached at start-up.
EXIT_NO_STORE = 2
#: Exit status when a command needs an optional dependency that is not installed.
EXIT_MISSING_DEPENDENCY = 4
#: Exit status when a server (--metrics-port, --dashboard) cannot listen, or would be unsafe.
EXIT_SERVE = 5
#: The optional dependencies of the commands, all in the 'cli' extra.
_OPTIONAL = frozenset({"aiohttp", "httpx", "rich", "matplotlib", "prometheus_client"})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crawlpace",
        description="Throttling for crawlers and API clients.",
    )
    parser.add_argument("--version", action="version", version=f"crawlpace {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more (-v: info, -vv: debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from . import crawl, dashboard, demo, enqueue, guard, purge, sim, status

    demo.add_parser(sub, common)
    crawl.add_parser(sub, common)
    dashboard.add_parser(sub, common)
    enqueue.add_parser(sub, common)
    guard.add_parser(sub, common)
    purge.add_parser(sub, common)
    sim.add_parser(sub, common)
    status.add_parser(sub, common)

    check = sub.add_parser("check", parents=[common],
                           help="validate a TOML settings file and print what it means")
    check.add_argument("config", help="path to a crawlpace TOML file")
    check.add_argument("--json", action="store_true", help="print the settings as JSON")
    return parser


def _cmd_check(args: argparse.Namespace) -> int:
    settings = Settings.from_toml(args.config)
    data = asdict(settings)
    if args.json:
        print(json.dumps(data, default=_jsonable, sort_keys=True))
        return 0
    print(f"{args.config}: valid")
    print(f"  concurrent_requests = {settings.concurrent_requests}")
    print(f"  every scope: {_describe(settings.scope_defaults, settings)}")
    for name, cfg in sorted(settings.scopes.items()):
        print(f"  scope {name!r}: {_describe(cfg, settings)}")
    crawl = settings.crawl.given()
    if crawl:  # the [crawl] table, as the file writes it
        print("  crawlpace crawl: " + " ".join(f"{key}={json.dumps(value)}" for key, value in crawl.items()))
    for note in static_notes(settings):
        print(f"  note: {note}")
    return 0


def _describe(cfg: ScopeConfig, settings: Settings) -> str:
    text = (f"concurrency={_concurrency(cfg.concurrency, settings)} delay={cfg.delay:g}s "
            f"delay_per_slot={cfg.delay_per_slot:g}s jitter={cfg.jitter.describe()}")
    if cfg.rampup:
        low, high = settings.rampup_backoff_target
        band = f"{low:g}" if low == high else f"{low:g}-{high:g}"
        slots = min(cfg.rampup_max_concurrency, settings.concurrent_requests)
        text += (f" rampup=on (from that rate up to {slots}"
                 f" slots and {cfg.rampup_min_delay:g}s between sends, aiming at {band} backoff "
                 f"answers per {cfg.window:g}s)")
    return text


def _concurrency(configured: int, settings: Settings) -> str:
    cap = settings.concurrent_requests
    return str(configured) if configured <= cap else f"{configured} (capped at {cap} by concurrent_requests)"


def _jsonable(value: object) -> object:
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return str(value)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    Everything a command prints or logs, a traceback included, passes
    through :func:`~crawlpace._redact.redact`: no password reaches the terminal.
    """
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(stdout), RedactingStream(stderr)
    try:
        return _main(argv)
    except BrokenPipeError:
        # Whoever read the output went away (`crawlpace sim | head`, a script that stopped
        # reading): nothing more can reach it. Point stdout at /dev/null so that the flush at
        # exit does not fail again, and end as a broken pipe does, without a traceback.
        _silence(stdout)
        return 1
    except BaseException as exc:  # an uncaught error: its traceback, masked, before the streams go back
        if not isinstance(exc, SystemExit | KeyboardInterrupt):
            import traceback

            traceback.print_exc()
            return 1
        raise
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _silence(stream: TextIO) -> None:
    """Send what is left for ``stream`` (a closed pipe) to /dev/null instead."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind it (a test's StringIO): nothing to flush
        pass


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    try:
        if args.command == "check":
            return _cmd_check(args)
        # Every other command is a module of this package with a run(args) (imported by _parser).
        command = importlib.import_module(f"{__name__}.{args.command}")
        run: Callable[[argparse.Namespace], int] = command.run
        return run(args)
    except ConfigError as exc:
        print(f"crawlpace: invalid settings:\n{exc}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    except StoreUnreachable as exc:
        print(f"crawlpace {args.command}: {redact(exc)}", file=sys.stderr)
        return EXIT_NO_STORE
    except ServeError as exc:
        print(f"crawlpace {args.command}: {redact(exc)}", file=sys.stderr)
        return EXIT_SERVE
    except ModuleNotFoundError as exc:
        if exc.name not in _OPTIONAL:
            raise
        print(f"crawlpace {args.command}: needs {exc.name}, which is not installed; "
              f"install it with: pip install 'crawlpace[cli]'", file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY
    except (FileNotFoundError, FileExistsError, IsADirectoryError, PermissionError, JournalError) as exc:
        print(f"crawlpace: {redact(exc)}", file=sys.stderr)
        return EXIT_BAD_SETTINGS


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
