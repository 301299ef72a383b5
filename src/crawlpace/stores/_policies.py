"""Building a scope's policy from the settings, and moving it between processes.

Both stores create a :class:`~crawlpace.policy.scope.ScopePolicy` per scope
the same way. A shared store also keeps each policy in the server, so that
what one worker learned from a response (a backoff, a Retry-After, rampup's
rate) is what every worker admits by: the policy travels as a pickle, and is
read back with an unpickler that only rebuilds crawlpace's own policy classes
(and the scope managers the settings name), never arbitrary objects.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from typing import Any

from .._config import ScopeConfig, Settings
from .._manager import load_scope_manager
from ..policy.scope import ScopePolicy, ThrottlingScopeManagerProtocol

__all__ = ["PolicyFactory", "PolicyFormatError", "dump_policy", "load_policy"]

# Modules whose classes a policy may hold, and the few builtins its state uses.
_SAFE_PREFIXES = ("crawlpace.policy.", "crawlpace._config", "crawlpace._jitter")
_SAFE_GLOBALS = {("collections", "deque"), ("builtins", "float"), ("builtins", "frozenset"),
                 ("builtins", "set"), ("copyreg", "_reconstructor"), ("builtins", "object")}


class PolicyFormatError(ValueError):
    """A stored policy could not be read (another version wrote it, or it is not ours)."""


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

    def new(self, name: str) -> ScopePolicy:
        """A fresh policy for scope ``name``."""
        settings = self.settings
        config: ScopeConfig = settings.scope_config(name)
        manager_cls = self.managers.get(config.manager) if config.manager else None
        return ScopePolicy(name, config, concurrency_cap=settings.concurrent_requests,
                           autothrottle=settings.autothrottle,
                           manager=manager_cls(scope=name, config=config) if manager_cls else None,
                           rampup_target=settings.rampup_backoff_target)

    def allowed(self) -> set[tuple[str, str]]:
        """The (module, name) pairs of the scope managers in use, which a policy may hold."""
        out = set()
        for cls in self.managers.values():
            out.add((getattr(cls, "__module__", ""), getattr(cls, "__qualname__", "")))
        return out


def dump_policy(policy: ScopePolicy) -> bytes:
    """The policy as bytes for the shared store."""
    return pickle.dumps(policy, protocol=pickle.HIGHEST_PROTOCOL)


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, extra: set[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self._extra = extra

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(_SAFE_PREFIXES) or (module, name) in _SAFE_GLOBALS \
                or (module, name) in self._extra:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a stored policy may not hold {module}.{name}")


def load_policy(data: bytes, extra: set[tuple[str, str]] | None = None) -> ScopePolicy:
    """Read back a policy written by :func:`dump_policy`.

    Args:
        data: the stored bytes.
        extra: further (module, name) classes allowed: the scope managers in use.

    Raises:
        PolicyFormatError: when the bytes are not a policy this version can read.
    """
    try:
        policy = _Unpickler(data, extra or set()).load()
    except Exception as exc:
        raise PolicyFormatError(f"unreadable stored policy: {exc}") from exc
    if not isinstance(policy, ScopePolicy):
        raise PolicyFormatError(f"a stored policy is a {type(policy).__name__}, not a ScopePolicy")
    return policy
