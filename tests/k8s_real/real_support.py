"""Helpers for the real-control-plane tests: the node shape of the session's cluster, polling."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from caldera.k8s.devcluster import NodeShape

__all__ = ["NODES", "wait_for"]

NODES = NodeShape(count=4, gpus=8, per_hypernode=2, hypernodes_per_spine=2)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
