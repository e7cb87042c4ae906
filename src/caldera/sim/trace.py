"""Trace loaders for `workload.trace` (format `openb`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from caldera.sim.workload import Workload

if TYPE_CHECKING:
    from caldera.sim.scenario import TraceModel

__all__ = ["load_trace"]


def load_trace(model: TraceModel, base: Path) -> Workload:
    from caldera.sim.openb import load_openb

    workload: Workload = load_openb(model, base)
    return workload
