"""Trace files from ../shared (the Philly run times, the OpenB node and pod lists): where to
find them, and how to read the Philly run times.

The production and burst generators draw run times from the same Philly column, and the
OpenB benchmark reads its lists from the same folder: one search rule and one reader for all
of them, so a checkout beside ../shared, or $CALDERA_SHARED, works the same everywhere.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["PHILLY_RUNTIMES", "find_shared_file", "load_runtimes", "runtimes_path"]

PHILLY_RUNTIMES = Path("traces") / "philly" / "philly_runtime.csv"
"""Where the Philly run times live inside ../shared."""


def find_shared_file(relative: Path, bases: Sequence[Path]) -> Path | None:
    """`shared/<relative>` beside any of `bases` or their parents (the repo sits beside
    ../shared), or under $CALDERA_SHARED."""
    env = os.environ.get("CALDERA_SHARED")
    if env and (Path(env) / relative).is_file():
        return Path(env) / relative
    for base in bases:
        for folder in (base.resolve(), *base.resolve().parents):
            candidate = folder / "shared" / relative
            if candidate.is_file():
                return candidate
    return None


@functools.lru_cache(maxsize=4)
def load_runtimes(path: Path) -> np.ndarray:
    """The `runtime` column (seconds) as a float array."""
    try:
        with path.open(encoding="utf-8") as handle:
            header = handle.readline().strip()
            if header != "runtime":
                raise ValueError(f"{path.name}: expected a single 'runtime' column")
            values = np.loadtxt(handle, dtype=float, ndmin=1)
    except FileNotFoundError:
        raise ValueError(f"research.runtimes: {path}: no such file") from None
    if values.size == 0:
        raise ValueError(f"{path.name}: no run times")
    return values


def runtimes_path(given: str | None, base: Path, where: str, key: str) -> Path:
    """The run-time file a generator reads: `given` (relative to the scenario's folder `base`),
    else the Philly column found in ../shared. `where` names the generator's key in errors,
    `key` what the user may give instead."""
    if given is not None:
        return base / given
    found = find_shared_file(PHILLY_RUNTIMES, [base, Path.cwd(), Path(__file__).parent])
    if found is None:
        raise ValueError(
            f"{where}: philly_runtime.csv not found in ../shared/traces/philly; give "
            f"{key}: PATH or set CALDERA_SHARED"
        )
    return found
