"""Building a scope's policy from the settings, and moving its learned state between processes.

Both stores create a :class:`~crawlpace.policy.scope.ScopePolicy` per scope
the same way. A shared store also keeps what each policy learned in the
server, so that what one worker learned from a response (a backoff, a
Retry-After, rampup's rate) is what every worker admits by. It travels as the
compact, versioned layout of :mod:`crawlpace.policy.state` (a flat mapping of
numbers), written into a fresh policy built from this worker's settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .._exceptions import PolicyFormatError, StateFormatError
from .._settings._config import ScopeConfig, Settings
from ..policy.scope import ScopePolicy, ThrottlingScopeManagerProtocol
from ..policy.scope_manager import load_scope_manager
from ..policy.state import StateValue, decode, encode, export_state, restore_state

__all__ = ["PolicyFactory", "PolicyFormatError", "dump_policy", "has_rampup", "is_fresh", "load_policy",
           "with_rampup"]


class PolicyFactory:
    """Creates the policy of any scope from the settings.

    Every scope manager the settings name is imported at construction, so a
    bad path fails at start-up.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        configs = [settings.scope_defaults, *settings.scopes.values()]
        self.managers: dict[str, Callable[..., ThrottlingScopeManagerProtocol]] = {
            cfg.manager: load_scope_manager(cfg.manager) for cfg in configs if cfg.manager
        }
        self._fresh: dict[int, tuple[ScopeConfig, dict[str, StateValue]]] = {}
        self._summaries: dict[tuple[int, bool, bool], tuple[ScopeConfig, tuple[object, ...]]] = {}
        self._rampup_variant: PolicyFactory | None = None

    def rampup_variant(self) -> PolicyFactory:
        """A factory of the same settings with rampup on, for state written by a worker that ran it.

        A reader of the shared store whose settings leave rampup off (``crawlpace
        dashboard`` without the workers' options) would otherwise drop a rampup
        worker's learned rate when it reads the scope.
        """
        if self._rampup_variant is None:
            self._rampup_variant = PolicyFactory(with_rampup(self.settings))
        return self._rampup_variant

    def fresh_state(self, name: str) -> dict[str, StateValue]:
        """The state of a new policy of scope ``name`` (kept per scope configuration)."""
        config = self.settings.scope_config(name)
        if config.manager:  # a custom manager may hold its scope's name: no sharing
            return self._fresh_of(name)
        found = self._fresh.get(id(config))
        if found is None or found[0] is not config:
            found = self._fresh[id(config)] = (config, self._fresh_of(name))
        return found[1]

    def fresh_summary(self, policy: ScopePolicy) -> tuple[object, ...]:
        """The summary a new policy of ``policy``'s scope would have, with the same parts created."""
        name = policy.scope
        config = self.settings.scope_config(name)
        parts = (policy.manager is not None, policy.breaker is not None)
        key = (id(config), *parts)
        found = None if config.manager else self._summaries.get(key)
        if found is None or found[0] is not config:
            fresh = self.new(name)
            if parts[0]:
                fresh.ensure_manager()
            if parts[1]:
                fresh.ensure_breaker()
            found = (config, fresh.summary())
            if not config.manager:
                self._summaries[key] = found
        return found[1]

    def _fresh_of(self, name: str) -> dict[str, StateValue]:
        # Parts made on first use count too, at their starting values.
        policy = self.new(name)
        policy.ensure_manager()
        if policy.config.breaker.enabled:
            policy.ensure_breaker()
        return export_state(policy)

    def new(self, name: str) -> ScopePolicy:
        """A fresh policy for scope ``name``."""
        settings = self.settings
        config: ScopeConfig = settings.scope_config(name)
        autothrottle = settings.autothrottle
        warm = settings.warm_start
        if warm is not None:  # a head start from what an earlier crawl learned (crawlpace._throttle._learned)
            autothrottle = warm.autothrottle_for(name, config, autothrottle)
            config = warm.config_for(name, config)
        manager_cls = self.managers.get(config.manager) if config.manager else None
        return ScopePolicy(name, config, concurrency_cap=settings.concurrent_requests,
                           autothrottle=autothrottle,
                           manager=manager_cls(scope=name, config=config) if manager_cls else None,
                           rampup_target=settings.rampup_backoff_target)



def dump_policy(policy: ScopePolicy, factory: PolicyFactory) -> bytes:
    """The learned state of ``policy`` as bytes for the shared store.

    Only the fields that differ from a new policy of the scope are written: a
    reader starts from a new policy, so the rest comes back as it was (and a
    worker with newer settings reads its own defaults for them).
    """
    fresh = factory.fresh_state(policy.scope)
    return encode({key: value for key, value in export_state(policy).items()
                   if key not in fresh or fresh[key] != value})


def load_policy(data: bytes, factory: PolicyFactory, name: str) -> ScopePolicy:
    """A policy of scope ``name`` from the settings, with the state in ``data`` written in.

    Raises:
        PolicyFormatError: when the bytes are not state this version can read.
    """
    try:
        state = decode(data)
    except StateFormatError as exc:
        raise PolicyFormatError(str(exc)) from exc
    return restore_state(factory.new(name), state)


def with_rampup(settings: Settings) -> Settings:
    """``settings`` with rampup on for every scope: the defaults and each scope named."""
    return dataclasses.replace(
        settings, scope_defaults=dataclasses.replace(settings.scope_defaults, rampup=True),
        scopes={name: dataclasses.replace(cfg, rampup=True) for name, cfg in settings.scopes.items()})


def has_rampup(data: bytes) -> bool:
    """Whether stored policy state holds a rampup part (its writer ran rampup on the scope).

    Raises:
        PolicyFormatError: when the bytes are not state this version can read.
    """
    try:
        return any(key.startswith("r.") for key in decode(data))
    except StateFormatError as exc:
        raise PolicyFormatError(str(exc)) from exc


def is_fresh(policy: ScopePolicy, factory: PolicyFactory) -> bool:
    """True when ``policy`` learned nothing that changes admissions, compared with a new policy of its scope.

    The comparison is :meth:`ScopePolicy.summary` (what other workers must
    see), so a tally that moves with every response (the breaker's window)
    does not count until it changes something.
    """
    return policy.summary() == factory.fresh_summary(policy)
