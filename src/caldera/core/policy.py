"""Policies: named compositions of cycle phases. Baselines are just other registrations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from caldera.core.config import PolicyConfig
from caldera.core.context import CycleContext

__all__ = ["Phase", "Policy", "get_policy", "policy_names", "register_policy"]

Phase = Callable[[CycleContext], None]


@dataclass(frozen=True)
class Policy:
    """`phases` run in order on one cycle context. `defaults` adjusts the PolicyConfig a
    scenario gets when it names this policy (e.g. a baseline's 30 s grace period)."""

    name: str
    phases: tuple[Phase, ...]
    description: str = ""
    defaults: Callable[[PolicyConfig], PolicyConfig] = lambda config: config


_REGISTRY: dict[str, Policy] = {}


def register_policy(policy: Policy) -> Policy:
    _REGISTRY[policy.name] = policy
    return policy


def get_policy(name: str) -> Policy:
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"unknown policy {name!r} (known: {known})") from None


def policy_names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def _load_builtins() -> None:
    # Imported late: the built-in policies import the phases, which import this module.
    import caldera.baselines
    import caldera.core.cycle  # noqa: F401
