"""Declared parameters of site profiles, and the checks behind their error messages.

A profile lists its parameters as :class:`Param` values. Besides numbers and
booleans, a parameter may be a *choice* among a few words (``style =
"ietf"``) or a *schedule*: a list of ``[seconds, factor]`` pairs, the seconds
strictly increasing, saying from when on a site's capacity is multiplied by
which factor. The same declaration
serves two readers: the farm, which turns each bad value in a farm file into a
line naming the site, the key, the value and the fix, and the profile's own
constructor, which raises :class:`ValueError` when called directly from Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["MAX_STEPS", "Param", "ParamValue", "Schedule"]

#: A schedule: ``(seconds, factor)`` pairs in increasing order of seconds.
Schedule = tuple[tuple[float, float], ...]
ParamValue = float | int | bool | str | Schedule
Kind = Literal["number", "integer", "boolean", "choice", "schedule"]
#: The most steps a schedule may hold.
MAX_STEPS = 1000


def _schedule_problem(value: object) -> str | None:
    if not isinstance(value, list | tuple) or not value:
        return "is not a list of [seconds, factor] pairs"
    if len(value) > MAX_STEPS:
        return f"has more than {MAX_STEPS} steps"
    previous = -math.inf
    for step in value:
        if (not isinstance(step, list | tuple) or len(step) != 2
                or any(isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x)
                       for x in step)):
            return f"has a step {step!r} that is not a pair of finite numbers"
        seconds, factor = step
        if seconds < 0 or seconds <= previous:
            return "has seconds that are negative or not strictly increasing"
        if not 0 < factor <= 1000:
            return f"has a factor {factor!r} outside (0, 1000]"
        previous = seconds
    return None


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of a profile.

    Attributes:
        name: the key in a farm file and the keyword of the constructor.
        kind: ``"number"`` (int or float, read as float), ``"integer"``,
            ``"boolean"``, ``"choice"`` (one of ``choices``) or ``"schedule"``.
        help: what the value means, with its unit, in a few words.
        default: the value when the key is absent; None makes the key required.
        low: the smallest allowed value, if any.
        above: the value must be strictly greater than ``low``.
        high: the largest allowed value, if any.
        choices: the accepted words of a ``"choice"`` parameter.
    """

    name: str
    kind: Kind
    help: str
    default: ParamValue | None = None
    low: float | None = None
    above: bool = False
    high: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def required(self) -> bool:
        """Whether the key must be given."""
        return self.default is None

    def expected(self) -> str:
        """Describe an acceptable value, such as ``a number > 0 (requests per second)``."""
        if self.kind == "boolean":
            return f"true or false ({self.help})"
        if self.kind == "choice":
            return f"one of {', '.join(map(repr, self.choices))} ({self.help})"
        if self.kind == "schedule":
            return f"a list such as [[60, 0.5], [120, 1.0]] ({self.help})"
        bounds = []
        if self.low is not None:
            bounds.append(f"{'>' if self.above else '>='} {self.low:g}")
        if self.high is not None:
            bounds.append(f"<= {self.high:g}")
        article = "an integer" if self.kind == "integer" else "a number"
        text = f"{article} {' and '.join(bounds)}" if bounds else article
        return f"{text} ({self.help})"

    def problem(self, value: object) -> str | None:
        """Say what is wrong with ``value``, or return None when it is acceptable."""
        if self.kind == "boolean":
            return None if isinstance(value, bool) else "is not true or false"
        if self.kind == "choice":
            return None if value in self.choices and isinstance(value, str) else "is not an accepted word"
        if self.kind == "schedule":
            return _schedule_problem(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"is not {'an integer' if self.kind == 'integer' else 'a number'}"
        if self.kind == "integer" and not isinstance(value, int):
            return "is not an integer"
        if not math.isfinite(value):
            return "is not a finite number"
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return "is too small"
        if self.high is not None and value > self.high:
            return "is too large"
        return None

    def convert(self, value: object) -> ParamValue:
        """Give an accepted value its canonical type (numbers become floats, schedules tuples)."""
        if self.kind == "number" and isinstance(value, int | float):
            return float(value)
        if self.kind == "schedule" and isinstance(value, list | tuple):
            return tuple((float(seconds), float(factor)) for seconds, factor in value)
        if isinstance(value, int | float | str):
            return value
        raise TypeError(f"{self.name}: cannot convert {value!r}")

    def validate(self, value: object) -> ParamValue:
        """Check and convert a value given to a constructor.

        Raises:
            ValueError: naming the parameter, the value and what is expected.
        """
        problem = self.problem(value)
        if problem is not None:
            raise ValueError(f"{self.name} = {value!r} {problem or 'is not valid'}: "
                             f"expected {self.expected()}")
        return self.convert(value)

    def number(self, value: object) -> float:
        """:meth:`validate` a number parameter and return it as a float."""
        checked = self.validate(value)
        assert isinstance(checked, int | float)
        return float(checked)

    def integer(self, value: object) -> int:
        """:meth:`validate` an integer parameter."""
        checked = self.validate(value)
        assert isinstance(checked, int)
        return int(checked)

    def flag(self, value: object) -> bool:
        """:meth:`validate` a boolean parameter."""
        return bool(self.validate(value))

    def word(self, value: object) -> str:
        """:meth:`validate` a choice parameter."""
        return str(self.validate(value))

    def schedule(self, value: object) -> Schedule:
        """:meth:`validate` a schedule parameter."""
        checked = self.validate(value)
        assert isinstance(checked, tuple)
        return checked
