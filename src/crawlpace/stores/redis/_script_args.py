"""The positional arguments of the Redis store's Lua scripts, named once.

Redis passes a script its arguments as one flat list, ``ARGV``. Each layout
below names them: a head, then, for a script that handles several scopes, the
same values for each scope in turn (``each``), then an optional tail. The
callers (``_redis_admit.py``, ``_redis_release.py``, ``_writeback.py``,
``_cluster.py``) find a value by its name here, and every script carries the
same names in a comment block::

    -- ARGV layout (stores/redis/_script_args.py):
    --   head: now lease_id ...
    --   each scope: concurrency delay ...
    --   tail: mode

``tests/test_script_args.py`` checks that the block matches the layout and
that the script's code reads its per-scope values at the strides and offsets
the layout gives. Adding a value means adding its name here and in the block.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ACQUIRE", "ALLOT", "LAYOUTS", "RELEASE", "ROLLBACK", "Layout"]


@dataclass(frozen=True, slots=True)
class Layout:
    """The ``ARGV`` of one script: its head, the values of each scope, the tail; and its keys per scope."""

    script: str
    head: tuple[str, ...]
    each: tuple[str, ...] = ()
    tail: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    def offset(self, name: str) -> int:
        """Where ``name`` sits among one scope's values, from 0 (``ARGV[base + offset + 1]`` in Lua)."""
        return self.each.index(name)

    def at(self, scope: int, name: str) -> int:
        """The 0-based index in the argument list of scope number ``scope``'s value ``name``."""
        return len(self.head) + len(self.each) * scope + self.each.index(name)

    def comment(self) -> list[str]:
        """The comment block the script carries (see the module's docstring)."""
        lines = ["-- ARGV layout (stores/redis/_script_args.py):", "--   head: " + " ".join(self.head)]
        if self.each:
            lines.append("--   each scope: " + " ".join(self.each))
        if self.tail:
            lines.append("--   tail: " + " ".join(self.tail))
        return lines


ACQUIRE = Layout(
    "acquire",
    head=("now", "lease_id", "lease_seconds", "idle_seconds", "scope_count"),
    each=("concurrency", "delay", "delay_per_slot", "floor", "jitter_factor", "known_version", "quota_use",
          "quota_capacity", "quota_rate"),
    tail=("mode",),
    keys=("admission", "leases", "resting", "policy"),
)

RELEASE = Layout(
    "release",
    head=("now", "lease_id", "idle_seconds", "scope_count"),
    each=("slot_ready", "free", "add_response", "add_error", "latency", "version", "policy_blob",
          "concurrency", "delay", "delay_per_slot", "floor", "hold_until", "generation", "given_up",
          "breaker_pause", "rest", "quota_capacity", "quota_rate", "quota_charge"),
    tail=("mean_gap",),
    keys=("admission", "leases", "resting", "policy"),
)

ROLLBACK = Layout(
    "rollback",
    head=("lease_id", "scope_count"),
    each=("version", "sends", "last_written", "next_written", "next_before", "last_before",
          "gap_before", "was_new"),
    keys=("admission", "leases"),
)

ALLOT = Layout(
    "allot",
    head=("now", "lease_seconds", "idle_seconds", "version", "sends", "last_send", "responses",
          "errors", "latency", "latencies", "mean_step", "mean_first", "given_back_count"),
    tail=("given_back_ids...", "kept_ids..."),
    keys=("admission", "leases"),
)

#: Every layout, by script name.
LAYOUTS = {layout.script: layout for layout in (ACQUIRE, RELEASE, ROLLBACK, ALLOT)}
