"""Policies: named compositions of cycle phases. Baselines are just other compositions.

The registry of names lives above the core and the baselines (`caldera.policies`): the core
only defines what a policy is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from caldera.core.config import PolicyConfig
from caldera.core.context import CycleContext

__all__ = ["Phase", "Policy"]

Phase = Callable[[CycleContext], None]


@dataclass(frozen=True)
class Policy:
    """`phases` run in order on one cycle context. `defaults` adjusts the PolicyConfig a
    scenario gets when it names this policy (e.g. a baseline's 30 s grace period).

    `remembers_quiet_cycles`: a cycle that decided nothing is recorded, and the next one
    answered from the record without running the phases when nothing but time and pending
    arrivals changed (core/shortcuts/quiet.py). Its proof that the answer is what the
    phases decide reads `CALDERA`'s phases, so only a policy with exactly those phases may
    set it; any other composition leaves it off and runs its phases every cycle."""

    name: str
    phases: tuple[Phase, ...]
    description: str = ""
    defaults: Callable[[PolicyConfig], PolicyConfig] = lambda config: config
    remembers_quiet_cycles: bool = False
