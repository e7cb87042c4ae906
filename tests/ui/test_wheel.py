"""A wheel that works (issue 33): `pip wheel .` carries the dashboard's assets, and a clean
virtualenv with only that wheel serves `/ui` whose pages update live in Chromium (htmx
loaded from the package, no CDN). The wheel's dependencies come from the test's own
environment (a path in a .pth file, not its editable caldera), so nothing is downloaded."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import service_support
from playwright.sync_api import expect
from service_support import ALICE, Server
from test_browser import LIVE, assert_not_reloaded, log_in, mark, sleeper

ROOT = Path(__file__).resolve().parents[2]
HTMX = "caldera/service/ui/static/vendor/htmx.min.js"


@pytest.fixture(scope="module")
def wheel_caldera(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`caldera` of a fresh virtualenv holding only the wheel built from this checkout."""
    folder = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(folder / "dist"), str(ROOT)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert "deprecat" not in built.stderr.lower(), built.stderr  # project.license, for one
    (wheel,) = (folder / "dist").glob("caldera-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert HTMX in archive.namelist()
        assert b"htmx" in archive.read(HTMX)[:4096]
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    inside = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # The dependencies: this environment's site-packages as a plain path (its .pth files, the
    # editable caldera among them, are not read from there).
    (Path(inside) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run(
        [str(python), "-c", "import caldera; print(caldera.__file__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert where.startswith(inside), f"caldera came from {where}, not the wheel"
    return venv / "bin" / "caldera"


@pytest.fixture
def wheel_server(
    wheel_caldera: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Server]:
    from conftest import serving

    monkeypatch.setattr(service_support, "CALDERA", str(wheel_caldera))
    with serving(tmp_path) as running:
        yield running


def test_a_server_installed_from_the_wheel_serves_a_live_dashboard(
    browser: Any, wheel_server: Server
) -> None:
    page = log_in(browser, wheel_server, ALICE)
    mark(page)
    assert page.evaluate("typeof window.htmx") == "object", "htmx did not load"
    job = sleeper(wheel_server, "team-a", name="from-the-wheel")
    row = page.locator(f'tr[data-job="{job}"]')
    expect(row).to_have_attribute("data-state", "Running", timeout=LIVE)
    expect(row).to_contain_text("from-the-wheel")
    assert_not_reloaded(page)
