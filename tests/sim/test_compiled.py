"""The compiled decision core (caldera/compiled.py) decides byte for byte what its sources do,
and is never used when it does not match them.

The suite itself runs the sources (tests/conftest.py): these tests start `caldera` in
subprocesses, one with the compiled modules and one with CALDERA_PURE=1, on the same scenario
files, and compare the whole `simulate --json` output. Where `make fast` could not build the
core (no C compiler) they skip with one line; under CI=true the build must exist.
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from caldera.compiled import DIGEST_FILE, current, digest

CALDERA = Path(sys.executable).with_name("caldera")
EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "caldera" / "examples"
BURSTS = [(1200, 150, 23), (2500, 813, 7), (600, 40, 5)]  # jobs, nodes, seed: crowded ones


def _env(pure: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["CALDERA_PURE"] = "1" if pure else "0"
    return env


def _python(code: str, pure: bool) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(pure), capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture(scope="module")
def built() -> None:
    if current():
        return
    if os.environ.get("CI") == "true":
        pytest.fail("CI needs the compiled core: `make fast` (scripts/build-core.sh) did not build")
    pytest.skip("no compiled core matching the sources (`make fast` builds it; needs a C compiler)")


def test_the_compiled_modules_are_loaded_unless_the_sources_are_asked_for(built: None) -> None:
    where = "import caldera.compiled as c, caldera.core.victims as v; print(c.status(), v.__file__)"
    status, path = _python(where, pure=False).split()
    assert status == "compiled" and not path.endswith(".py")
    status, path = _python(where, pure=True).split()
    assert status == "interpreted" and path.endswith("victims.py")


def test_the_compiled_core_decides_as_its_sources(
    built: None, shared: Path, tmp_path: Path
) -> None:
    files = [*sorted(shared.glob("examples/*.yaml")), EXAMPLES / "demo.yaml"]
    for jobs, nodes, seed in BURSTS:
        path = tmp_path / f"burst-{jobs}-{nodes}-{seed}.yaml"
        generator = f"{{kind: burst, seed: {seed}, jobs: {jobs}, nodes: {nodes}}}"
        path.write_text(f"workload: {{generators: [{generator}]}}\n")
        files.append(path)

    def simulate(run: tuple[Path, bool]) -> bytes:
        path, pure = run
        done = subprocess.run(
            [str(CALDERA), "simulate", str(path), "--json"],
            env=_env(pure),
            capture_output=True,
            check=True,
        )
        assert not done.stderr, done.stderr  # no "stale" note: the compiled core ran
        return done.stdout

    runs = [(path, pure) for path in files for pure in (False, True)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outputs = list(pool.map(simulate, runs))
    for number, path in enumerate(files):
        compiled, interpreted = outputs[2 * number], outputs[2 * number + 1]
        assert b'"events"' in compiled
        assert compiled == interpreted, f"{path.name}: the compiled core decided otherwise"


def _fake_build(root: Path) -> Path:
    """A package with the core's layout, one source each, and an extension module."""
    for package in ("core", "model"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text(f'"""{package}"""\n')
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (root / "core" / f"cycle{suffix}").write_bytes(b"\0")
    return root / "core" / "__init__.py"


def test_a_build_counts_only_while_its_sources_are_unchanged(tmp_path: Path) -> None:
    source = _fake_build(tmp_path)
    assert not current(tmp_path)  # built, never stamped: a build that failed half way
    (tmp_path / DIGEST_FILE).write_text(digest(tmp_path) + "\n")
    assert current(tmp_path)
    source.write_text('"""core, edited"""\n')
    assert not current(tmp_path)
    source.write_text('"""core"""\n')
    assert current(tmp_path)
    (tmp_path / "model" / "new.py").write_text("X = 1\n")  # a module added since
    assert not current(tmp_path)


def test_a_stale_build_runs_the_sources_and_says_so(built: None, tmp_path: Path) -> None:
    """The real package, copied with its compiled modules; one source edited after."""
    import caldera

    package = Path(caldera.__file__).resolve().parent
    copy = tmp_path / "src"
    shutil.copytree(package, copy / "caldera", ignore=shutil.ignore_patterns("__pycache__"))
    for library in package.parent.glob("caldera_core__mypyc*"):
        shutil.copy2(library, copy)
    weight = copy / "caldera" / "core" / "weight.py"
    weight.write_text(weight.read_text() + "\nEDITED = True\n")
    env = _env(pure=False)
    env["PYTHONPATH"] = str(copy)
    code = "import caldera.compiled as c, caldera.core.weight as w; print(c.status(), w.EDITED)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["stale", "True"]
    assert done.stderr.count("\n") == 1 and "older than its sources" in done.stderr
