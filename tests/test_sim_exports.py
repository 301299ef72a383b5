"""The simulator's public names are what ``crawlpace.sim.__all__`` lists, kept sorted."""

from __future__ import annotations

import crawlpace.sim as sim


def test_sim_all_is_sorted_and_complete() -> None:
    public = {name for name, value in vars(sim).items()
              if not name.startswith("_") and name != "annotations" and not isinstance(value, type(sim))}
    assert set(sim.__all__) == public
    # Constants, then classes, then functions, each group in order (ruff's RUF022 layout).
    assert sim.__all__ == sorted(sim.__all__, key=lambda name: (
        0 if name.isupper() else 1 if name[0].isupper() else 2, name))


def test_profiles_are_named_after_their_classes() -> None:
    assert set(sim.PROFILES) == {"challenge", "conncap", "crawldelay", "dead", "flaky", "headers", "overload",
                                 "queue", "quota", "ratelimit", "reqrate", "retryafter", "shifting", "slow",
                                 "window"}
    assert all(issubclass(cls, sim.Site) for cls in sim.PROFILES.values())
