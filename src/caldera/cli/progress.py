"""Rich progress bars for long runs, on stderr and only where a person is watching.

`sim_progress` shows one bar for one simulation; `sim_bars` shows several at once (one per
policy of a parallel `caldera compare`), each added by label and driven by its own callback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from caldera.sim import Scenario

__all__ = ["AddBar", "Tick", "horizon", "shows_progress", "sim_bars", "sim_progress"]

Tick = Callable[[float], None]
"""Called with the simulated time reached (seconds)."""

AddBar = Callable[[str], Tick]
"""Adds a bar with this label; returns the callback that moves it."""


def shows_progress(quiet: bool) -> bool:
    """Bars only where a person is watching: not asked to be quiet, stderr a terminal."""
    return not quiet and sys.stderr.isatty()


def horizon(scenario: Scenario) -> float:
    """The simulated time a run of `scenario` is expected to reach: its `until`, else the
    last submission (runs go on while jobs finish; the bar then stays full)."""
    last_submit = max((s.spec.submit for s in scenario.submissions), default=0.0)
    return scenario.until or max(last_submit, 1.0)


@contextmanager
def sim_bars(scenario: Scenario, quiet: bool) -> Iterator[AddBar | None]:
    """Yield a function adding one bar per label, or None when no bar should show."""
    if not shows_progress(quiet):
        yield None
        return
    total = horizon(scenario)
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("simulated {task.fields[day]:.1f} d"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:

        def add(label: str) -> Tick:
            # The clock of a bar starts with its first tick: a policy waiting for a free
            # worker shows no time yet.
            task = bar.add_task(label, total=total, day=0.0, start=False)
            started = False

            def tick(t: float) -> None:
                nonlocal started
                if not started:
                    bar.start_task(task)
                    started = True
                bar.update(task, completed=min(t, total), day=t / 86400)

            return tick

        yield add


@contextmanager
def sim_progress(
    scenario: Scenario, quiet: bool, label: str | None = None
) -> Iterator[Tick | None]:
    """Yield a callback taking simulated time, or None when no bar should show."""
    with sim_bars(scenario, quiet) as add:
        yield None if add is None else add(label or scenario.name)
