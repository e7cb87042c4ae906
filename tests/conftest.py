"""Shared test configuration: where ../shared lives, hypothesis profiles, the core as source."""

from __future__ import annotations

import os
from pathlib import Path

# The suite runs the core's Python sources even where `make fast` compiled it (caldera/compiled.py):
# tests wrap and replace functions of the core, which a compiled module calls directly.
# tests/sim/test_compiled.py checks the compiled build against the sources in subprocesses.
os.environ.setdefault("CALDERA_PURE", "1")

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not beside the checkout")
    return SHARED
