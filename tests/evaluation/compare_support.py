"""A scenario whose runs die in the worker process without a word (for `caldera compare
--jobs N`): spawned workers import this module by name, from the test folder on sys.path."""

from __future__ import annotations

import os
from dataclasses import dataclass

from caldera.sim import Scenario

__all__ = ["DYING_EXIT", "DyingScenario"]

DYING_EXIT = 3


@dataclass(frozen=True)
class DyingScenario(Scenario):
    """Every run of a policy named `dies` ends its process at once (exit code 3), as an
    out-of-memory kill would: no exception, no message."""

    def with_policy(self, name: str) -> Scenario:
        if name == "dies":
            os._exit(DYING_EXIT)
        return super().with_policy(name)
