"""Waiting in tests that drive real servers: poll until something holds, fail naming it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

__all__ = ["wait_for"]


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1
) -> Any:
    """Poll `check` until it returns something truthy; fail the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
