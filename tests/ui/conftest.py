"""Fixtures for the dashboard's browser tests: Debian's Chromium (scripts/apt-packages.txt)
driven by Playwright for Python (never `playwright install`: no browser download), and a real
`caldera serve` per test."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from service_support import ALICE, BOB, OPS, Server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
UI_CONFIG: dict[str, Any] = {
    "queues": [
        {"name": "team-a", "weight": 1, "deserved": {"gpu": 6}, "reclaimable": True},
        {"name": "team-b", "weight": 1, "capability": {"gpu": 4}, "reclaimable": True},
    ],
    "tokens": [
        {"token": ALICE, "user": "alice", "queues": ["team-a"]},
        {"token": BOB, "user": "bob", "queues": ["team-b"]},
        {"token": OPS, "user": "ops", "queues": ["*"], "critical": True, "admin": True},
    ],
    "policy": {"grace_period": 2, "throttle_timeout": 60},
    "poll_interval": 0.05,
}


def _chromium() -> str:
    if os.path.exists(CHROMIUM) and shutil.which("chromium"):
        return CHROMIUM
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is missing under CI: scripts/system-deps.sh installs it")
    pytest.skip("Chromium not installed (Debian package chromium: make system-deps as root)")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


@contextmanager
def serving(tmp_path: Path) -> Iterator[Server]:
    """A `caldera serve` with UI_CONFIG, stopped and its tasks killed afterwards."""
    running = Server(tmp_path, None, UI_CONFIG)
    try:
        yield running.start()
    finally:
        running.stop()
        running.kill_tasks()
        running.close_clients()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with serving(tmp_path) as running:
        yield running


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go: CALDERA_UI_SCREENSHOTS (e.g. docs/images), else a temp dir."""
    chosen = os.environ.get("CALDERA_UI_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path / "shots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
