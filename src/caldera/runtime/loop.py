"""The scheduling loop every runtime drives: when the cycle runs, and how often in a row.

    due? ──▶ repeat (at most MAX_CYCLES_AT_ONCE):
                snapshot(now) ─▶ decide(snapshot) ─▶ apply(decisions, snapshot) ─▶ after
             while the cycle released held jobs or ended a throttle (`run_again`)

A runtime supplies only what differs: its clock, how it snapshots (the service holds sick
GPUs back, the controller closes queues Volcano refuses), how it decides (the core, timed for
/metrics; a benchmark's recorded decisions) and how it applies (the kernel, then the service's
commit or the controller's writes). `SchedulerLoop` keeps the rest, once:

- **repeat until quiet** (`run`): a cycle that releases held jobs or ends a throttle runs
  again at once, since jobs it could not start a moment ago may start now;
- **timers** (`due`, `next_due`): a cycle is due when something changed (`needed`; the
  service waits out `gap` so one cycle serves a burst of submissions), when the wake-up the
  last decisions asked for has come (grace-period ends, throttle timeouts, cooldowns, window
  edges), or when `timer` seconds passed since the last one (effective weights move with
  time). The simulator runs a cycle at every instant of its event queue and turns each
  wake-up into an event of its own (`after`).

Stopping a broken gang is the kernel's (`Kernel.stop_gang`), for every runtime.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from caldera.core import Decisions, Snapshot, ThrottleOff

__all__ = ["MAX_CYCLES_AT_ONCE", "TIMER", "SchedulerLoop", "run_again"]

# Cycles run back to back at one instant, at most: each may release held jobs or end a throttle
# (`run_again`), and a bound keeps one instant from running forever.
MAX_CYCLES_AT_ONCE = 8

TIMER = 5.0
"""Seconds: the cycle runs at least this often in the service and the controller (effective
weights move with time, and nothing else would wake a quiet cluster's loop)."""

_UNLOCKED = nullcontext()


def run_again(decisions: Decisions) -> bool:
    """Whether the cycle must run again at once: it released held jobs or ended a throttle,
    so jobs it could not start a moment ago may start now."""
    return bool(decisions.releases) or any(
        isinstance(change, ThrottleOff) for change in decisions.throttles
    )


@dataclass
class SchedulerLoop:
    """When one runtime's cycle is due, and the repeat-until-quiet run of it.

    `clock`: the runtime's time (the wall clock, a test's fake one, the simulator's event
    time). `gap`: seconds a needed cycle waits after the last one (0: none). `timer`:
    seconds after which a cycle is due anyway. `needed`: something changed since the last
    cycle; anyone may set it. `wakeup`: the time the last decisions asked to be woken at.
    """

    clock: Callable[[], float]
    gap: float = 0.0
    timer: float = TIMER
    needed: bool = True
    wakeup: float | None = None
    last_cycle: float = -math.inf

    def due(self, now: float) -> bool:
        """Whether a cycle should run at `now`."""
        since = now - self.last_cycle
        return (
            (self.needed and (not self.gap or since >= self.gap))
            or (self.wakeup is not None and now >= self.wakeup)
            or since >= self.timer
        )

    def next_due(self) -> float | None:
        """When a cycle comes due with nothing else happening: the decisions' wake-up or the
        timer (once a cycle ran). None: not by time alone."""
        timer = self.last_cycle + self.timer if self.last_cycle > -math.inf else None
        times = [t for t in (self.wakeup, timer) if t is not None]
        return min(times, default=None)

    def wake_at(self) -> float | None:
        """`next_due`, or the end of the gap when a cycle is needed: when a loop that sleeps
        between turns must wake (the service, whose API threads ask for cycles)."""
        due = self.next_due()
        if self.needed:
            due = min(due if due is not None else math.inf, self.last_cycle + self.gap)
        return due

    def run(
        self,
        snapshot: Callable[[float], Snapshot],
        decide: Callable[[Snapshot], Decisions],
        apply: Callable[[Decisions, Snapshot], None],
        *,
        lock: AbstractContextManager[object] = _UNLOCKED,
        after: Callable[[Decisions], None] | None = None,
    ) -> Decisions:
        """Run the cycle until it is quiet; apply each result. Returns the last decisions.

        Each cycle runs under `lock` (the service's: its API threads read the live jobs);
        `after` follows each, outside it (the service's spawns, the simulator's wake-up
        events)."""
        decisions = Decisions()
        for _ in range(MAX_CYCLES_AT_ONCE):
            with lock:
                self.needed = False
                now = self.clock()
                seen = snapshot(now)
                decisions = decide(seen)
                self.last_cycle = now
                apply(decisions, seen)
                self.wakeup = decisions.wakeup
            if after is not None:
                after(decisions)
            if not run_again(decisions):
                break
        return decisions
