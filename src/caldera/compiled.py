"""The compiled decision core: `caldera.core` and `caldera.model` built with mypyc, used only
while it matches the sources beside it.

The core is strictly typed pure Python (STYLE.md), which mypyc (part of mypy) turns into C
extension modules that decide exactly the same, faster (docs/benchmarks.md: the burst's
instructions down by about a third). Building is optional: `make fast` builds the modules
in place next to their sources (`setup.py` with CALDERA_COMPILE=1), and a checkout without a
C compiler runs the same sources interpreted.

A compiled module that no longer matches its source would silently run old code after an
edit, so the build writes a digest of the sources it compiled (`DIGEST_FILE`), and importing
`caldera` checks it: when the sources changed since (or CALDERA_PURE=1), every module of the
core is loaded from its `.py` file instead, with a one-line note on stderr when stale. The
test suite runs interpreted (tests/conftest.py sets CALDERA_PURE, since tests wrap internals
of the core), and tests/sim/test_compiled.py checks in subprocesses that the compiled build
gives byte-identical simulator output.

One difference a reader of caldera's documents may see: a compiled class stores a field typed
`float` as a float, so a whole number given to it reads back as 9.0 where the sources keep 9.
Decisions do not change (9 == 9.0, and they hash alike); where such a field is written out
as text for a machine, it is written canonically (k8s/effects/render.py, a queue's time windows).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = [
    "DIGEST_FILE",
    "PACKAGES",
    "compiled_sources",
    "current",
    "digest",
    "install_guard",
    "status",
]

PACKAGES = ("core", "model")
"""The subpackages of `caldera` that mypyc compiles, with their own subpackages
(`caldera.core.shortcuts`): the pure, strictly typed core."""

DIGEST_FILE = "_compiled.digest"
"""Written next to this file by the build: the digest of the sources it compiled."""

_HERE = Path(__file__).resolve().parent
_NAMES = tuple(f"caldera.{package}" for package in PACKAGES)
_INSIDE = tuple(f"{name}." for name in _NAMES)


def compiled_sources(root: Path = _HERE) -> list[Path]:
    """The source files the build compiles, in a stable order: every module of `PACKAGES`,
    at any depth."""
    return sorted(path for package in PACKAGES for path in (root / package).rglob("*.py"))


def digest(root: Path = _HERE) -> str:
    """SHA-256 over the compiled sources' names and contents."""
    hasher = hashlib.sha256()
    for path in compiled_sources(root):
        hasher.update(path.relative_to(root).as_posix().encode())
        hasher.update(b"\0")
        hasher.update(path.read_bytes())
        hasher.update(b"\0")
    return hasher.hexdigest()


def _built(root: Path) -> bool:
    """Are there extension modules beside the core's sources?"""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return any(
        path.name.endswith(suffixes) for package in PACKAGES for path in (root / package).rglob("*")
    )


def _stale(root: Path) -> bool:
    stamp = root / DIGEST_FILE
    return not stamp.is_file() or stamp.read_text().strip() != digest(root)


def current(root: Path = _HERE) -> bool:
    """Is there a compiled core built from exactly these sources?"""
    return _built(root) and not _stale(root)


def status() -> str:
    """How the core runs in this process: compiled, interpreted, or stale (built, but from
    other sources: interpreted)."""
    import caldera.core.cycle

    if (caldera.core.cycle.__file__ or "").endswith(".py"):
        return "stale" if _built(_HERE) and _stale(_HERE) else "interpreted"
    return "compiled"


class _SourcesOnly(importlib.abc.MetaPathFinder):
    """Finds the core's modules as `.py` files only, ahead of the path finder (which prefers
    an extension module beside its source)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if path is None or (fullname not in _NAMES and not fullname.startswith(_INSIDE)):
            return None
        loaders = [(importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)]
        for entry in path:
            spec = importlib.machinery.FileFinder(entry, *loaders).find_spec(fullname, target)
            if spec is not None:
                return spec
        return None


def install_guard() -> None:
    """Called when `caldera` is imported: load the core from its sources when the compiled
    modules do not match them, or when CALDERA_PURE=1 asks for it."""
    if any(finder.__class__ is _SourcesOnly for finder in sys.meta_path):
        return
    pure = os.environ.get("CALDERA_PURE", "") not in ("", "0")
    if not pure:
        try:
            if not _built(_HERE) or not _stale(_HERE):
                return
        except OSError:  # an unreadable install: let the normal import say what is wrong
            return
        print(
            "caldera: the compiled core is older than its sources; running the sources "
            "(rebuild with `make fast`)",
            file=sys.stderr,
        )
    sys.meta_path.insert(0, _SourcesOnly())
