"""The Lua scripts of the Redis store and of the shared frontier, read from package data.

Scripts that work with the time start with ``lua/clock.lua``, which defines
``now`` (the caller's time in ``ARGV[1]``, or the server's ``TIME`` when that
is empty) and ``num`` (a time as text with every digit), so that this logic
is written once. After it comes the Lua of the rules the Python side applies
too (:func:`crawlpace.policy._shared_rules.lua_prelude`: the moving means'
weights, the quota's refill), generated from their Python definitions.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from importlib import resources

from ...policy._shared_rules import lua_prelude

__all__ = ["CLOCK", "load_scripts"]

#: The prelude of every script that reads the time (``lua/clock.lua``, then the shared rules).
CLOCK = _CLOCK = (resources.files("crawlpace.stores").joinpath("lua", "clock.lua").read_text("utf-8")
                  + lua_prelude())


def load_scripts(package: str, names: Iterable[str], *, clocked: Collection[str]) -> dict[str, str]:
    """The source of each ``package/lua/<name>.lua``; those named in ``clocked`` get the clock first."""
    folder = resources.files(package).joinpath("lua")
    return {name: (_CLOCK if name in clocked else "") + folder.joinpath(f"{name}.lua").read_text("utf-8")
            for name in names}
