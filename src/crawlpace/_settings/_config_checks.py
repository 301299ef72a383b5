"""Checks of single setting values, shared by the typed objects and the parsers.

Each check records a problem and returns ``None`` on failure, so that parsing
can go on and report every problem in one :class:`ConfigError`.
"""

from __future__ import annotations

import difflib
import importlib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._exceptions import ConfigError
from .._jitter import HALF_JITTER, NO_JITTER, Jitter

__all__ = ["Checker", "import_object", "kind_of", "parse_jitter", "unknown_key_message"]

def import_object(path: str) -> Any:
    """Import ``module.attr`` from a dotted path.

    Raises:
        ImportError: when the module cannot be imported.
        AttributeError: when the module has no such attribute.
        ValueError: when the path has no module part.
    """
    module_name, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)


def kind_of(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def unknown_key_message(where: str, key: str, valid: Iterable[str]) -> str:
    valid = sorted(valid)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f' did you mean "{close[0]}"?' if close else ""
    return f'{where}: unknown key "{key}";{hint} Valid keys: {", ".join(valid)}'


class Checker:
    """Collects every problem of a settings tree, so that one error can list them all."""

    def __init__(self, owner: str = "") -> None:
        self.owner = owner
        self.problems: list[str] = []

    def fail(self, message: str) -> None:
        self.problems.append(message)

    def coerce(self, obj: object, name: str, parse: Callable[[str, object], Any]) -> None:
        """Check field ``name`` of a frozen object and store its normalised form."""
        value = parse(f"{self.owner}.{name}", getattr(obj, name))
        if value is not None:
            object.__setattr__(obj, name, value)

    def raise_if_any(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)

    # -- scalars --------------------------------------------------------

    def seconds(self, label: str, value: object, *, optional: bool = False) -> float | None:
        """A finite, non-negative number of seconds."""
        if value is None and optional:
            return None
        return self.number(label, value, example="1.0", unit=" of seconds")

    def number(self, label: str, value: object, *, example: str, unit: str = "",
               positive: bool = False, maximum: float | None = None) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"{label}: expected a number{unit}, got {kind_of(value)}; "
                      f"use a number such as {example}")
            return None
        number = float(value)
        if math.isnan(number):
            self.fail(f"{label}: NaN is not allowed; use a finite number such as {example}")
            return None
        if math.isinf(number):
            self.fail(f"{label}: {value!r} is infinite; use a finite number such as {example}")
            return None
        if number < 0 or (positive and number == 0):
            need = "more than 0" if positive else "0 or more"
            self.fail(f"{label}: {value!r} is {'negative' if number < 0 else 'zero'}; use {need}")
            return None
        if maximum is not None and number > maximum:
            self.fail(f"{label}: {value!r} is too large; use at most {maximum:g}")
            return None
        return number

    def window(self, label: str, value: object) -> float | None:
        """A window length: a positive, finite number of seconds."""
        return self.number(label, value, example="60.0", unit=" of seconds", positive=True)

    def count(self, label: str, value: object, *, example: str = "8", minimum: int = 1) -> int | None:
        """A whole number of ``minimum`` (1) or more."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"{label}: expected a whole number, got {kind_of(value)}; "
                      f"use a whole number such as {example}")
            return None
        if isinstance(value, float):
            if not value.is_integer():
                self.fail(f"{label}: {value!r} is not a whole number; "
                          f"use a whole number such as {example}")
                return None
            value = int(value)
        if value < minimum:
            self.fail(f"{label}: {value!r} is too small; use a whole number of {minimum} or more")
            return None
        return value

    def flag(self, label: str, value: object) -> bool | None:
        if not isinstance(value, bool):
            self.fail(f"{label}: expected true or false, got {kind_of(value)}")
            return None
        return value

    def import_path(self, label: str, value: object, *, optional: bool = True) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or "." not in value.strip(". "):
            self.fail(f"{label}: expected an import path such as "
                      f"'myproject.throttling.Manager', got {kind_of(value)}")
            return None
        return value

    def jitter(self, label: str, value: object) -> Jitter | None:
        try:
            return parse_jitter(value, label=label)
        except ConfigError as exc:
            self.problems.extend(exc.problems)
            return None

    def pair(self, label: str, value: object) -> tuple[float, float] | None:
        """A number, or a [low, high] pair of numbers (RAMPUP_BACKOFF_TARGET)."""
        if isinstance(value, list | tuple):
            if len(value) != 2:
                self.fail(f"{label}: expected a number or a [low, high] pair, got {kind_of(value)}")
                return None
            low = self.number(f"{label}[0]", value[0], example="1")
            high = self.number(f"{label}[1]", value[1], example="3")
            if low is None or high is None:
                return None
            if low is not None and low > high:
                self.fail(f"{label}: {list(value)!r} has low > high; write [low, high] with low <= high")
                return None
            return (low, high)
        single = self.number(label, value, example="1")
        return None if single is None else (single, single)

    def keys(self, where: str, data: Mapping[str, Any], valid: Iterable[str]) -> None:
        valid = set(valid)
        for key in data:
            if key not in valid:
                self.fail(unknown_key_message(where, str(key), valid))

    def mapping(self, label: str, value: object) -> Mapping[str, Any] | None:
        if not isinstance(value, Mapping):
            self.fail(f"{label}: expected a table of settings (a dict), got {kind_of(value)}")
            return None
        return value

    def share(self, label: str, value: object) -> float | None:
        """A fraction from 0 up to (not including) 1."""
        number = self.number(label, value, example="0.1")
        if number is not None and number >= 1.0:
            self.fail(f"{label}: {value!r} is out of range; use a share from 0 to below 1, e.g. 0.1")
            return None
        return number

    # -- compound values --------------------------------------------------

    def codes(self, label: str, value: object) -> frozenset[int] | None:
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            self.fail(f"{label}: expected a list of HTTP status codes such as [429, 503], "
                      f"got {kind_of(value)}")
            return None
        codes: set[int] = set()
        for code in value:
            if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
                self.fail(f"{label}: {code!r} is not an HTTP status code; use whole numbers from 100 to 599")
                return None
            codes.add(code)
        return frozenset(codes)

    def exceptions(self, label: str, value: object) -> tuple[str | type[BaseException], ...] | None:
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            self.fail(f"{label}: expected a list of exception classes or import paths, got {kind_of(value)}")
            return None
        out: list[str | type[BaseException]] = []
        for item in value:
            is_class = isinstance(item, type) and issubclass(item, BaseException)
            if is_class or (isinstance(item, str) and "." in item.strip(".")):
                out.append(item)
            else:
                self.fail(f"{label}: {item!r} is neither an exception class nor an import path "
                          "such as 'builtins.TimeoutError'")
                return None
        return tuple(out)

    def backoff_relations(self, label: Callable[[str], str], values: Mapping[str, Any],
                          source: str = "") -> None:
        """Check the backoff values against each other; ``label`` names each key."""
        factor, low, high = values["delay_factor"], values["min_delay"], values["max_delay"]
        if factor < 1.0:
            self.fail(f"{label('delay_factor')}: {factor:g} would shorten delays on backoff; "
                      "use 1.0 or more")
        if low is not None and low > high:
            other = label("max_delay").removeprefix(source)
            self.fail(f"{label('min_delay')}: {low:g} is above {other} ({high:g}); "
                      "make the minimum no larger than the maximum")
        concurrency_factor = values["concurrency_factor"]
        if not 0.0 < concurrency_factor <= 1.0:
            self.fail(f"{label('concurrency_factor')}: {concurrency_factor:g} is out of range; "
                      "use a factor above 0 and at most 1, e.g. 0.5")


def parse_jitter(value: object, *, label: str = "RANDOMIZE_DOWNLOAD_DELAY") -> Jitter:
    """Turn the seed's jitter forms into a :class:`Jitter`.

    ``True`` means +/-50 %, ``False`` none, a float ``f`` means +/-``f`` and a
    ``[low, high]`` pair means ``delay * (1 + low)`` to ``delay * (1 + high)``.

    Raises:
        ConfigError: naming ``label`` when the value has none of those forms.
    """
    if value is True:
        return HALF_JITTER
    if value is False or value is None:
        return NO_JITTER
    if isinstance(value, Jitter):
        return value
    if isinstance(value, int | float):
        number = float(value)
        if math.isnan(number) or not 0.0 <= number <= 1.0:
            raise ConfigError([f"{label}: {value!r} is out of range; use a factor from 0 to 1 "
                               "(0.5 means +/-50 %)"])
        return Jitter(-number, number) if number else NO_JITTER
    if isinstance(value, list | tuple) and len(value) == 2 and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        low, high = float(value[0]), float(value[1])
        if any(math.isnan(v) or math.isinf(v) for v in (low, high)):
            raise ConfigError([f"{label}: {list(value)!r} must hold finite numbers, e.g. [-0.1, 0.3]"])
        if low is not None and low > high:
            raise ConfigError([f"{label}: {list(value)!r} has low > high; write [low, high] with "
                               "low <= high, e.g. [-0.1, 0.3]"])
        if low < -1.0:
            raise ConfigError([f"{label}: {list(value)!r} would make delays negative; keep low >= -1"])
        return Jitter(low, high)
    raise ConfigError([f"{label}: expected true, false, a factor such as 0.5 or a [low, high] pair, "
                       f"got {kind_of(value)}"])
