"""Helpers for the real-control-plane tests: the node shape of the session's cluster, polling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polling
from caldera.devcluster import NodeShape

__all__ = ["NODES", "wait_for"]

NODES = NodeShape(count=4, gpus=8, per_hypernode=2, hypernodes_per_spine=2)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """`polling.wait_for` with room for a loaded machine: the control plane answers in
    milliseconds when idle, but CI shares two cores with the rest of the suite."""
    return polling.wait_for(what, check, timeout=timeout)
