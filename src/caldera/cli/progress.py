"""Rich progress bars for long runs, on stderr and only where a person is watching."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from caldera.sim import Scenario

__all__ = ["sim_progress"]


@contextmanager
def sim_progress(
    scenario: Scenario, quiet: bool, label: str | None = None
) -> Iterator[Callable[[float], None] | None]:
    """Yield a callback taking simulated time, or None when no bar should show."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    last_submit = max((s.spec.submit for s in scenario.submissions), default=0.0)
    horizon = scenario.until or max(last_submit, 1.0)
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("simulated {task.fields[day]:.1f} d"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(label or scenario.name, total=horizon, day=0.0)

        def tick(t: float) -> None:
            bar.update(task, completed=min(t, horizon), day=t / 86400)

        yield tick
