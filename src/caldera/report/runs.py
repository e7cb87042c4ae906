"""Run one scenario's job list through several policies, one after another.

Every policy sees the same cluster, queues and submissions (`Scenario.with_policy`), so the
rows of the comparison differ only by what the policies decided.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from caldera.sim import Scenario, Simulator

__all__ = ["DEFAULT_POLICIES", "PolicyRun", "order_policies", "run_policies"]

DEFAULT_POLICIES = ("caldera", "volcano", "priority-kill", "fifo")
"""The comparison everyone looks for: caldera beside the three baselines (BASELINES.md)."""

ProgressFactory = Callable[[Scenario, str], AbstractContextManager[Callable[[float], None] | None]]


@dataclass(frozen=True)
class PolicyRun:
    """One policy's run: the §6 document, the utilization series and how long it took."""

    policy: str
    result: dict[str, Any]
    series: tuple[tuple[float, float], ...]  # (t, allocated GPUs) at every change
    gpus: float  # GPUs, MIG slices counted by their GPU-equivalent (caldera.model.mig)
    wall_seconds: float
    warmup: float = 0.0  # seconds at the start the metrics leave out


def order_policies(requested: Sequence[str] | None, known: Sequence[str]) -> list[str]:
    """The requested policies in the order given, or every known one (caldera first, then the
    baselines in the seeds' order, then the rest alphabetically)."""
    if requested:
        return list(dict.fromkeys(requested))
    preferred = [name for name in DEFAULT_POLICIES if name in known]
    return preferred + sorted(set(known) - set(preferred))


def _no_progress(scenario: Scenario, label: str) -> AbstractContextManager[None]:
    return nullcontext()


def run_policies(
    scenario: Scenario,
    policies: Sequence[str],
    progress: ProgressFactory | None = None,
) -> Iterator[PolicyRun]:
    """Simulate `scenario` under each policy in turn; yields as each run finishes."""
    factory = progress or _no_progress
    for name in policies:
        variant = scenario.with_policy(name)
        began = time.perf_counter()
        with factory(variant, name) as tick:
            simulator = Simulator(variant, progress=tick).run()
        result = simulator.result()
        yield PolicyRun(
            policy=name,
            result=result,
            series=tuple(simulator.recorder.series),
            gpus=sum(node.capacity_milli for node in variant.nodes) / 1000,
            wall_seconds=time.perf_counter() - began,
            warmup=variant.warmup,
        )
