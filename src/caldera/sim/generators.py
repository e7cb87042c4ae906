"""Workload generators named by `kind` in a scenario's `workload.generators`.

`stream` is expanded by the scenario loader itself; other kinds register here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from caldera.sim.workload import Workload

__all__ = ["GENERATORS", "generate", "register_generator"]

Generator = Callable[[dict[str, Any], Path], Workload]
GENERATORS: dict[str, Generator] = {}


def register_generator(kind: str) -> Callable[[Generator], Generator]:
    def wrap(function: Generator) -> Generator:
        GENERATORS[kind] = function
        return function

    return wrap


def generate(params: dict[str, Any], base: Path) -> Workload:
    _load_builtins()
    kind = params.get("kind")
    if kind not in GENERATORS:
        known = ", ".join(sorted(["stream", *GENERATORS]))
        raise ValueError(f"unknown generator kind {kind!r} (known: {known})")
    return GENERATORS[str(kind)](params, base)


def _load_builtins() -> None:
    with contextlib.suppress(ImportError):  # the numpy-based generators are optional
        import caldera.sim.burst
        import caldera.sim.production  # noqa: F401
