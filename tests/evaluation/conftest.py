"""Fixtures for the evaluation tests: trace excerpts cut from ../shared at test time."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def openb(shared: Path) -> Path:
    folder = shared / "traces" / "openb"
    if not folder.is_dir():
        pytest.skip("../shared/traces/openb is missing")
    return folder


@pytest.fixture(scope="session")
def philly(shared: Path) -> Path:
    path = shared / "traces" / "philly" / "philly_runtime.csv"
    if not path.is_file():
        pytest.skip("../shared/traces/philly is missing")
    return path
