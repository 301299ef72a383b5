"""Declared parameters of site profiles, and the checks behind their error messages.

A profile lists its parameters as :class:`Param` values. The same declaration
serves two readers: the farm, which turns each bad value in a farm file into a
line naming the site, the key, the value and the fix, and the profile's own
constructor, which raises :class:`ValueError` when called directly from Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["Param", "ParamValue"]

ParamValue = float | int | bool
Kind = Literal["number", "integer", "boolean"]


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of a profile.

    Attributes:
        name: the key in a farm file and the keyword of the constructor.
        kind: ``"number"`` (int or float, read as float), ``"integer"`` or ``"boolean"``.
        help: what the value means, with its unit, in a few words.
        default: the value when the key is absent; None makes the key required.
        low: the smallest allowed value, if any.
        above: the value must be strictly greater than ``low``.
        high: the largest allowed value, if any.
    """

    name: str
    kind: Kind
    help: str
    default: ParamValue | None = None
    low: float | None = None
    above: bool = False
    high: float | None = None

    @property
    def required(self) -> bool:
        """Whether the key must be given."""
        return self.default is None

    def expected(self) -> str:
        """Describe an acceptable value, such as ``a number > 0 (requests per second)``."""
        if self.kind == "boolean":
            return f"true or false ({self.help})"
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

    def convert(self, value: ParamValue) -> ParamValue:
        """Give an accepted value its canonical type (numbers become floats)."""
        if self.kind == "number":
            return float(value)
        return value

    def validate(self, value: object) -> ParamValue:
        """Check and convert a value given to a constructor.

        Raises:
            ValueError: naming the parameter, the value and what is expected.
        """
        problem = self.problem(value)
        if problem is not None or not isinstance(value, int | float):  # bool is an int
            raise ValueError(f"{self.name} = {value!r} {problem or 'is not valid'}: "
                             f"expected {self.expected()}")
        return self.convert(value)
